(define (problem alfworld_task_15)
    (:domain alfred)
    (:objects
        agent1 - agent
        BreadType - otype
        CupType - otype
        MugType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Mug_bar_1 - object
        Cup_bar_1 - object
        Bread_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_2_bar_0_bar_3_bar_45 - location
        loc_bar_2_bar_1_bar_2_bar_30 - location
        loc_bar_2_bar__minus_1_bar_0_bar_0 - location
        loc_bar__minus_1_bar_2_bar_2_bar_30 - location
        loc_bar__minus_1_bar_3_bar_1_bar_15 - location
        loc_bar__minus_1_bar__minus_3_bar_0_bar_0 - location
        loc_bar__minus_4_bar__minus_1_bar_3_bar_45 - location
        loc_bar__minus_4_bar__minus_2_bar_0_bar_0 - location
        loc_bar__minus_4_bar__minus_3_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_2_bar__minus_1_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar__minus_1_bar_2_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType CupType)
        (canContain CabinetType MugType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_4_bar__minus_3_bar_1_bar_15)
        (canContain CounterTopType BreadType)
        (canContain CounterTopType CupType)
        (canContain CounterTopType MugType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_4_bar__minus_1_bar_3_bar_45)
        (canContain DiningTableType BreadType)
        (canContain DiningTableType CupType)
        (canContain DiningTableType MugType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_2_bar_0_bar_3_bar_45)
        (openable Drawer_bar_1)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_4_bar__minus_2_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType BreadType)
        (canContain FridgeType CupType)
        (canContain FridgeType MugType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar__minus_1_bar__minus_3_bar_0_bar_0)
        (canContain GarbageCanType BreadType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar__minus_1_bar_3_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType BreadType)
        (canContain MicrowaveType CupType)
        (canContain MicrowaveType MugType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_2_bar_1_bar_2_bar_30)
        (canContain SinkBasinType CupType)
        (canContain SinkBasinType MugType)
        (objectType Mug_bar_1 MugType)
        (inReceptacle Mug_bar_1 Cabinet_bar_1)
        (objectAtLocation Mug_bar_1 loc_bar__minus_1_bar_2_bar_2_bar_30)
        (pickupable Mug_bar_1)
        (cleanable Mug_bar_1)
        (heatable Mug_bar_1)
        (coolable Mug_bar_1)
        (wasInReceptacle Mug_bar_1 Cabinet_bar_1)
        (objectType Cup_bar_1 CupType)
        (inReceptacle Cup_bar_1 CounterTop_bar_1)
        (objectAtLocation Cup_bar_1 loc_bar__minus_4_bar__minus_3_bar_1_bar_15)
        (pickupable Cup_bar_1)
        (cleanable Cup_bar_1)
        (heatable Cup_bar_1)
        (coolable Cup_bar_1)
        (objectType Bread_bar_1 BreadType)
        (inReceptacle Bread_bar_1 Fridge_bar_1)
        (objectAtLocation Bread_bar_1 loc_bar__minus_4_bar__minus_2_bar_0_bar_0)
        (pickupable Bread_bar_1)
        (heatable Bread_bar_1)
        (coolable Bread_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o MugType) (receptacleType ?r DiningTableType) (inReceptacle ?o ?r) (cleanable ?o) (isClean ?o))))
)
