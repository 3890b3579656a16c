/* qmat_ab: two versions of pdb_qmat's kernels in ONE process (bench/qmat_ab.sh builds it: the old
 * pdb_qmat.c of a git revision, its global symbols renamed old_*, linked beside the working
 * tree's), timed alternately on the same matrix and x, so that a shared machine's load and
 * frequency move both alike; the outputs are compared bit for bit. Thread CPU time, best of
 * `reps` rounds; one thread (pool NULL); T tokens; ISA forced in both when given.
 * Usage: qmat_ab ROWS COLS FORMAT PASSES [T] [REPS] [ISA]
 *   FORMAT 1 bf16, 2 MXFP8, 3 MXFP4; ISA 0 scalar, 1 AVX2, 2 AVX-512 (default: the best). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_qmat.h"

void old_pdb_qmat_matmul(pdb_pool *pool, const pdb_qmat *w, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy,
                         float *rowbuf);
pdb_qmat_isa old_pdb_qmat_isa_set(pdb_qmat_isa isa);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: qmat_ab ROWS COLS FORMAT PASSES [T] [REPS] [ISA]\n");
        return 2;
    }
    int64_t R = atoll(argv[1]), C = atoll(argv[2]);
    int fmt = atoi(argv[3]), passes = atoi(argv[4]), T = argc > 5 ? atoi(argv[5]) : 1, reps = argc > 6 ? atoi(argv[6]) : 15;
    if (R < 4 || C < 32 || C % 32 || fmt < 1 || fmt > 3 || passes < 1 || T < 1 || T > 8 || reps < 1) {
        fprintf(stderr, "qmat_ab: ROWS >= 4, COLS a multiple of 32, FORMAT 1-3, T 1-8\n");
        return 2;
    }
    if (argc > 7) {
        pdb_qmat_isa_set((pdb_qmat_isa)atoi(argv[7]));
        old_pdb_qmat_isa_set((pdb_qmat_isa)atoi(argv[7]));
    }
    int64_t nq = fmt == PDB_QF_MXFP8 ? R * C : fmt == PDB_QF_MXFP4 ? R * C / 2 : R * C * 2, ns = fmt == PDB_QF_BF16 ? 0 : R * C / 32;
    uint8_t *q = malloc((size_t)nq + 64), *sc = malloc((size_t)ns + 64);
    float *x = malloc(sizeof(float) * (size_t)(C * T)), *y0 = malloc(sizeof(float) * (size_t)(R * T)), *y1 = malloc(sizeof(float) * (size_t)(R * T));
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(1, C));
    if (!q || !sc || !x || !y0 || !y1 || !buf) return 1;
    uint32_t r = 1;
    for (int64_t i = 0; i < nq; i++) {
        r = r * 1664525u + 1013904223u;
        q[i] = (uint8_t)(r >> 24);
        if (fmt == PDB_QF_MXFP8 && (q[i] & 0x7F) == 0x7F) q[i] ^= 1;                 /* the quantizer writes no NaN */
        if (fmt == PDB_QF_MXFP8 && (q[i] & 0x78) == 0 && (r & 0xFF00)) q[i] |= 0x08;  /* and few subnormals */
        if (fmt == PDB_QF_BF16 && (i & 1)) q[i] = (uint8_t)((q[i] & 0x80) | (0x3C + (q[i] & 3)));
    }
    for (int64_t i = 0; i < ns; i++) {
        r = r * 1664525u + 1013904223u;
        sc[i] = (uint8_t)(112 + (r >> 29));
    }
    for (int64_t i = 0; i < C * T; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)((int)(r >> 16) - 32768) / 8192.0f;
    }
    pdb_qmat w = {(pdb_qfmt)fmt, R, C, q, ns ? sc : NULL, 0};
    pdb_qmat_scan_nan(&w);
    double b0 = 1e30, b1 = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now_s();
        for (int p = 0; p < passes; p++) old_pdb_qmat_matmul(NULL, &w, x, C, T, y0, R, buf);
        double t1 = now_s();
        for (int p = 0; p < passes; p++) pdb_qmat_matmul(NULL, &w, x, C, T, y1, R, buf);
        double t2 = now_s();
        if (t1 - t0 < b0) b0 = t1 - t0;
        if (t2 - t1 < b1) b1 = t2 - t1;
    }
    double by = (double)(nq + ns) * passes;
    int same = !memcmp(y0, y1, sizeof(float) * (size_t)(R * T));
    printf("%6lld x %-6lld %-5s T=%d: old %6.2f GB/s  new %6.2f GB/s  new/old %.3f  %s\n", (long long)R, (long long)C,
           fmt == 1 ? "bf16" : fmt == 2 ? "mxfp8" : "mxfp4", T, by / b0 / 1e9, by / b1 / 1e9, b0 / b1, same ? "identical" : "DIFFER");
    return same ? 0 : 1;
}
