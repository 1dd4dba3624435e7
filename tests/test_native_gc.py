"""The native types that Python subclasses (Producer: Client; Handle: TimerHandle and
Operation) let the cycle collector count their class right: a heap subclass's instance
holds one reference to its class, and the collector must see exactly one.

Seen as a heisenbug: a second ``connect()`` in a freshly spawned process raised
``AttributeError: __init__`` from ``Client(mem, ring)``. The class was still young there,
the first (closed) Client was garbage in a cycle, and a young collection found the class
unreachable (its two visits per instance cancelled the module's reference) and cleared it.
"""

from __future__ import annotations

import gc

import pytest

from shmwheel import _native as N
from shmwheel.service.client import Client
from shmwheel.service.handles import TimerHandle

BASES = {"Producer": (), "Handle": (None, 1, 2)}  # each base's constructor arguments

# a class like Client: an __init__ that calls super().__init__ (so a __class__ cell)
CLASS = "class Sub(N.{}):\n    def __init__(self, *args):\n        super().__init__()\n"


def test_an_instance_is_one_reference_to_its_class():
    client = Client.__new__(Client)
    handle = TimerHandle.__new__(TimerHandle, None, 1, 2)
    assert [r is Client for r in gc.get_referents(client)].count(True) == 1
    assert [r is TimerHandle for r in gc.get_referents(handle)].count(True) == 1


@pytest.mark.parametrize("base", sorted(BASES))
def test_a_young_class_survives_a_young_collection_of_its_garbage_instance(base):
    enabled = gc.isenabled()
    gc.disable()  # only the collections this test asks for
    try:
        module = {"N": N}  # a module's dict: tracked (it holds a module), and old after
        gc.collect()  # this; the class made next is young
        exec(CLASS.format(base), module)
        cls = module["Sub"]
        x = cls(*BASES[base])
        x.me = x  # a cycle: garbage that only a collection frees
        del x, cls
        gc.collect(0)  # frees the garbage instance, and must leave its class whole
        cls = module["Sub"]
        assert cls.__mro__ == (cls, getattr(N, base), *getattr(N, base).__mro__[1:])
        assert type(cls(*BASES[base])) is cls  # was: AttributeError: __init__
    finally:
        if enabled:
            gc.enable()
