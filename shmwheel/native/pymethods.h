/* pymethods.h: the entries of a PyMethodDef table, one macro per way a function takes its
 * arguments (METH_FASTCALL, METH_FASTCALL | METH_KEYWORDS, METH_O, METH_NOARGS,
 * METH_VARARGS), so that a table says only each method's name, C function and doc;
 * METHODS_END closes the table. */
#ifndef SHMWHEEL_PYMETHODS_H
#define SHMWHEEL_PYMETHODS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* NAME's C function FN, cast as PyMethodDef stores it (through void (*)(void), which
 * compilers accept for every signature) */
#define METHOD(NAME, FN, FLAGS, DOC) {NAME, (PyCFunction)(void (*)(void))(FN), FLAGS, DOC}
#define METHOD_FAST(NAME, FN, DOC) METHOD(NAME, FN, METH_FASTCALL, DOC)
#define METHOD_FAST_KW(NAME, FN, DOC) METHOD(NAME, FN, METH_FASTCALL | METH_KEYWORDS, DOC)
#define METHOD_O(NAME, FN, DOC) METHOD(NAME, FN, METH_O, DOC)
#define METHOD_NOARGS(NAME, FN, DOC) METHOD(NAME, FN, METH_NOARGS, DOC)
#define METHOD_VARARGS(NAME, FN, DOC) METHOD(NAME, FN, METH_VARARGS, DOC)
#define METHODS_END {NULL, NULL, 0, NULL}

#endif
