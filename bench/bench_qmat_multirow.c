/* bench_qmat_multirow: pdb_qmat's multi-row form (T >= 3 tokens: blocks of dequantized rows x
 * tiles of tokens) against the form it replaced (four rows dequantized, then one token at a time
 * against them: pdb_qmat_dots, dot4_avx512, as qm_rows did for T > 2 before), on V4-Flash's prefill
 * shapes, one thread, run alternately in one process (a busy machine slows both alike; thread CPU
 * time, best of R), outputs checked bit-identical. GMAC/s = rows x cols x T / s.
 * Usage: bench_qmat_multirow [reps] (default 5); one line per case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_qmat.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the previous form: rows in groups of four, each dequantized once, then every token against them */
static void per_token(const pdb_qmat *w, const float *x, int64_t T, float *y, float *rows) {
    int64_t C = w->cols;
    for (int64_t r0 = 0; r0 < w->rows; r0 += 4) {
        for (int i = 0; i < 4; i++) pdb_qmat_row_f32(w, r0 + i, rows + i * C);
        for (int64_t t = 0; t < T; t++) pdb_qmat_dots(x + t * C, rows, C, C, 4, y + t * w->rows + r0);
    }
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (pdb_qmat_isa_detect() != PDB_ISA_AVX512) {
        printf("bench_qmat_multirow: the multi-row form is AVX-512's; this CPU has %s\n", pdb_qmat_isa_name(pdb_qmat_isa_detect()));
        return 0;
    }
    struct { const char *name; pdb_qfmt fmt; int64_t rows, cols, T; } cs[] = {
        {"expert w1/w3 (MXFP4)", PDB_QF_MXFP4, 2048, 4096, 96},   {"expert w2 (MXFP4)", PDB_QF_MXFP4, 4096, 2048, 96},
        {"shared w1 (MXFP4)", PDB_QF_MXFP4, 2048, 4096, 256},     {"wq_b (MXFP8)", PDB_QF_MXFP8, 8192, 1024, 256},
        {"wo_b (MXFP8)", PDB_QF_MXFP8, 4096, 8192, 256},          {"wkv (bf16)", PDB_QF_BF16, 512, 4096, 256}};
    uint32_t r = 1;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t R = cs[c].rows, C = cs[c].cols, T = cs[c].T, n = R * C;
        uint8_t *q = malloc((size_t)(2 * n)), *sc = malloc((size_t)(n / 32));
        float *x = malloc(sizeof(float) * (size_t)(T * C)), *y0 = malloc(sizeof(float) * (size_t)(T * R));
        float *y1 = malloc(sizeof(float) * (size_t)(T * R)), *rows = malloc(sizeof(float) * (size_t)(4 * C));
        float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(1, C));
        for (int64_t i = 0; i < 2 * n; i++) { /* codes of normal values (no e4m3 subnormal / NaN, finite bf16) */
            r = r * 1664525u + 1013904223u;
            uint8_t b = (uint8_t)(r >> 24);
            q[i] = cs[c].fmt == PDB_QF_MXFP8 ? (uint8_t)((b & 0x87) | (0x08 + (b >> 3) % 13 * 8)) : cs[c].fmt == PDB_QF_BF16 && (i & 1) ? (uint8_t)((b & 0x80) | 0x3C) : b;
        }
        for (int64_t i = 0; i < n / 32; i++) sc[i] = (uint8_t)(118 + i % 9);
        for (int64_t i = 0; i < T * C; i++) r = r * 1664525u + 1013904223u, x[i] = (float)(r >> 8) / 16777216.0f - 0.5f;
        pdb_qmat w = {cs[c].fmt, R, C, q, cs[c].fmt == PDB_QF_BF16 ? NULL : sc, 0};
        pdb_qmat_scan_nan(&w);
        double best0 = 1e9, best1 = 1e9;
        for (int k = 0; k < reps; k++) {
            double t0 = now_s();
            per_token(&w, x, T, y0, rows);
            double t1 = now_s();
            pdb_qmat_matmul(NULL, &w, x, C, T, y1, R, buf);
            double t2 = now_s();
            if (t1 - t0 < best0) best0 = t1 - t0;
            if (t2 - t1 < best1) best1 = t2 - t1;
        }
        int same = !memcmp(y0, y1, sizeof(float) * (size_t)(T * R));
        double mac = (double)R * C * T / 1e9;
        printf("%-22s %5lld x %-5lld T=%-4lld per token %6.1f GMAC/s, multi-row %6.1f GMAC/s, %.2fx, outputs %s\n", cs[c].name,
               (long long)R, (long long)C, (long long)T, mac / best0, mac / best1, best0 / best1, same ? "identical" : "DIFFER");
        free(q), free(sc), free(x), free(y0), free(y1), free(rows), free(buf);
        if (!same) return 1;
    }
    return 0;
}
