"""Every constant of the shared-memory contract, taken in one loop from the native core.

``shmwheel/native/contract.h`` (and ``journal.h``) write each constant once, as a row of a
list; the extension exports every row (module.c, ``CONTRACT``), and this module makes each
a module attribute. Their types are ``constants.pyi``, generated from the same rows by
``tests/contract_stub.py`` (``tests/test_contract.py`` fails when it drifts). Read
contract.h for what each word means; ``segment/contract.py`` re-exports them all with the
accessors of the packed words. It sits here, the lowest layer above the native core,
because the wheel core, the Kafka layer and everything above them read it.
"""

from __future__ import annotations

from .. import _native as native

globals().update(native.CONTRACT)
LISTS: tuple[tuple[str, tuple[str, ...]], ...] = native.CONTRACT_LISTS  # (list, its names)
