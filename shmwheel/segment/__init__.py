"""The service's shared-memory segment: its encodings (``contract``), layout, rings,
payloads and the slot state machine. Private to shmwheel."""
