(define (problem alfworld_task_17)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        BreadType - otype
        PlateType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Bread_bar_1 - object
        Apple_bar_1 - object
        Plate_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_1_bar_0_bar_1_bar_15 - location
        loc_bar_1_bar_1_bar_0_bar_0 - location
        loc_bar_1_bar__minus_1_bar_2_bar_30 - location
        loc_bar_4_bar_3_bar_0_bar_0 - location
        loc_bar_4_bar__minus_2_bar_2_bar_30 - location
        loc_bar_4_bar__minus_3_bar_3_bar_45 - location
        loc_bar__minus_2_bar_1_bar_1_bar_15 - location
        loc_bar__minus_2_bar_2_bar_0_bar_0 - location
        loc_bar__minus_2_bar_3_bar_3_bar_45 - location
    )
    (:init
        (atLocation agent1 loc_bar_4_bar_3_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_1_bar__minus_1_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType PlateType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_2_bar_1_bar_1_bar_15)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType BreadType)
        (canContain CounterTopType PlateType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_2_bar_3_bar_3_bar_45)
        (canContain DiningTableType AppleType)
        (canContain DiningTableType BreadType)
        (canContain DiningTableType PlateType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_4_bar__minus_3_bar_3_bar_45)
        (openable Drawer_bar_1)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_2_bar_2_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType AppleType)
        (canContain FridgeType BreadType)
        (canContain FridgeType PlateType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_1_bar_1_bar_0_bar_0)
        (canContain GarbageCanType AppleType)
        (canContain GarbageCanType BreadType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_1_bar_0_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType BreadType)
        (canContain MicrowaveType PlateType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_4_bar__minus_2_bar_2_bar_30)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType PlateType)
        (objectType Bread_bar_1 BreadType)
        (inReceptacle Bread_bar_1 CounterTop_bar_1)
        (objectAtLocation Bread_bar_1 loc_bar__minus_2_bar_1_bar_1_bar_15)
        (pickupable Bread_bar_1)
        (heatable Bread_bar_1)
        (coolable Bread_bar_1)
        (wasInReceptacle Bread_bar_1 CounterTop_bar_1)
        (objectType Apple_bar_1 AppleType)
        (inReceptacle Apple_bar_1 Microwave_bar_1)
        (objectAtLocation Apple_bar_1 loc_bar_1_bar_0_bar_1_bar_15)
        (pickupable Apple_bar_1)
        (cleanable Apple_bar_1)
        (heatable Apple_bar_1)
        (coolable Apple_bar_1)
        (objectType Plate_bar_1 PlateType)
        (inReceptacle Plate_bar_1 Cabinet_bar_1)
        (objectAtLocation Plate_bar_1 loc_bar_1_bar__minus_1_bar_2_bar_30)
        (pickupable Plate_bar_1)
        (cleanable Plate_bar_1)
        (heatable Plate_bar_1)
        (coolable Plate_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o BreadType) (receptacleType ?r DiningTableType) (inReceptacle ?o ?r) (coolable ?o) (isCool ?o))))
)
