(define (problem alfworld_task_7)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        EggType - otype
        MugType - otype
        SpoonType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Egg_bar_1 - object
        Apple_bar_1 - object
        Mug_bar_1 - object
        Spoon_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_0_bar_0_bar_2_bar_30 - location
        loc_bar_0_bar_1_bar_1_bar_15 - location
        loc_bar_0_bar_2_bar_0_bar_0 - location
        loc_bar_3_bar__minus_1_bar_2_bar_30 - location
        loc_bar_3_bar__minus_2_bar_3_bar_45 - location
        loc_bar_3_bar__minus_3_bar_0_bar_0 - location
        loc_bar__minus_3_bar_2_bar_1_bar_15 - location
        loc_bar__minus_3_bar_3_bar_0_bar_0 - location
        loc_bar__minus_3_bar__minus_3_bar_3_bar_45 - location
    )
    (:init
        (atLocation agent1 loc_bar_3_bar__minus_3_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_0_bar_0_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType MugType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_3_bar_2_bar_1_bar_15)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType EggType)
        (canContain CounterTopType MugType)
        (canContain CounterTopType SpoonType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_3_bar__minus_3_bar_3_bar_45)
        (canContain DiningTableType AppleType)
        (canContain DiningTableType EggType)
        (canContain DiningTableType MugType)
        (canContain DiningTableType SpoonType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_3_bar__minus_2_bar_3_bar_45)
        (openable Drawer_bar_1)
        (canContain DrawerType SpoonType)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_3_bar_3_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType AppleType)
        (canContain FridgeType EggType)
        (canContain FridgeType MugType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_0_bar_2_bar_0_bar_0)
        (canContain GarbageCanType AppleType)
        (canContain GarbageCanType EggType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_0_bar_1_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType EggType)
        (canContain MicrowaveType MugType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_3_bar__minus_1_bar_2_bar_30)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType EggType)
        (canContain SinkBasinType MugType)
        (canContain SinkBasinType SpoonType)
        (objectType Egg_bar_1 EggType)
        (inReceptacle Egg_bar_1 Fridge_bar_1)
        (objectAtLocation Egg_bar_1 loc_bar__minus_3_bar_3_bar_0_bar_0)
        (pickupable Egg_bar_1)
        (cleanable Egg_bar_1)
        (heatable Egg_bar_1)
        (coolable Egg_bar_1)
        (wasInReceptacle Egg_bar_1 Fridge_bar_1)
        (objectType Apple_bar_1 AppleType)
        (inReceptacle Apple_bar_1 DiningTable_bar_1)
        (objectAtLocation Apple_bar_1 loc_bar__minus_3_bar__minus_3_bar_3_bar_45)
        (pickupable Apple_bar_1)
        (cleanable Apple_bar_1)
        (heatable Apple_bar_1)
        (coolable Apple_bar_1)
        (objectType Mug_bar_1 MugType)
        (inReceptacle Mug_bar_1 Cabinet_bar_1)
        (objectAtLocation Mug_bar_1 loc_bar_0_bar_0_bar_2_bar_30)
        (pickupable Mug_bar_1)
        (cleanable Mug_bar_1)
        (heatable Mug_bar_1)
        (coolable Mug_bar_1)
        (objectType Spoon_bar_1 SpoonType)
        (inReceptacle Spoon_bar_1 CounterTop_bar_1)
        (objectAtLocation Spoon_bar_1 loc_bar__minus_3_bar_2_bar_1_bar_15)
        (pickupable Spoon_bar_1)
        (cleanable Spoon_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o EggType) (receptacleType ?r CounterTopType) (inReceptacle ?o ?r) (heatable ?o) (isHot ?o))))
)
