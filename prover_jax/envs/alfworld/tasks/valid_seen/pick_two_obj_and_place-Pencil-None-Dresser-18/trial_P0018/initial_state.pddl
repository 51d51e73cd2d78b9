(define (problem alfworld_task_18)
    (:domain alfred)
    (:objects
        agent1 - agent
        BookType - otype
        PenType - otype
        PencilType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        Pencil_bar_1 - object
        Pencil_bar_2 - object
        Pen_bar_1 - object
        Book_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_2_bar_1_bar_2_bar_30 - location
        loc_bar_2_bar_2_bar_1_bar_15 - location
        loc_bar__minus_1_bar_3_bar_1_bar_15 - location
        loc_bar__minus_1_bar__minus_2_bar_3_bar_45 - location
        loc_bar__minus_1_bar__minus_3_bar_0_bar_0 - location
        loc_bar__minus_4_bar_0_bar_2_bar_30 - location
        loc_bar__minus_4_bar__minus_1_bar_3_bar_45 - location
        loc_bar__minus_4_bar__minus_2_bar_0_bar_0 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_4_bar__minus_2_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar__minus_1_bar_3_bar_1_bar_15)
        (canContain BedType BookType)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar_2_bar_1_bar_2_bar_30)
        (canContain DeskType BookType)
        (canContain DeskType PenType)
        (canContain DeskType PencilType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar__minus_1_bar__minus_3_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType BookType)
        (canContain DrawerType PenType)
        (canContain DrawerType PencilType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar_2_bar_2_bar_1_bar_15)
        (canContain DresserType BookType)
        (canContain DresserType PenType)
        (canContain DresserType PencilType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar__minus_1_bar__minus_2_bar_3_bar_45)
        (canContain GarbageCanType PenType)
        (canContain GarbageCanType PencilType)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar__minus_4_bar_0_bar_2_bar_30)
        (canContain ShelfType BookType)
        (canContain ShelfType PenType)
        (canContain ShelfType PencilType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar__minus_4_bar__minus_1_bar_3_bar_45)
        (canContain SideTableType BookType)
        (canContain SideTableType PenType)
        (canContain SideTableType PencilType)
        (objectType Pencil_bar_1 PencilType)
        (inReceptacle Pencil_bar_1 Desk_bar_1)
        (objectAtLocation Pencil_bar_1 loc_bar_2_bar_1_bar_2_bar_30)
        (pickupable Pencil_bar_1)
        (wasInReceptacle Pencil_bar_1 Desk_bar_1)
        (objectType Pencil_bar_2 PencilType)
        (inReceptacle Pencil_bar_2 SideTable_bar_1)
        (objectAtLocation Pencil_bar_2 loc_bar__minus_4_bar__minus_1_bar_3_bar_45)
        (pickupable Pencil_bar_2)
        (wasInReceptacle Pencil_bar_2 SideTable_bar_1)
        (objectType Pen_bar_1 PenType)
        (inReceptacle Pen_bar_1 Drawer_bar_1)
        (objectAtLocation Pen_bar_1 loc_bar__minus_1_bar__minus_3_bar_0_bar_0)
        (pickupable Pen_bar_1)
        (objectType Book_bar_1 BookType)
        (inReceptacle Book_bar_1 Shelf_bar_1)
        (objectAtLocation Book_bar_1 loc_bar__minus_4_bar_0_bar_2_bar_30)
        (pickupable Book_bar_1)
    )
    (:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o1 PencilType) (objectType ?o2 PencilType) (receptacleType ?r DresserType) (inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r))))
)
