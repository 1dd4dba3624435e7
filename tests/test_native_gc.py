"""The native types' cycle-collector hooks report each reference once. A Python subclass's
instance (a ``Client``, a ``TimerHandle``) holds one reference to its class; the
interpreter's ``subtype_traverse`` already reports it, so a native ``tp_traverse`` that
reports ``Py_TYPE(self)`` too makes the collector count two, and once the class's count of
outside references reaches zero it clears the class while the module still uses it
(``Client.__mro__`` None, and the next ``Client(...)`` raised ``AttributeError: __init__``
in a process that had connected before)."""

from __future__ import annotations

import gc

import pytest

from shmwheel import _native as N


class _Producer(N.Producer):  # type: ignore[misc]
    pass


class _Handle(N.Handle):  # type: ignore[misc]
    pass


def test_a_subclass_instance_reports_its_class_once():
    for obj in (_Producer(), _Handle(None, 1, 2)):
        assert gc.get_referents(obj).count(type(obj)) == 1, type(obj).__name__


# the failure itself, made to happen: a class like Client (an __init__ that calls
# super().__init__, so a __class__ cell), young, in a module's dict that is old, with one
# instance that is garbage in a cycle; a young collection must free the instance only
CLASS = "class Sub(N.{}):\n    def __init__(self, *args):\n        super().__init__()\n"
ARGS = {"Producer": (), "Handle": (None, 1, 2)}


@pytest.mark.parametrize("base", sorted(ARGS))
def test_a_young_class_survives_a_young_collection_of_its_garbage_instance(base):
    enabled = gc.isenabled()
    gc.disable()  # only the collections this test asks for
    try:
        module = {"N": N}  # tracked (it holds a module), and old after the next line
        gc.collect()
        exec(CLASS.format(base), module)
        x = module["Sub"](*ARGS[base])
        x.me = x
        del x
        gc.collect(0)
        cls = module["Sub"]
        assert cls.__mro__ == (cls, getattr(N, base), object)  # was None: the class cleared
        assert type(cls(*ARGS[base])) is cls  # was: AttributeError: __init__
    finally:
        if enabled:
            gc.enable()
