(define (problem alfworld_task_11)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        EggType - otype
        TomatoType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Apple_bar_1 - object
        Apple_bar_2 - object
        Tomato_bar_1 - object
        Egg_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_1_bar_3_bar_1_bar_15 - location
        loc_bar_1_bar__minus_2_bar_3_bar_45 - location
        loc_bar_1_bar__minus_3_bar_0_bar_0 - location
        loc_bar_4_bar_1_bar_2_bar_30 - location
        loc_bar_4_bar_2_bar_1_bar_15 - location
        loc_bar_4_bar_3_bar_0_bar_0 - location
        loc_bar__minus_2_bar_0_bar_2_bar_30 - location
        loc_bar__minus_2_bar__minus_1_bar_3_bar_45 - location
        loc_bar__minus_2_bar__minus_2_bar_0_bar_0 - location
    )
    (:init
        (atLocation agent1 loc_bar__minus_2_bar__minus_2_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_4_bar_1_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar_1_bar_3_bar_1_bar_15)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType EggType)
        (canContain CounterTopType TomatoType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar_1_bar__minus_2_bar_3_bar_45)
        (canContain DiningTableType AppleType)
        (canContain DiningTableType EggType)
        (canContain DiningTableType TomatoType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar__minus_2_bar__minus_1_bar_3_bar_45)
        (openable Drawer_bar_1)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar_1_bar__minus_3_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType AppleType)
        (canContain FridgeType EggType)
        (canContain FridgeType TomatoType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_4_bar_3_bar_0_bar_0)
        (canContain GarbageCanType AppleType)
        (canContain GarbageCanType EggType)
        (canContain GarbageCanType TomatoType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_4_bar_2_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType EggType)
        (canContain MicrowaveType TomatoType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar__minus_2_bar_0_bar_2_bar_30)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType EggType)
        (canContain SinkBasinType TomatoType)
        (objectType Apple_bar_1 AppleType)
        (inReceptacle Apple_bar_1 CounterTop_bar_1)
        (objectAtLocation Apple_bar_1 loc_bar_1_bar_3_bar_1_bar_15)
        (pickupable Apple_bar_1)
        (cleanable Apple_bar_1)
        (heatable Apple_bar_1)
        (coolable Apple_bar_1)
        (wasInReceptacle Apple_bar_1 CounterTop_bar_1)
        (objectType Apple_bar_2 AppleType)
        (inReceptacle Apple_bar_2 DiningTable_bar_1)
        (objectAtLocation Apple_bar_2 loc_bar_1_bar__minus_2_bar_3_bar_45)
        (pickupable Apple_bar_2)
        (cleanable Apple_bar_2)
        (heatable Apple_bar_2)
        (coolable Apple_bar_2)
        (wasInReceptacle Apple_bar_2 DiningTable_bar_1)
        (objectType Tomato_bar_1 TomatoType)
        (inReceptacle Tomato_bar_1 CounterTop_bar_1)
        (objectAtLocation Tomato_bar_1 loc_bar_1_bar_3_bar_1_bar_15)
        (pickupable Tomato_bar_1)
        (cleanable Tomato_bar_1)
        (heatable Tomato_bar_1)
        (coolable Tomato_bar_1)
        (objectType Egg_bar_1 EggType)
        (inReceptacle Egg_bar_1 Cabinet_bar_1)
        (objectAtLocation Egg_bar_1 loc_bar_4_bar_1_bar_2_bar_30)
        (pickupable Egg_bar_1)
        (cleanable Egg_bar_1)
        (heatable Egg_bar_1)
        (coolable Egg_bar_1)
    )
    (:goal (exists (?r - receptacle ?o1 - object ?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o1 AppleType) (objectType ?o2 AppleType) (receptacleType ?r FridgeType) (inReceptacle ?o1 ?r) (inReceptacle ?o2 ?r))))
)
