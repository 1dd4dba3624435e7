"""Kafka's delayed-operation layer, in process: TimingWheel, SystemTimer, MockTimer and
the DelayedOperationPurgatory, over the wheel core."""
