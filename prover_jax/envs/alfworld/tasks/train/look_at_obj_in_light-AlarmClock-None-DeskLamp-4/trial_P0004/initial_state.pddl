(define (problem alfworld_task_4)
    (:domain alfred)
    (:objects
        agent1 - agent
        AlarmClockType - otype
        BookType - otype
        CellPhoneType - otype
        DeskLampType - otype
        BedType - rtype
        DeskType - rtype
        DrawerType - rtype
        DresserType - rtype
        GarbageCanType - rtype
        ShelfType - rtype
        SideTableType - rtype
        AlarmClock_bar_1 - object
        DeskLamp_bar_1 - object
        Book_bar_1 - object
        CellPhone_bar_1 - object
        Bed_bar_1 - receptacle
        Desk_bar_1 - receptacle
        SideTable_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Dresser_bar_1 - receptacle
        Shelf_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_0_bar_0_bar_2_bar_30 - location
        loc_bar_0_bar__minus_1_bar_3_bar_45 - location
        loc_bar_0_bar__minus_2_bar_0_bar_0 - location
        loc_bar_3_bar_3_bar_1_bar_15 - location
        loc_bar_3_bar__minus_2_bar_3_bar_45 - location
        loc_bar_3_bar__minus_3_bar_0_bar_0 - location
        loc_bar__minus_3_bar_1_bar_2_bar_30 - location
        loc_bar__minus_3_bar_2_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_0_bar__minus_2_bar_0_bar_0)
        (receptacleType Bed_bar_1 BedType)
        (receptacleAtLocation Bed_bar_1 loc_bar_3_bar_3_bar_1_bar_15)
        (canContain BedType BookType)
        (canContain BedType CellPhoneType)
        (receptacleType Desk_bar_1 DeskType)
        (receptacleAtLocation Desk_bar_1 loc_bar__minus_3_bar_1_bar_2_bar_30)
        (canContain DeskType AlarmClockType)
        (canContain DeskType BookType)
        (canContain DeskType CellPhoneType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_3_bar__minus_3_bar_0_bar_0)
        (openable Drawer_bar_1)
        (canContain DrawerType BookType)
        (canContain DrawerType CellPhoneType)
        (receptacleType Dresser_bar_1 DresserType)
        (receptacleAtLocation Dresser_bar_1 loc_bar__minus_3_bar_2_bar_1_bar_15)
        (canContain DresserType AlarmClockType)
        (canContain DresserType BookType)
        (canContain DresserType CellPhoneType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_3_bar__minus_2_bar_3_bar_45)
        (receptacleType Shelf_bar_1 ShelfType)
        (receptacleAtLocation Shelf_bar_1 loc_bar_0_bar_0_bar_2_bar_30)
        (canContain ShelfType AlarmClockType)
        (canContain ShelfType BookType)
        (canContain ShelfType CellPhoneType)
        (receptacleType SideTable_bar_1 SideTableType)
        (receptacleAtLocation SideTable_bar_1 loc_bar_0_bar__minus_1_bar_3_bar_45)
        (canContain SideTableType AlarmClockType)
        (canContain SideTableType BookType)
        (canContain SideTableType CellPhoneType)
        (objectType AlarmClock_bar_1 AlarmClockType)
        (inReceptacle AlarmClock_bar_1 Drawer_bar_1)
        (objectAtLocation AlarmClock_bar_1 loc_bar_3_bar__minus_3_bar_0_bar_0)
        (pickupable AlarmClock_bar_1)
        (wasInReceptacle AlarmClock_bar_1 Drawer_bar_1)
        (objectType DeskLamp_bar_1 DeskLampType)
        (inReceptacle DeskLamp_bar_1 SideTable_bar_1)
        (objectAtLocation DeskLamp_bar_1 loc_bar_0_bar__minus_1_bar_3_bar_45)
        (toggleable DeskLamp_bar_1)
        (objectType Book_bar_1 BookType)
        (inReceptacle Book_bar_1 Desk_bar_1)
        (objectAtLocation Book_bar_1 loc_bar__minus_3_bar_1_bar_2_bar_30)
        (pickupable Book_bar_1)
        (objectType CellPhone_bar_1 CellPhoneType)
        (inReceptacle CellPhone_bar_1 Bed_bar_1)
        (objectAtLocation CellPhone_bar_1 loc_bar_3_bar_3_bar_1_bar_15)
        (pickupable CellPhone_bar_1)
    )
    (:goal (and (exists (?t - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?t DeskLampType) (toggleable ?t) (isToggled ?t) (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?t ?r))) (exists (?o - object ?a - agent) (and (objectType ?o AlarmClockType) (holds ?a ?o)))))
)
