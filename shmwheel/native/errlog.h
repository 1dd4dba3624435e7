/* errlog.h: the failed tasks' records, the "errors" region of a service segment (errlog.c
 * writes and reads them; shmwheel/service/tracebacks.py words what it finds). Its
 * constants are rows of a list, as contract.h's are (contract.h says how a list becomes
 * constants and reaches Python). */
#ifndef SHMWHEEL_ERRLOG_H
#define SHMWHEEL_ERRLOG_H

#include "contract.h"

/* ---- task error records (the "errors" region; errlog.c owns it) ---------------------
 * ERR_REGION_HEADER words (ERR_STAMP: the stamps drawn so far, every executor's
 * fetch-and-add), then a log per executor: ERR_HEADER_WORDS words (ERR_NEXT: records it
 * ever wrote; ERR_EVICTED: the stamp of the newest record it has overwritten; both its
 * single writer's), then ERR_RECORDS records of ERR_RECORD_WORDS. Record k is at position
 * k % ERR_RECORDS: the newest ERR_RECORDS failures of each executor are kept. A record:
 * ER_SEQ is 2k + 1 while record k is written and 2k + 2 once it is complete (0: never
 * written); the failed timer's handle; its stamp (larger for every later record, whatever
 * the executor); its run number (1 for a one-shot); its task id; ER_FLAGS (ERF_REPEATING:
 * a repeating timer's run); the byte lengths of its texts (type | message << 16 |
 * traceback << 32); a checksum of those words and the texts (errlog.c, err_check); the
 * texts, UTF-8, back to back from ER_TEXT (the exception's type name at most ER_TYPE_MAX
 * bytes, its message ER_MESSAGE_MAX, all three ER_TEXT_BYTES). */
#define ERROR_LOGS(X)                                                                      \
    X(ERR_REGION_HEADER, 8)                                                                \
    X(ERR_STAMP, 0)                                                                        \
    X(ERR_RECORDS, 64)                                                                     \
    X(ERR_RECORD_WORDS, 512)      /* 4 KiB */                                              \
    X(ERR_HEADER_WORDS, 8)                                                                 \
    X(ERR_NEXT, 0)                                                                         \
    X(ERR_EVICTED, 1)                                                                      \
    X(ERR_LOG_WORDS, ERR_HEADER_WORDS + ERR_RECORDS * ERR_RECORD_WORDS)                    \
    X(ER_SEQ, 0)                                                                           \
    X(ER_HANDLE, 1)                                                                        \
    X(ER_STAMP, 2)                                                                         \
    X(ER_RUN, 3)                                                                           \
    X(ER_TASK, 4)                                                                          \
    X(ER_FLAGS, 5)                                                                         \
    X(ER_LENGTHS, 6)                                                                       \
    X(ER_CHECK, 7)                                                                         \
    X(ER_TEXT, 8)                                                                          \
    X(ER_TEXT_BYTES, (ERR_RECORD_WORDS - ER_TEXT) * 8)   /* 4032 */                        \
    X(ER_TYPE_MAX, 256)                                                                    \
    X(ER_MESSAGE_MAX, 1024)                                                                \
    X(ERF_REPEATING, 1)                                                                    \
    /* errlog_find's verdicts (shmwheel/service/tracebacks.py words them) */              \
    X(ERRLOG_FOUND, 0)                                                                     \
    X(ERRLOG_MISSING, 1)   /* no record of the timer is left in any log */                 \
    X(ERRLOG_STALE, 2)     /* a repeating timer's newest record found may not be its */    \
                           /* last */                                                      \
    X(ERRLOG_DAMAGED, 3)   /* a record names the timer but does not check out */
CONTRACT_INT(ERROR_LOGS)

#define ERRLOG_LISTS(L) L(ERROR_LOGS)

#endif
