(define (problem alfworld_task_3)
    (:domain alfred)
    (:objects
        agent1 - agent
        BookType - otype
        CDType - otype
        DeskLampType - otype
        PencilType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        Book_bar_1 - object
        DeskLamp_bar_1 - object
        Pencil_bar_1 - object
        CD_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_2_bar_1_bar_1_bar_15 - location
        loc_bar_2_bar_2_bar_0_bar_0 - location
        loc_bar_2_bar_3_bar_3_bar_45 - location
        loc_bar__minus_1_bar_3_bar_0_bar_0 - location
        loc_bar__minus_1_bar__minus_2_bar_2_bar_30 - location
        loc_bar__minus_1_bar__minus_3_bar_3_bar_45 - location
        loc_bar__minus_4_bar_0_bar_1_bar_15 - location
        loc_bar__minus_4_bar__minus_1_bar_2_bar_30 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_1_bar_3_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar_2_bar_1_bar_1_bar_15)
        (canContain BedType BookType)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar__minus_4_bar__minus_1_bar_2_bar_30)
        (canContain DeskType BookType)
        (canContain DeskType CDType)
        (canContain DeskType PencilType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_2_bar_2_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType BookType)
        (canContain DrawerType CDType)
        (canContain DrawerType PencilType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar__minus_4_bar_0_bar_1_bar_15)
        (canContain DresserType BookType)
        (canContain DresserType CDType)
        (canContain DresserType PencilType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_2_bar_3_bar_3_bar_45)
        (canContain GarbageCanType CDType)
        (canContain GarbageCanType PencilType)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar__minus_1_bar__minus_2_bar_2_bar_30)
        (canContain ShelfType BookType)
        (canContain ShelfType CDType)
        (canContain ShelfType PencilType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar__minus_1_bar__minus_3_bar_3_bar_45)
        (canContain SideTableType BookType)
        (canContain SideTableType CDType)
        (canContain SideTableType PencilType)
        (objectType Book_bar_1 BookType)
        (inReceptacle Book_bar_1 Bed_bar_1)
        (objectAtLocation Book_bar_1 loc_bar_2_bar_1_bar_1_bar_15)
        (pickupable Book_bar_1)
        (wasInReceptacle Book_bar_1 Bed_bar_1)
        (objectType DeskLamp_bar_1 DeskLampType)
        (inReceptacle DeskLamp_bar_1 Desk_bar_1)
        (objectAtLocation DeskLamp_bar_1 loc_bar__minus_4_bar__minus_1_bar_2_bar_30)
        (toggleable DeskLamp_bar_1)
        (objectType Pencil_bar_1 PencilType)
        (inReceptacle Pencil_bar_1 Drawer_bar_1)
        (objectAtLocation Pencil_bar_1 loc_bar_2_bar_2_bar_0_bar_0)
        (pickupable Pencil_bar_1)
        (objectType CD_bar_1 CDType)
        (inReceptacle CD_bar_1 Shelf_bar_1)
        (objectAtLocation CD_bar_1 loc_bar__minus_1_bar__minus_2_bar_2_bar_30)
        (pickupable CD_bar_1)
    )
    (:goal (and (exists (?t - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?t DeskLampType) (toggleable ?t) (isToggled ?t) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?t ?r))) (exists (?o - object ?a - agent) (and (objectType ?o BookType) (holds ?a ?o)))))
)
