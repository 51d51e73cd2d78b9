(define (problem alfworld_task_5)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        MugType - otype
        PlateType - otype
        SpoonType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Plate_bar_1 - object
        Mug_bar_1 - object
        Apple_bar_1 - object
        Spoon_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_1_bar_0_bar_0_bar_0 - location
        loc_bar_1_bar_1_bar_3_bar_45 - location
        loc_bar_1_bar_2_bar_2_bar_30 - location
        loc_bar_4_bar_0_bar_3_bar_45 - location
        loc_bar_4_bar__minus_1_bar_0_bar_0 - location
        loc_bar_4_bar__minus_2_bar_1_bar_15 - location
        loc_bar__minus_2_bar_3_bar_2_bar_30 - location
        loc_bar__minus_2_bar__minus_2_bar_0_bar_0 - location
        loc_bar__minus_2_bar__minus_3_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_1_bar_0_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar__minus_2_bar_3_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType MugType)
        (canContain CabinetType PlateType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar_4_bar__minus_2_bar_1_bar_15)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType MugType)
        (canContain CounterTopType PlateType)
        (canContain CounterTopType SpoonType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar_4_bar_0_bar_3_bar_45)
        (canContain DiningTableType AppleType)
        (canContain DiningTableType MugType)
        (canContain DiningTableType PlateType)
        (canContain DiningTableType SpoonType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_1_bar_1_bar_3_bar_45)
        (openable Drawer_bar_1)
        (canContain DrawerType SpoonType)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar_4_bar__minus_1_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType AppleType)
        (canContain FridgeType MugType)
        (canContain FridgeType PlateType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar__minus_2_bar__minus_2_bar_0_bar_0)
        (canContain GarbageCanType AppleType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar__minus_2_bar__minus_3_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType MugType)
        (canContain MicrowaveType PlateType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_1_bar_2_bar_2_bar_30)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType MugType)
        (canContain SinkBasinType PlateType)
        (canContain SinkBasinType SpoonType)
        (objectType Plate_bar_1 PlateType)
        (inReceptacle Plate_bar_1 DiningTable_bar_1)
        (objectAtLocation Plate_bar_1 loc_bar_4_bar_0_bar_3_bar_45)
        (pickupable Plate_bar_1)
        (cleanable Plate_bar_1)
        (heatable Plate_bar_1)
        (coolable Plate_bar_1)
        (wasInReceptacle Plate_bar_1 DiningTable_bar_1)
        (objectType Mug_bar_1 MugType)
        (inReceptacle Mug_bar_1 CounterTop_bar_1)
        (objectAtLocation Mug_bar_1 loc_bar_4_bar__minus_2_bar_1_bar_15)
        (pickupable Mug_bar_1)
        (cleanable Mug_bar_1)
        (heatable Mug_bar_1)
        (coolable Mug_bar_1)
        (objectType Apple_bar_1 AppleType)
        (inReceptacle Apple_bar_1 Fridge_bar_1)
        (objectAtLocation Apple_bar_1 loc_bar_4_bar__minus_1_bar_0_bar_0)
        (pickupable Apple_bar_1)
        (cleanable Apple_bar_1)
        (heatable Apple_bar_1)
        (coolable Apple_bar_1)
        (objectType Spoon_bar_1 SpoonType)
        (inReceptacle Spoon_bar_1 Drawer_bar_1)
        (objectAtLocation Spoon_bar_1 loc_bar_1_bar_1_bar_3_bar_45)
        (pickupable Spoon_bar_1)
        (cleanable Spoon_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o PlateType) (receptacleType ?r CabinetType) (inReceptacle ?o ?r) (cleanable ?o) (isClean ?o))))
)
