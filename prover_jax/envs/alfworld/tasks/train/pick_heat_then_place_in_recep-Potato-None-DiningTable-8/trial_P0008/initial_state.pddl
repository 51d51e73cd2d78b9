(define (problem alfworld_task_8)
    (:domain alfred)
    (:objects
        agent1 - agent
        ForkType - otype
        PlateType - otype
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
        Potato_bar_1 - object
        Tomato_bar_1 - object
        Plate_bar_1 - object
        Fork_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_1_bar_2_bar_2_bar_30 - location
        loc_bar_1_bar_3_bar_1_bar_15 - location
        loc_bar_1_bar__minus_3_bar_0_bar_0 - location
        loc_bar_4_bar_0_bar_3_bar_45 - location
        loc_bar_4_bar_1_bar_2_bar_30 - location
        loc_bar_4_bar__minus_1_bar_0_bar_0 - location
        loc_bar__minus_2_bar__minus_1_bar_3_bar_45 - location
        loc_bar__minus_2_bar__minus_2_bar_0_bar_0 - location
        loc_bar__minus_2_bar__minus_3_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_4_bar__minus_1_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_1_bar_2_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType PlateType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_2_bar__minus_3_bar_1_bar_15)
        (canContain CounterTopType ForkType)
        (canContain CounterTopType PlateType)
        (canContain CounterTopType PotatoType)
        (canContain CounterTopType TomatoType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_2_bar__minus_1_bar_3_bar_45)
        (canContain DiningTableType ForkType)
        (canContain DiningTableType PlateType)
        (canContain DiningTableType PotatoType)
        (canContain DiningTableType TomatoType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_4_bar_0_bar_3_bar_45)
        (openable Drawer_bar_1)
        (canContain DrawerType ForkType)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_2_bar__minus_2_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType PlateType)
        (canContain FridgeType PotatoType)
        (canContain FridgeType TomatoType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_1_bar__minus_3_bar_0_bar_0)
        (canContain GarbageCanType PotatoType)
        (canContain GarbageCanType TomatoType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_1_bar_3_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType PlateType)
        (canContain MicrowaveType PotatoType)
        (canContain MicrowaveType TomatoType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_4_bar_1_bar_2_bar_30)
        (canContain SinkBasinType ForkType)
        (canContain SinkBasinType PlateType)
        (canContain SinkBasinType PotatoType)
        (canContain SinkBasinType TomatoType)
        (objectType Potato_bar_1 PotatoType)
        (inReceptacle Potato_bar_1 CounterTop_bar_1)
        (objectAtLocation Potato_bar_1 loc_bar__minus_2_bar__minus_3_bar_1_bar_15)
        (pickupable Potato_bar_1)
        (cleanable Potato_bar_1)
        (heatable Potato_bar_1)
        (coolable Potato_bar_1)
        (wasInReceptacle Potato_bar_1 CounterTop_bar_1)
        (objectType Tomato_bar_1 TomatoType)
        (inReceptacle Tomato_bar_1 Fridge_bar_1)
        (objectAtLocation Tomato_bar_1 loc_bar__minus_2_bar__minus_2_bar_0_bar_0)
        (pickupable Tomato_bar_1)
        (cleanable Tomato_bar_1)
        (heatable Tomato_bar_1)
        (coolable Tomato_bar_1)
        (objectType Plate_bar_1 PlateType)
        (inReceptacle Plate_bar_1 Cabinet_bar_1)
        (objectAtLocation Plate_bar_1 loc_bar_1_bar_2_bar_2_bar_30)
        (pickupable Plate_bar_1)
        (cleanable Plate_bar_1)
        (heatable Plate_bar_1)
        (coolable Plate_bar_1)
        (objectType Fork_bar_1 ForkType)
        (inReceptacle Fork_bar_1 Drawer_bar_1)
        (objectAtLocation Fork_bar_1 loc_bar_4_bar_0_bar_3_bar_45)
        (pickupable Fork_bar_1)
        (cleanable Fork_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o PotatoType) (receptacleType ?r DiningTableType) (inReceptacle ?o ?r) (heatable ?o) (isHot ?o))))
)
