/* module.c: shmwheel._native, the native core. It gathers the method tables and types
 * of the other files and exports every constant of contract.h, so that Python takes the
 * encodings from the one definition (shmwheel/segment/contract.py re-exports them). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "contract.h"
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

#define EXPORT(name) \
    if (PyModule_AddObject(m, #name, PyLong_FromLongLong((long long)(name))) < 0) goto fail

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
    EXPORT(H_MAGIC); EXPORT(H_VERSION); EXPORT(H_CAPACITY); EXPORT(H_LEVELS);
    EXPORT(H_WHEEL); EXPORT(H_SLOTS); EXPORT(H_WORDS); EXPORT(H_TICK); EXPORT(H_NOW);
    EXPORT(H_FREE); EXPORT(H_PENDING); EXPORT(H_OFF_TICKS); EXPORT(H_OFF_BEXP);
    EXPORT(H_OFF_BITS); EXPORT(H_OFF_NODES); EXPORT(H_TOTAL); EXPORT(H_SENTINELS);
    EXPORT(WHEEL_HEADER_WORDS); EXPORT(WHEEL_MAGIC); EXPORT(WHEEL_LAYOUT_VERSION);
    EXPORT(NODE_WORDS); EXPORT(F_NEXT); EXPORT(F_PREV); EXPORT(F_DEADLINE); EXPORT(F_GS);
    EXPORT(GS_STATE_MASK); EXPORT(GS_GEN_SHIFT); EXPORT(GS_GEN_MASK);
    EXPORT(ST_FREE); EXPORT(ST_PENDING); EXPORT(ST_FIRING); EXPORT(ST_RESERVED);
    EXPORT(ST_SUBMITTED); EXPORT(ST_CANCELLED); EXPORT(ST_STOPPING); EXPORT(ST_COMPLETED);
    EXPORT(ST_RESETTING); EXPORT(ST_COUNT); EXPORT(TR_COUNT);
    EXPORT(TR_LOCKED); EXPORT(TR_LOCKFREE); EXPORT(TR_CAS); EXPORT(TR_STORE);
    EXPORT(TR_GEN_KEEP); EXPORT(TR_GEN_BUMP); EXPORT(TR_GEN_SET); EXPORT(SM_BAD);
    EXPORT(GS_FROM_SHIFT); EXPORT(GS_FROM_MASK); EXPORT(GS_AUX_SHIFT); EXPORT(GS_AUX_MASK);
    EXPORT(HANDLE_SLOT_MASK);
    EXPORT(INS_ALREADY_DUE); EXPORT(INS_OUT_OF_RANGE); EXPORT(INS_NO_SLOT);
    EXPORT(NO_TIME); EXPORT(NEVER);
    EXPORT(SIDE_WORDS); EXPORT(S_META); EXPORT(S_PAYLOAD);
    EXPORT(META_TASK_SHIFT); EXPORT(META_TASK_MASK); EXPORT(META_FLAGS_SHIFT);
    EXPORT(META_FLAGS_MASK); EXPORT(META_CLASS_SHIFT); EXPORT(META_CLASS_MASK);
    EXPORT(META_LEN_SHIFT); EXPORT(META_LEN_MASK); EXPORT(META_RING_SHIFT);
    EXPORT(META_RING_MASK);
    EXPORT(FLAG_KEY); EXPORT(FLAG_ARENA); EXPORT(FLAG_REPEAT); EXPORT(REPEAT_HEADER);
    EXPORT(FLAG_OP); EXPORT(FLAG_COMPLETED); EXPORT(TASK_NONE); EXPORT(OP_HEADER);
    EXPORT(OPH_REQUIRED_MASK); EXPORT(OPH_TASK_SHIFT); EXPORT(OPH_NKEYS_SHIFT);
    EXPORT(OC_CANCELLED); EXPORT(OC_TASK_MASK); EXPORT(OC_COMPLETED); EXPORT(OC_EXPIRED);
    EXPORT(OUTQ_RECORD); EXPORT(OUTQ_DROPPED); EXPORT(OUTQ_SLEEPING); EXPORT(OUTQ_BELL);
    EXPORT(WT_HEADER); EXPORT(WT_NBUCKETS); EXPORT(WT_CAPACITY); EXPORT(WT_FREE);
    EXPORT(WT_USED); EXPORT(WT_CURSOR); EXPORT(WT_PURGED); EXPORT(WE_WORDS);
    EXPORT(WE_KEY); EXPORT(WE_HANDLE); EXPORT(WE_NEXT);
    EXPORT(INLINE_MAX); EXPORT(NIL_INLINE);
    EXPORT(ARENA_CLASSES); EXPORT(MAX_PAYLOAD); EXPORT(A_CLASS_WORDS); EXPORT(A_NBLOCKS);
    EXPORT(A_FREE); EXPORT(A_OFF_NEXT); EXPORT(A_OFF_OWNER); EXPORT(A_DATA);
    EXPORT(A_BLOCK_WORDS);
    EXPORT(RING_HEAD); EXPORT(RING_TAIL); EXPORT(RING_HEADER_WORDS);
    EXPORT(PRODUCER_RECORD); EXPORT(CHECK_SUBMIT); EXPORT(CHECK_CANCEL); EXPORT(CHECK_RESET);
    EXPORT(DISPATCH_RECORD); EXPORT(RESULT_RECORD);
    EXPORT(CANCEL_LOST); EXPORT(CANCEL_WON); EXPORT(CANCEL_STOPPED);
    EXPORT(RESET_LOST); EXPORT(RESET_WON); EXPORT(RESET_NOT_TIMER); EXPORT(RESET_BUSY);
    EXPORT(OUTCOME_OK); EXPORT(OUTCOME_ERROR); EXPORT(OUTCOME_CRASHED);
    EXPORT(COUNTER_WORDS); EXPORT(C_SCHEDULED); EXPORT(C_FIRED); EXPORT(C_CANCELLED);
    EXPORT(C_COMPLETED); EXPORT(C_ERRORS); EXPORT(C_CRASHED); EXPORT(C_GARBAGE);
    EXPORT(C_STALE); EXPORT(C_REARMED); EXPORT(C_EARLY); EXPORT(C_LINKED); EXPORT(C_FREED);
    EXPORT(C_RETIRED); EXPORT(C_JOURNAL_BYTES); EXPORT(C_JOURNAL_SYNCS);
    EXPORT(C_OPS_COMPLETED); EXPORT(C_OPS_WATCHED); EXPORT(C_OPS_EXPIRED); EXPORT(C_RESETS);
    EXPORT(HIST_BUCKETS); EXPORT(HIST_PER_OCTAVE);
    EXPORT(J_HEADER); EXPORT(J_SCHEDULED); EXPORT(J_CANCELLED); EXPORT(J_FIRED);
    EXPORT(J_OUTCOME); EXPORT(J_WATCHED); EXPORT(J_COMPLETED); EXPORT(J_EXPIRED);
    EXPORT(JOURNAL_WINDOW); EXPORT(J_FRAME_BYTES); EXPORT(J_MAX_BODY); EXPORT(J_FLAG_RECOVERED); EXPORT(J_FLAG_RESET);
    EXPORT(OC_NONE); EXPORT(OPH_COUNT); EXPORT(WE_BLOCK); EXPORT(WAIT_HEADER);
    EXPORT(WA_NBUCKETS); EXPORT(WA_REFUSED); EXPORT(WAIT_WAYS); EXPORT(WAIT_BUCKET_WORDS);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
