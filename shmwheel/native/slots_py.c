/* placeholder until the slot state machine bindings land */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
PyMethodDef shmwheel_slot_methods[] = {{NULL, NULL, 0, NULL}};
int shmwheel_add_types(PyObject *m) { return 0; }
