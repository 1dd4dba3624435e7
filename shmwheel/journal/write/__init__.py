"""The journal's write path, as a running service takes it: a writer's segment files and
their chain (writer), its one seam to the disk (disk), its faults as the service header
shows them (faults), what a writer closed through a fault keeps in /dev/shm until the next
start (spill), and the coordinator's retention of the segments no timer needs (retention).
Runs in the coordinator and the reaper (and in a recovery's or a salvage's writer). These
modules may import the journal's shared modules (format, reader, directory, and ``check``
for one file's damage) and the layers below; never ``recover/``."""
