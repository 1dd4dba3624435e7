"""The native types' cycle-collector hooks report each reference once. A Python subclass's
instance (a ``Client``, a ``TimerHandle``) holds one reference to its class; the
interpreter's ``subtype_traverse`` already reports it, so a native ``tp_traverse`` that
reports ``Py_TYPE(self)`` too makes the collector count two, and once the class's count of
outside references reaches zero it clears the class while the module still uses it
(``Client.__mro__`` None, and the next ``Client(...)`` raised ``AttributeError: __init__``
in a process that had connected before)."""

from __future__ import annotations

import gc

from shmwheel import _native as N


class _Producer(N.Producer):  # type: ignore[misc]
    pass


class _Handle(N.Handle):  # type: ignore[misc]
    pass


def test_a_subclass_instance_reports_its_class_once():
    for obj in (_Producer(), _Handle(None, 1, 2)):
        assert gc.get_referents(obj).count(type(obj)) == 1, type(obj).__name__

