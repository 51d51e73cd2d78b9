(define (problem alfworld_task_16)
    (:domain alfred)
    (:objects
        agent1 - agent
        AppleType - otype
        CupType - otype
        PotatoType - otype
        CabinetType - rtype
        CounterTopType - rtype
        DiningTableType - rtype
        DrawerType - rtype
        FridgeType - rtype
        GarbageCanType - rtype
        MicrowaveType - rtype
        SinkBasinType - rtype
        Apple_bar_1 - object
        Potato_bar_1 - object
        Cup_bar_1 - object
        CounterTop_bar_1 - receptacle
        Cabinet_bar_1 - receptacle
        Drawer_bar_1 - receptacle
        Fridge_bar_1 - receptacle
        Microwave_bar_1 - receptacle
        Sink_bar_1_bar_SinkBasin - receptacle
        DiningTable_bar_1 - receptacle
        GarbageCan_bar_1 - receptacle
        loc_bar_0_bar__minus_1_bar_0_bar_0 - location
        loc_bar_0_bar__minus_2_bar_1_bar_15 - location
        loc_bar_0_bar__minus_3_bar_2_bar_30 - location
        loc_bar_3_bar_1_bar_0_bar_0 - location
        loc_bar_3_bar_2_bar_3_bar_45 - location
        loc_bar_3_bar_3_bar_2_bar_30 - location
        loc_bar__minus_3_bar_0_bar_0_bar_0 - location
        loc_bar__minus_3_bar_1_bar_3_bar_45 - location
        loc_bar__minus_3_bar__minus_1_bar_1_bar_15 - location
    )
    (:init
        (atLocation agent1 loc_bar_3_bar_1_bar_0_bar_0)
        (receptacleType Cabinet_bar_1 CabinetType)
        (receptacleAtLocation Cabinet_bar_1 loc_bar_0_bar__minus_3_bar_2_bar_30)
        (openable Cabinet_bar_1)
        (canContain CabinetType CupType)
        (receptacleType CounterTop_bar_1 CounterTopType)
        (receptacleAtLocation CounterTop_bar_1 loc_bar__minus_3_bar__minus_1_bar_1_bar_15)
        (canContain CounterTopType AppleType)
        (canContain CounterTopType CupType)
        (canContain CounterTopType PotatoType)
        (receptacleType DiningTable_bar_1 DiningTableType)
        (receptacleAtLocation DiningTable_bar_1 loc_bar__minus_3_bar_1_bar_3_bar_45)
        (canContain DiningTableType AppleType)
        (canContain DiningTableType CupType)
        (canContain DiningTableType PotatoType)
        (receptacleType Drawer_bar_1 DrawerType)
        (receptacleAtLocation Drawer_bar_1 loc_bar_3_bar_2_bar_3_bar_45)
        (openable Drawer_bar_1)
        (receptacleType Fridge_bar_1 FridgeType)
        (receptacleAtLocation Fridge_bar_1 loc_bar__minus_3_bar_0_bar_0_bar_0)
        (openable Fridge_bar_1)
        (canContain FridgeType AppleType)
        (canContain FridgeType CupType)
        (canContain FridgeType PotatoType)
        (receptacleType GarbageCan_bar_1 GarbageCanType)
        (receptacleAtLocation GarbageCan_bar_1 loc_bar_0_bar__minus_1_bar_0_bar_0)
        (canContain GarbageCanType AppleType)
        (canContain GarbageCanType PotatoType)
        (receptacleType Microwave_bar_1 MicrowaveType)
        (receptacleAtLocation Microwave_bar_1 loc_bar_0_bar__minus_2_bar_1_bar_15)
        (openable Microwave_bar_1)
        (canContain MicrowaveType AppleType)
        (canContain MicrowaveType CupType)
        (canContain MicrowaveType PotatoType)
        (receptacleType Sink_bar_1_bar_SinkBasin SinkBasinType)
        (receptacleAtLocation Sink_bar_1_bar_SinkBasin loc_bar_3_bar_3_bar_2_bar_30)
        (canContain SinkBasinType AppleType)
        (canContain SinkBasinType CupType)
        (canContain SinkBasinType PotatoType)
        (objectType Apple_bar_1 AppleType)
        (inReceptacle Apple_bar_1 DiningTable_bar_1)
        (objectAtLocation Apple_bar_1 loc_bar__minus_3_bar_1_bar_3_bar_45)
        (pickupable Apple_bar_1)
        (cleanable Apple_bar_1)
        (heatable Apple_bar_1)
        (coolable Apple_bar_1)
        (wasInReceptacle Apple_bar_1 DiningTable_bar_1)
        (objectType Potato_bar_1 PotatoType)
        (inReceptacle Potato_bar_1 Fridge_bar_1)
        (objectAtLocation Potato_bar_1 loc_bar__minus_3_bar_0_bar_0_bar_0)
        (pickupable Potato_bar_1)
        (cleanable Potato_bar_1)
        (heatable Potato_bar_1)
        (coolable Potato_bar_1)
        (objectType Cup_bar_1 CupType)
        (inReceptacle Cup_bar_1 Cabinet_bar_1)
        (objectAtLocation Cup_bar_1 loc_bar_0_bar__minus_3_bar_2_bar_30)
        (pickupable Cup_bar_1)
        (cleanable Cup_bar_1)
        (heatable Cup_bar_1)
        (coolable Cup_bar_1)
    )
    (:goal (exists (?r - receptacle ?o - object) (and (objectType ?o AppleType) (receptacleType ?r GarbageCanType) (inReceptacle ?o ?r) (heatable ?o) (isHot ?o))))
)
