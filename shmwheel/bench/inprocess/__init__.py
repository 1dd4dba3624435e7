"""The in-process workloads: the wheel core (``core``) and the Kafka layer's reference
objects (``refs``), each beside the peers a program would use in its own process (heapq,
asyncio, sched). No service runs here."""
