(define (problem alfworld_task_9)
    (:domain alfred)
    (:objects
        agent1 - agent
        EggType - otype
        KnifeType - otype
        PotatoType - otype
        TomatoType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Tomato_bar_1 - object
        Potato_bar_1 - object
        Egg_bar_1 - object
        Knife_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_2_bar__minus_1_bar_0_bar_0 - location
        loc_bar_2_bar__minus_2_bar_1_bar_15 - location
        loc_bar_2_bar__minus_3_bar_2_bar_30 - location
        loc_bar__minus_1_bar_0_bar_0_bar_0 - location
        loc_bar__minus_1_bar_1_bar_3_bar_45 - location
        loc_bar__minus_1_bar__minus_1_bar_1_bar_15 - location
        loc_bar__minus_4_bar_1_bar_0_bar_0 - location
        loc_bar__minus_4_bar_2_bar_3_bar_45 - location
        loc_bar__minus_4_bar_3_bar_2_bar_30 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_4_bar_1_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_2_bar__minus_3_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_1_bar__minus_1_bar_1_bar_15)
        (canContain CounterTopType EggType)
        (canContain CounterTopType KnifeType)
        (canContain CounterTopType PotatoType)
        (canContain CounterTopType TomatoType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_1_bar_1_bar_3_bar_45)
        (canContain DiningTableType EggType)
        (canContain DiningTableType KnifeType)
        (canContain DiningTableType PotatoType)
        (canContain DiningTableType TomatoType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar__minus_4_bar_2_bar_3_bar_45)
        (openable Drawer_bar_1)
        (canContain DrawerType KnifeType)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_1_bar_0_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType EggType)
        (canContain FridgeType PotatoType)
        (canContain FridgeType TomatoType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_2_bar__minus_1_bar_0_bar_0)
        (canContain GarbageCanType EggType)
        (canContain GarbageCanType PotatoType)
        (canContain GarbageCanType TomatoType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_2_bar__minus_2_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType EggType)
        (canContain MicrowaveType PotatoType)
        (canContain MicrowaveType TomatoType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar__minus_4_bar_3_bar_2_bar_30)
        (canContain SinkBasinType EggType)
        (canContain SinkBasinType KnifeType)
        (canContain SinkBasinType PotatoType)
        (canContain SinkBasinType TomatoType)
        (objectType Tomato_bar_1 TomatoType)
        (inReceptacle Tomato_bar_1 DiningTable_bar_1)
        (objectAtLocation Tomato_bar_1 loc_bar__minus_1_bar_1_bar_3_bar_45)
        (pickupable Tomato_bar_1)
        (cleanable Tomato_bar_1)
        (heatable Tomato_bar_1)
        (coolable Tomato_bar_1)
        (wasInReceptacle Tomato_bar_1 DiningTable_bar_1)
        (objectType Potato_bar_1 PotatoType)
        (inReceptacle Potato_bar_1 Cabinet_bar_1)
        (objectAtLocation Potato_bar_1 loc_bar_2_bar__minus_3_bar_2_bar_30)
        (pickupable Potato_bar_1)
        (cleanable Potato_bar_1)
        (heatable Potato_bar_1)
        (coolable Potato_bar_1)
        (objectType Egg_bar_1 EggType)
        (inReceptacle Egg_bar_1 CounterTop_bar_1)
        (objectAtLocation Egg_bar_1 loc_bar__minus_1_bar__minus_1_bar_1_bar_15)
        (pickupable Egg_bar_1)
        (cleanable Egg_bar_1)
        (heatable Egg_bar_1)
        (coolable Egg_bar_1)
        (objectType Knife_bar_1 KnifeType)
        (inReceptacle Knife_bar_1 Drawer_bar_1)
        (objectAtLocation Knife_bar_1 loc_bar__minus_4_bar_2_bar_3_bar_45)
        (pickupable Knife_bar_1)
        (cleanable Knife_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o TomatoType) (receptacleType ?r CounterTopType) (inReceptacle ?o ?r) (coolable ?o) (isCool ?o))))
)
