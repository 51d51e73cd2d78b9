(define (problem alfworld_task_12)
    (:domain alfred)
    (:objects
        agent1 - agent
        BookType - otype
        CDType - otype
        PenType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        CD_bar_1 - object
        CD_bar_2 - object
        Pen_bar_1 - object
        Book_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_2_bar_0_bar_3_bar_45 - location
        loc_bar_2_bar__minus_1_bar_0_bar_0 - location
        loc_bar_2_bar__minus_2_bar_1_bar_15 - location
        loc_bar__minus_1_bar_0_bar_0_bar_0 - location
        loc_bar__minus_1_bar_1_bar_3_bar_45 - location
        loc_bar__minus_1_bar_2_bar_2_bar_30 - location
        loc_bar__minus_4_bar_3_bar_2_bar_30 - location
        loc_bar__minus_4_bar__minus_3_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_1_bar_0_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar_2_bar__minus_2_bar_1_bar_15)
        (canContain BedType BookType)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar__minus_4_bar_3_bar_2_bar_30)
        (canContain DeskType BookType)
        (canContain DeskType CDType)
        (canContain DeskType PenType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_2_bar__minus_1_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType BookType)
        (canContain DrawerType CDType)
        (canContain DrawerType PenType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar__minus_4_bar__minus_3_bar_1_bar_15)
        (canContain DresserType BookType)
        (canContain DresserType CDType)
        (canContain DresserType PenType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_2_bar_0_bar_3_bar_45)
        (canContain GarbageCanType CDType)
        (canContain GarbageCanType PenType)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar__minus_1_bar_2_bar_2_bar_30)
        (canContain ShelfType BookType)
        (canContain ShelfType CDType)
        (canContain ShelfType PenType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar__minus_1_bar_1_bar_3_bar_45)
        (canContain SideTableType BookType)
        (canContain SideTableType CDType)
        (canContain SideTableType PenType)
        (objectType CD_bar_1 CDType)
        (inReceptacle CD_bar_1 Desk_bar_1)
        (objectAtLocation CD_bar_1 loc_bar__minus_4_bar_3_bar_2_bar_30)
        (pickupable CD_bar_1)
        (wasInReceptacle CD_bar_1 Desk_bar_1)
        (objectType CD_bar_2 CDType)
        (inReceptacle CD_bar_2 Drawer_bar_1)
        (objectAtLocation CD_bar_2 loc_bar_2_bar__minus_1_bar_0_bar_0)
        (pickupable CD_bar_2)
        (wasInReceptacle CD_bar_2 Drawer_bar_1)
        (objectType Pen_bar_1 PenType)
        (inReceptacle Pen_bar_1 Shelf_bar_1)
        (objectAtLocation Pen_bar_1 loc_bar__minus_1_bar_2_bar_2_bar_30)
        (pickupable Pen_bar_1)
        (objectType Book_bar_1 BookType)
        (inReceptacle Book_bar_1 Bed_bar_1)
        (objectAtLocation Book_bar_1 loc_bar_2_bar__minus_2_bar_1_bar_15)
        (pickupable Book_bar_1)
    )
    (:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o1 CDType) (objectType ?o2 CDType) (receptacleType ?r ShelfType) (inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r))))
)
