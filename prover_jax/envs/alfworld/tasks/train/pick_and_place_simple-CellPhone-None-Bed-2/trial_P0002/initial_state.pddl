(define (problem alfworld_task_2)
    (:domain alfred)
    (:objects
        agent1 - agent
        BookType - otype
        CellPhoneType - otype
        KeyChainType - otype
        PenType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        CellPhone_bar_1 - object
        Book_bar_1 - object
        Pen_bar_1 - object
        KeyChain_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_1_bar_0_bar_0_bar_0 - location
        loc_bar_1_bar_1_bar_3_bar_45 - location
        loc_bar_1_bar__minus_1_bar_1_bar_15 - location
        loc_bar_4_bar__minus_2_bar_1_bar_15 - location
        loc_bar_4_bar__minus_3_bar_2_bar_30 - location
        loc_bar__minus_2_bar_1_bar_0_bar_0 - location
        loc_bar__minus_2_bar_2_bar_3_bar_45 - location
        loc_bar__minus_2_bar_3_bar_2_bar_30 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_2_bar_1_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar_1_bar__minus_1_bar_1_bar_15)
        (canContain BedType BookType)
        (canContain BedType CellPhoneType)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar_4_bar__minus_3_bar_2_bar_30)
        (canContain DeskType BookType)
        (canContain DeskType CellPhoneType)
        (canContain DeskType KeyChainType)
        (canContain DeskType PenType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_1_bar_0_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType BookType)
        (canContain DrawerType CellPhoneType)
        (canContain DrawerType KeyChainType)
        (canContain DrawerType PenType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar_4_bar__minus_2_bar_1_bar_15)
        (canContain DresserType BookType)
        (canContain DresserType CellPhoneType)
        (canContain DresserType KeyChainType)
        (canContain DresserType PenType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_1_bar_1_bar_3_bar_45)
        (canContain GarbageCanType PenType)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar__minus_2_bar_3_bar_2_bar_30)
        (canContain ShelfType BookType)
        (canContain ShelfType CellPhoneType)
        (canContain ShelfType KeyChainType)
        (canContain ShelfType PenType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar__minus_2_bar_2_bar_3_bar_45)
        (canContain SideTableType BookType)
        (canContain SideTableType CellPhoneType)
        (canContain SideTableType KeyChainType)
        (canContain SideTableType PenType)
        (objectType CellPhone_bar_1 CellPhoneType)
        (inReceptacle CellPhone_bar_1 Drawer_bar_1)
        (objectAtLocation CellPhone_bar_1 loc_bar_1_bar_0_bar_0_bar_0)
        (pickupable CellPhone_bar_1)
        (wasInReceptacle CellPhone_bar_1 Drawer_bar_1)
        (objectType Book_bar_1 BookType)
        (inReceptacle Book_bar_1 Desk_bar_1)
        (objectAtLocation Book_bar_1 loc_bar_4_bar__minus_3_bar_2_bar_30)
        (pickupable Book_bar_1)
        (objectType Pen_bar_1 PenType)
        (inReceptacle Pen_bar_1 SideTable_bar_1)
        (objectAtLocation Pen_bar_1 loc_bar__minus_2_bar_2_bar_3_bar_45)
        (pickupable Pen_bar_1)
        (objectType KeyChain_bar_1 KeyChainType)
        (inReceptacle KeyChain_bar_1 Dresser_bar_1)
        (objectAtLocation KeyChain_bar_1 loc_bar_4_bar__minus_2_bar_1_bar_15)
        (pickupable KeyChain_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o CellPhoneType) (receptacleType ?r BedType) (inReceptacle ?o ?r) )))
)
