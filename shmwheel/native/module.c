/* module.c: shmwheel._native, the native core. It gathers the method tables and types
 * of the other files and exports every constant of contract.h, journal.h and errlog.h,
 * so that Python takes the encodings from the one definition (wheel/constants.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "contract.h"
#include "errlog.h"
#include "journal.h"

extern PyMethodDef shmwheel_wheel_methods[];
extern PyMethodDef shmwheel_slot_methods[];
extern PyMethodDef shmwheel_purgatory_methods[];
extern PyMethodDef shmwheel_payload_methods[];
extern PyMethodDef shmwheel_state_methods[];
int shmwheel_add_state_tables(PyObject *m);
int shmwheel_add_types(PyObject *m);
int shmwheel_add_journal_type(PyObject *m);
int shmwheel_add_inproc_types(PyObject *m); /* inproc_wheel.c: the in-process timer */

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "shmwheel._native",
    "shmwheel's native core: the timing wheel, the slot state machine and the hot paths "
    "(see shmwheel/native/*.c). Private: use the shmwheel package.",
    -1, NULL, NULL, NULL, NULL, NULL,
};

/* ---- the contract's constants: every row of every list, in one loop ------------------
 * contract.h, journal.h and errlog.h write each constant once, as a row of a list; here
 * each list becomes a table of (name, value), and CONTRACT (a dict, name -> value, in the
 * lists' order) and CONTRACT_LISTS ((list, names) pairs) are what Python takes
 * (wheel/constants.py). The slot states (SLOT_STATES) come as ST_<name>, with ST_COUNT
 * and TR_COUNT. */
typedef struct {
    const char *name;
    long long value;
} Row;
#define ROW_(name, value) {#name, (long long)(name)},
#define ROWS_(list) static const Row list##_rows[] = {list(ROW_)};
CONTRACT_LISTS(ROWS_)
JOURNAL_LISTS(ROWS_)
ERRLOG_LISTS(ROWS_)
#define STATE_ROW_(name, value, doc) {"ST_" #name, ST_##name},
static const Row SLOT_STATES_rows[] = {
    SLOT_STATES(STATE_ROW_) {"ST_COUNT", ST_COUNT}, {"TR_COUNT", TR_COUNT},
};
static const struct {
    const char *list;
    const Row *rows;
    size_t n;
} lists[] = {
#define LIST_(list) {#list, list##_rows, sizeof list##_rows / sizeof(Row)},
    CONTRACT_LISTS(LIST_) JOURNAL_LISTS(LIST_) ERRLOG_LISTS(LIST_) LIST_(SLOT_STATES)
};

static int add_contract(PyObject *m) {
    PyObject *all = PyDict_New(), *listed = PyTuple_New(sizeof lists / sizeof lists[0]);
    if (!all || !listed) goto fail;
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        PyObject *names = PyTuple_New((Py_ssize_t)lists[l].n), *pair;
        if (!names) goto fail;
        for (size_t i = 0; i < lists[l].n; i++) {
            PyObject *v = PyLong_FromLongLong(lists[l].rows[i].value);
            PyObject *k = PyUnicode_FromString(lists[l].rows[i].name);
            /* a name in two lists would be two definitions: refuse to load */
            int dup = k && PyDict_Contains(all, k);
            if (!v || !k || dup || PyDict_SetItem(all, k, v) < 0) {
                if (dup) PyErr_Format(PyExc_SystemError, "contract: %U listed twice", k);
                Py_XDECREF(v);
                Py_XDECREF(k);
                Py_DECREF(names);
                goto fail;
            }
            Py_DECREF(v);
            PyTuple_SET_ITEM(names, (Py_ssize_t)i, k);
        }
        if (!(pair = Py_BuildValue("(sN)", lists[l].list, names))) goto fail;
        PyTuple_SET_ITEM(listed, (Py_ssize_t)l, pair);
    }
    if (PyModule_AddObject(m, "CONTRACT", all) < 0) goto fail;
    all = NULL;
    if (PyModule_AddObject(m, "CONTRACT_LISTS", listed) < 0) goto fail;
    return 0;
fail:
    Py_XDECREF(all);
    Py_XDECREF(listed);
    return -1;
}

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, shmwheel_wheel_methods) < 0) goto fail;
    if (PyModule_AddFunctions(m, shmwheel_slot_methods) < 0) goto fail;
    if (PyModule_AddFunctions(m, shmwheel_purgatory_methods) < 0) goto fail;
    if (PyModule_AddFunctions(m, shmwheel_payload_methods) < 0) goto fail;
    if (PyModule_AddFunctions(m, shmwheel_state_methods) < 0) goto fail;
    if (shmwheel_add_state_tables(m) < 0) goto fail;
    if (shmwheel_add_types(m) < 0) goto fail;
    if (shmwheel_add_journal_type(m) < 0) goto fail;
    if (shmwheel_add_inproc_types(m) < 0) goto fail;
    if (add_contract(m) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
