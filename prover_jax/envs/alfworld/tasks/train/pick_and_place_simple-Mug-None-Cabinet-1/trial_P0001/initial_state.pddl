(define (problem alfworld_task_1)
    (:domain alfred)
    (:objects
        agent1 - agent
        BreadType - otype
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
        Mug_bar_1 - object
        Bread_bar_1 - object
        Spoon_bar_1 - object
        Egg_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_0_bar__minus_1_bar_3_bar_45 - location
        loc_bar_0_bar__minus_2_bar_0_bar_0 - location
        loc_bar_0_bar__minus_3_bar_1_bar_15 - location
        loc_bar_3_bar_2_bar_2_bar_30 - location
        loc_bar_3_bar_3_bar_1_bar_15 - location
        loc_bar_3_bar__minus_3_bar_0_bar_0 - location
        loc_bar__minus_3_bar_0_bar_3_bar_45 - location
        loc_bar__minus_3_bar_1_bar_2_bar_30 - location
        loc_bar__minus_3_bar__minus_1_bar_0_bar_0 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_3_bar__minus_1_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_3_bar_2_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType MugType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar_0_bar__minus_3_bar_1_bar_15)
        (canContain CounterTopType BreadType)
        (canContain CounterTopType EggType)
        (canContain CounterTopType MugType)
        (canContain CounterTopType SpoonType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar_0_bar__minus_1_bar_3_bar_45)
        (canContain DiningTableType BreadType)
        (canContain DiningTableType EggType)
        (canContain DiningTableType MugType)
        (canContain DiningTableType SpoonType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar__minus_3_bar_0_bar_3_bar_45)
        (openable Drawer_bar_1)
        (canContain DrawerType SpoonType)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar_0_bar__minus_2_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType BreadType)
        (canContain FridgeType EggType)
        (canContain FridgeType MugType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_3_bar__minus_3_bar_0_bar_0)
        (canContain GarbageCanType BreadType)
        (canContain GarbageCanType EggType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_3_bar_3_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType BreadType)
        (canContain MicrowaveType EggType)
        (canContain MicrowaveType MugType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar__minus_3_bar_1_bar_2_bar_30)
        (canContain SinkBasinType EggType)
        (canContain SinkBasinType MugType)
        (canContain SinkBasinType SpoonType)
        (objectType Mug_bar_1 MugType)
        (inReceptacle Mug_bar_1 CounterTop_bar_1)
        (objectAtLocation Mug_bar_1 loc_bar_0_bar__minus_3_bar_1_bar_15)
        (pickupable Mug_bar_1)
        (cleanable Mug_bar_1)
        (heatable Mug_bar_1)
        (coolable Mug_bar_1)
        (wasInReceptacle Mug_bar_1 CounterTop_bar_1)
        (objectType Bread_bar_1 BreadType)
        (inReceptacle Bread_bar_1 DiningTable_bar_1)
        (objectAtLocation Bread_bar_1 loc_bar_0_bar__minus_1_bar_3_bar_45)
        (pickupable Bread_bar_1)
        (heatable Bread_bar_1)
        (coolable Bread_bar_1)
        (objectType Spoon_bar_1 SpoonType)
        (inReceptacle Spoon_bar_1 Drawer_bar_1)
        (objectAtLocation Spoon_bar_1 loc_bar__minus_3_bar_0_bar_3_bar_45)
        (pickupable Spoon_bar_1)
        (cleanable Spoon_bar_1)
        (objectType Egg_bar_1 EggType)
        (inReceptacle Egg_bar_1 Fridge_bar_1)
        (objectAtLocation Egg_bar_1 loc_bar_0_bar__minus_2_bar_0_bar_0)
        (pickupable Egg_bar_1)
        (cleanable Egg_bar_1)
        (heatable Egg_bar_1)
        (coolable Egg_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o MugType) (receptacleType ?r CabinetType) (inReceptacle ?o ?r) )))
)
