/* journal.h: encoding journal records (the format is docs/journal.md's; the one decoder is
 * shmwheel/journal/reader.py). A record is framed as
 *
 *     u32 length of body (little-endian) | u32 CRC-32C of body (Castagnoli) | body
 *
 * (format version 3; versions 1 and 2 framed with zlib's CRC-32, which jcrc32 computes for
 * the scanner of their files), and its body is a msgpack array of fixed arity whose first element is the kind code
 * (J_*). Integers are packed in msgpack's smallest form, as msgpack-python packs them, so
 * a record encoded here is byte-for-byte what the Python side (format.py) would write.
 *
 * A JBuf is a process-local, growable byte buffer that a writer process (coordinator,
 * reaper) fills during a batch and then writes to its segment file with one write(2).
 * Nothing here touches shared memory or files.
 */
#ifndef SHMWHEEL_JOURNAL_H
#define SHMWHEEL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "contract.h"

/* record kinds (the first element of every body), framing, flags (contract.h says how a
 * list becomes constants and reaches Python) */
#define JOURNAL_RECORDS(X)                                                                 \
    X(J_HEADER, 0)                                                                         \
    X(J_SCHEDULED, 1)   /* id, t_us, deadline_ms, task, producer, flags, period_ms, run, */ \
                        /* blob */                                                         \
    X(J_CANCELLED, 2)   /* id, t_us */                                                     \
    X(J_FIRED, 3)       /* id, t_us, run, deadline_ms */                                   \
    X(J_OUTCOME, 4)     /* id, t_us, run, outcome, duration_us, next_deadline_ms (-1: */   \
                        /* ends) */                                                        \
    X(J_WATCHED, 5)     /* id, t_us, deadline_ms (timeout), required, keys (their count), */ \
                        /* on_complete, on_expire (task ids, TASK_NONE: none), blob */     \
                        /* (msgpack [keys, payload]) */                                    \
    X(J_COMPLETED, 6)   /* id, t_us: a completion won; its on_complete runs */             \
    X(J_EXPIRED, 7)     /* id, t_us: the timeout won; its on_expire runs */                \
    X(J_FRAME_BYTES, 8)                                                                    \
    X(J_MAX_BODY, 1 << 20)   /* a longer length field is corruption */                    \
    /* SCHEDULED flags besides the slot's FLAG_KEY / FLAG_REPEAT */                       \
    X(J_FLAG_RECOVERED, 0x100)  /* re-armed by a recovery, not a new schedule */           \
    X(J_FLAG_RESET, 0x200)      /* a reset moved the timer: deadline_ms is its new one */
CONTRACT_INT(JOURNAL_RECORDS)

/* The native scanner's rows (journal.c, journal_scan; journal/reader.py reads them): one
 * row of SCAN_WORDS per frame, its status, and why a scan ended */
#define JOURNAL_SCAN(X)                                                                    \
    X(SCAN_WORDS, 14)                                                                      \
    X(SCAN_OFFSET, 0)     /* the frame's offset in the data */                             \
    X(SCAN_STATUS, 1)                                                                      \
    X(SCAN_KIND, 2)                                                                        \
    X(SCAN_FIELDS, 3)     /* up to SCAN_MAX_FIELDS integer fields from here */             \
    X(SCAN_MAX_FIELDS, 8)                                                                  \
    X(SCAN_BLOB_AT, 11)   /* the blob's offset in the data */                              \
    X(SCAN_BLOB_LEN, 12)                                                                   \
    X(SCAN_WORD, 13)      /* the blob as a little-endian word, if at most 8 bytes */       \
    X(SCAN_DECODED, 0)    /* statuses */                                                   \
    X(SCAN_UNDECODED, 1)  /* a record for the Python decoder */                            \
    X(SCAN_BAD_CRC, 2)                                                                     \
    X(SCAN_END_CLEAN, 0)  /* why a scan ended: the data ended cleanly, */                 \
    X(SCAN_END_TORN_FRAME, 1)   /* in a frame, */                                          \
    X(SCAN_END_TORN_BODY, 2)    /* in a body, */                                           \
    X(SCAN_END_BAD_LENGTH, 3)   /* at a bad length field, */                               \
    X(SCAN_END_FULL, 4)         /* or the rows were full */
CONTRACT_INT(JOURNAL_SCAN)
_Static_assert(SCAN_FIELDS + SCAN_MAX_FIELDS == SCAN_BLOB_AT, "the scan row's fields");

#define JOURNAL_LISTS(L) L(JOURNAL_RECORDS) L(JOURNAL_SCAN)

typedef struct JBuf {
    unsigned char *p;
    size_t len, cap;
    int failed;      /* an allocation failed: the batch's records are incomplete */
    long exports;    /* buffer views handed out: the buffer may not move while > 0 */
} JBuf;

void jcrc_init(void);   /* the CRC tables: once, before the first record (module init) */
uint32_t jcrc32(uint32_t crc, const void *data, size_t n);   /* zlib's: versions 1, 2 */
uint32_t jcrc32c(uint32_t crc, const void *data, size_t n);  /* version 3's frames */
uint32_t jcrc32c_portable(uint32_t crc, const void *data, size_t n);   /* the table form */
int jcrc32c_hardware(void);   /* 1: jcrc32c uses the CPU's crc32 instruction (SSE4.2) */

/* Each appends one framed record (or sets failed). */
void jrec_scheduled(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 task, i64 producer, i64 flags,
                    i64 period, i64 run, const void *blob, size_t len);
void jrec_watched(JBuf *j, i64 id, i64 t_us, i64 deadline, i64 required, i64 nkeys,
                  i64 on_complete, i64 on_expire, const void *blob, size_t len);
void jrec_event(JBuf *j, i64 kind, i64 id, i64 t_us);   /* CANCELLED/COMPLETED/EXPIRED */
void jrec_cancelled(JBuf *j, i64 id, i64 t_us);
void jrec_fired(JBuf *j, i64 id, i64 t_us, i64 run, i64 deadline);
void jrec_outcome(JBuf *j, i64 id, i64 t_us, i64 run, i64 outcome, i64 duration_us,
                  i64 next_deadline);
/* frame an already-encoded msgpack body */
void jrec_raw(JBuf *j, const void *body, size_t len);

i64 jnow_us(void);   /* CLOCK_MONOTONIC in microseconds */

#endif
