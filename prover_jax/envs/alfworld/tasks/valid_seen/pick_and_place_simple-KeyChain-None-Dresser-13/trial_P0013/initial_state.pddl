(define (problem alfworld_task_13)
    (:domain alfred)
    (:objects
        agent1 - agent
        CDType - otype
        KeyChainType - otype
        PencilType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        KeyChain_bar_1 - object
        CD_bar_1 - object
        Pencil_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_0_bar_2_bar_0_bar_0 - location
        loc_bar_0_bar_3_bar_3_bar_45 - location
        loc_bar_0_bar__minus_3_bar_2_bar_30 - location
        loc_bar_3_bar_0_bar_1_bar_15 - location
        loc_bar_3_bar_1_bar_0_bar_0 - location
        loc_bar_3_bar_2_bar_3_bar_45 - location
        loc_bar__minus_3_bar__minus_1_bar_1_bar_15 - location
        loc_bar__minus_3_bar__minus_2_bar_2_bar_30 - location
    )
    (:init
        (atLocation agent1 loc_bar_0_bar_2_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar_3_bar_0_bar_1_bar_15)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar__minus_3_bar__minus_2_bar_2_bar_30)
        (canContain DeskType CDType)
        (canContain DeskType KeyChainType)
        (canContain DeskType PencilType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_3_bar_1_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType CDType)
        (canContain DrawerType KeyChainType)
        (canContain DrawerType PencilType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar__minus_3_bar__minus_1_bar_1_bar_15)
        (canContain DresserType CDType)
        (canContain DresserType KeyChainType)
        (canContain DresserType PencilType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_3_bar_2_bar_3_bar_45)
        (canContain GarbageCanType CDType)
        (canContain GarbageCanType PencilType)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar_0_bar__minus_3_bar_2_bar_30)
        (canContain ShelfType CDType)
        (canContain ShelfType KeyChainType)
        (canContain ShelfType PencilType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar_0_bar_3_bar_3_bar_45)
        (canContain SideTableType CDType)
        (canContain SideTableType KeyChainType)
        (canContain SideTableType PencilType)
        (objectType KeyChain_bar_1 KeyChainType)
        (inReceptacle KeyChain_bar_1 SideTable_bar_1)
        (objectAtLocation KeyChain_bar_1 loc_bar_0_bar_3_bar_3_bar_45)
        (pickupable KeyChain_bar_1)
        (wasInReceptacle KeyChain_bar_1 SideTable_bar_1)
        (objectType CD_bar_1 CDType)
        (inReceptacle CD_bar_1 Desk_bar_1)
        (objectAtLocation CD_bar_1 loc_bar__minus_3_bar__minus_2_bar_2_bar_30)
        (pickupable CD_bar_1)
        (objectType Pencil_bar_1 PencilType)
        (inReceptacle Pencil_bar_1 Drawer_bar_1)
        (objectAtLocation Pencil_bar_1 loc_bar_3_bar_1_bar_0_bar_0)
        (pickupable Pencil_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o KeyChainType) (receptacleType ?r DresserType) (inReceptacle ?o ?r) )))
)
