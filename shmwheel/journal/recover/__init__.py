"""Reading a journal back into a service: whole-service recovery at ``start()`` (recovery,
recovery_ops for the purgatory's operations), the salvage of a dead service's segment
(salvage), and taking damaged segments out of a journal (quarantine), on a start told to
salvage or offline (repair, ``shmwheel journal repair``). Runs in the supervisor's process
before the service's processes start, or in the CLI. These modules may import the
journal's shared modules, ``write/`` (a recovery writes its own segments) and the layers
below."""
