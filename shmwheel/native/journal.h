/* journal.h: encoding journal records (the format is docs/journal.md's; the one decoder is
 * shmwheel/journal/reader.py). A record is framed as
 *
 *     u32 length of body (little-endian) | u32 CRC-32 of body (zlib's) | body
 *
 * and its body is a msgpack array of fixed arity whose first element is the kind code
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

/* record kinds: the first element of every body */
#define J_HEADER 0
#define J_SCHEDULED 1   /* id, t_us, deadline_ms, task, producer, flags, period_ms, run, blob */
#define J_CANCELLED 2   /* id, t_us */
#define J_FIRED 3       /* id, t_us, run, deadline_ms */
#define J_OUTCOME 4     /* id, t_us, run, outcome, duration_us, next_deadline_ms (-1: ends) */
#define J_WATCHED 5     /* id, t_us, deadline_ms (timeout), required, keys (their count),
                           on_complete, on_expire (task ids, TASK_NONE: none), blob
                           (msgpack [keys, payload]) */
#define J_COMPLETED 6   /* id, t_us: a completion won; its on_complete runs */
#define J_EXPIRED 7     /* id, t_us: the timeout won; its on_expire runs */
#define J_FRAME_BYTES 8
#define J_MAX_BODY (1 << 20)   /* a longer length field is corruption */

/* SCHEDULED flags besides the slot's FLAG_KEY / FLAG_REPEAT */
#define J_FLAG_RECOVERED 0x100  /* re-armed by a recovery, not a new schedule */
#define J_FLAG_RESET 0x200      /* a reset moved the timer: deadline_ms is its new deadline */

typedef struct JBuf {
    unsigned char *p;
    size_t len, cap;
    int failed;      /* an allocation failed: the batch's records are incomplete */
    long exports;    /* buffer views handed out: the buffer may not move while > 0 */
} JBuf;

void jcrc_init(void);   /* the CRC table: once, before the first record (module init) */
uint32_t jcrc32(uint32_t crc, const void *data, size_t n);

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
