/* journal_encode_loop.c: CPU nanoseconds per SCHEDULED record of the native encoder
 * (shmwheel/native/journal_encode.c), in batches of 8192 as the coordinator's, values as
 * W9's batch gives them (a one-byte payload, deadlines 30-60 s out); the best of 5 passes
 * over N records. No Python, no service: the encoder and its checksum alone.
 *
 *     gcc -O2 -I shmwheel/native bench/journal_encode_loop.c \
 *         shmwheel/native/journal_encode.c -o /tmp/encode_loop && /tmp/encode_loop [N]
 *
 * docs/performance.md ("Journal, batch") compares builds of the encoder with it: another
 * commit's journal_encode.c and journal.h in a directory given first to -I. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "journal.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000, batch = 8192;
    unsigned char blob[1] = {0xc0};   /* msgpack nil: no payload */
    i64 t_us = 123456789012LL, h = 5LL << 32;
    JBuf j = {0};
    double best = 1e9;
    jcrc_init();
    for (int pass = 0; pass < 5; pass++) {
        double t0 = cpu_s();
        for (long i = 0; i < n; i += batch) {
            j.len = 0;
            for (long k = 0; k < batch; k++)
                jrec_scheduled(&j, h + i + k, t_us, t_us / 1000 + 30000 + (k & 16383), 0, 4242,
                               0, 0, 1, blob, 1);
        }
        double ns = (cpu_s() - t0) / (double)n * 1e9;
        if (ns < best) best = ns;
    }
    if (j.failed) return 1;
    printf("%.1f ns per SCHEDULED record (%zu bytes per batch of %ld)\n", best, j.len, batch);
    return 0;
}
