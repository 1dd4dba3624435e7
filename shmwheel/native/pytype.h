/* pytype.h: how each native type of _native declares its PyTypeObject. The fields every
 * type sets are written once here, named after the type's function prefix (PREFIX_dealloc,
 * PREFIX_methods, PREFIX_traverse, PREFIX_clear), so that a type's definition says only
 * what is its own: its name, its C struct, its flags, its doc, its constructor. */
#ifndef SHMWHEEL_PYTYPE_H
#define SHMWHEEL_PYTYPE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The PyTypeObject of "shmwheel._native.NAME", instances of CTYPE, Py_TPFLAGS_DEFAULT and
 * FLAGS, then the type's own fields (designated initialisers). */
#define NATIVE_TYPE(NAME, CTYPE, FLAGS, DOC, ...)                                          \
    {                                                                                      \
        PyVarObject_HEAD_INIT(NULL, 0)                                                     \
        .tp_name = "shmwheel._native." NAME, .tp_basicsize = sizeof(CTYPE),                \
        .tp_flags = Py_TPFLAGS_DEFAULT | (FLAGS), .tp_doc = DOC, __VA_ARGS__               \
    }
/* its deallocator and method table */
#define TYPE_BASICS(P) .tp_dealloc = (destructor)P##_dealloc, .tp_methods = P##_methods
/* a type the cycle collector tracks (Py_TPFLAGS_HAVE_GC): its traverse and clear */
#define TYPE_GC(P) .tp_traverse = (traverseproc)P##_traverse, .tp_clear = (inquiry)P##_clear

/* PREFIX_traverse and PREFIX_clear of a CTYPE whose references are the fields REFS names
 * (an X-macro: #define TASK_REFS(X) X(entry) X(lock)), each visited and cleared alike. */
#define GC_REFS(CTYPE, P, REFS)                                                            \
    static int P##_traverse(CTYPE *o, visitproc visit, void *arg) {                        \
        REFS(GC_VISIT_) return 0;                                                          \
    }                                                                                      \
    static int P##_clear(CTYPE *o) {                                                       \
        REFS(GC_CLEAR_) return 0;                                                          \
    }
#define GC_VISIT_(field) Py_VISIT(o->field);
#define GC_CLEAR_(field) Py_CLEAR(o->field);

#endif
