/* bench_read_patterns: how fast the machine's threads read memory in the access patterns of the
 * decode kernels, next to the plain sequential read of bench_decode's probe (the roofline). The
 * fused kernels read four rows at once (a group: one 32-element block of each row in turn) and
 * prefetch the same place in the next group; a group of four 1 KB MXFP4 rows is one 4 KB page.
 * Each form touches every 64-byte line of a buffer of 8x the last-level cache once (one load per
 * line, no arithmetic), 64 contiguous chunks claimed by the pool's threads; best of 5 passes.
 * Usage: bench_read_patterns [threads] (default: online CPUs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_mem.h"
#include "pdb_pool.h"
#include "pdb_sys.h"

typedef struct {
    const char *p;
    size_t chunk;   /* bytes per task */
    size_t row;     /* bytes per row (0: sequential) */
    int pf;         /* 0 none, 1 T0, 2 T1: the same line of the next group */
    double sums[64];
} rp_ctx;

/* one load per line of rows r..r+3 in turn, block by block (a block: 64 bytes of each row) */
static void rp_task(void *vc, int64_t task, int thread) {
    (void)thread;
    rp_ctx *c = vc;
    const char *a = c->p + (size_t)task * c->chunk;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    if (!c->row) {
        for (size_t o = 0; o + 256 <= c->chunk; o += 256) {
            if (c->pf == 2)
                for (int i = 0; i < 4; i++) __builtin_prefetch(a + o + 4096 + 64 * i, 0, 2);
            s0 += *(const float *)(a + o), s1 += *(const float *)(a + o + 64);
            s2 += *(const float *)(a + o + 128), s3 += *(const float *)(a + o + 192);
        }
    } else {
        size_t R = c->row, G = 4 * R;
        for (size_t g = 0; g + G <= c->chunk; g += G)
            for (size_t o = 0; o < R; o += 64) {
                const char *q = a + g + o;
                if (c->pf == 1) for (int i = 0; i < 4; i++) __builtin_prefetch(q + i * R + G, 0, 3);
                if (c->pf == 2) for (int i = 0; i < 4; i++) __builtin_prefetch(q + i * R + G, 0, 2);
                s0 += *(const float *)q, s1 += *(const float *)(q + R);
                s2 += *(const float *)(q + 2 * R), s3 += *(const float *)(q + 3 * R);
            }
    }
    c->sums[task] = s0 + s1 + s2 + s3;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2 || (argc == 2 && threads <= 0)) {
        fprintf(stderr, "usage: bench_read_patterns [threads]\n");
        return 2;
    }
    pdb_pool *pool;
    if (pdb_pool_create(threads, &pool)) { fprintf(stderr, "bench_read_patterns: %s\n", pdb_err_msg()); return 1; }
    long l3 = pdb_sys_l3_bytes();
    size_t bytes = l3 > 0 && (size_t)l3 * 8 > ((size_t)1 << 30) ? (size_t)l3 * 8 : (size_t)1 << 30;
    bytes = bytes / (64 << 14) * (64 << 14); /* 64 chunks of whole 16 KB */
    char *buf = pdb_mem_map(bytes, 1);
    if (!buf) { fprintf(stderr, "bench_read_patterns: out of memory\n"); return 1; }
    memset(buf, 1, bytes);
    static const struct { size_t row; int pf; const char *name; } forms[] = {
        {0, 0, "sequential (the probe's pattern)"},
        {0, 2, "sequential + prefetch T1 4 KB ahead"},
        {1024, 0, "4 rows of 1 KB (MXFP4 2048 wide), no prefetch"},
        {1024, 1, "4 rows of 1 KB, prefetch T0 next group"},
        {1024, 2, "4 rows of 1 KB, prefetch T1 next group"},
        {2048, 0, "4 rows of 2 KB (MXFP8 2048 wide), no prefetch"},
        {2048, 1, "4 rows of 2 KB, prefetch T0 next group"},
        {2048, 2, "4 rows of 2 KB, prefetch T1 next group"},
    };
    printf("threads %d, %.2f GB buffer (huge pages advised), best of 5 passes per form\n", pdb_pool_threads(pool), bytes / 1e9);
    for (int round = 0; round < 2; round++)
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
            rp_ctx c = {buf, bytes / 64, forms[f].row, forms[f].pf, {0}};
            double best = 0;
            for (int r = 0; r < 5; r++) {
                double t0 = pdb_clock_now();
                pdb_pool_run(pool, 64, rp_task, &c);
                double gbs = bytes / (pdb_clock_now() - t0) / 1e9;
                best = gbs > best ? gbs : best;
            }
            printf("round %d  %-48s %7.2f GB/s\n", round + 1, forms[f].name, best);
        }
    pdb_mem_unmap(buf, bytes);
    pdb_pool_destroy(pool);
    return 0;
}
