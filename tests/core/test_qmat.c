/* test_qmat: the quantized kernels are exact and ISA-independent: every row format dequantizes
 * bit-identically on the scalar, AVX2 and AVX-512 paths (all 256 e4m3 codes, all 16 e2m1 codes,
 * every e8m0 scale class incl. subnormal and NaN), and matmul results are bit-identical across
 * ISAs, thread counts and batch sizes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_qmat.h"

enum { C = 256, R = 37 };

static void fill(pdb_qmat *w, pdb_qfmt fmt, uint8_t *q, uint8_t *sc, uint16_t *bf) {
    uint32_t x = 12345;
    for (int i = 0; i < R * C; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = (uint8_t)(i < 256 ? (uint32_t)i : x >> 24); /* row 0 holds every byte value */
        bf[i] = (uint16_t)(x >> 16);
    }
    for (int i = 0; i < R * C / 32; i++) sc[i] = (uint8_t)(i == 0 ? 0 : i == 1 ? 0xFF : i == 2 ? 1 : i == 3 ? 254 : 100 + i % 50);
    *w = (pdb_qmat){fmt, R, C, fmt == PDB_QF_BF16 ? (const void *)bf : q, fmt == PDB_QF_BF16 ? NULL : sc, 0};
}

static void test_scan_nan(void **st) {
    static uint8_t q[R * C], sc[R * C / 32];
    static uint16_t bf[R * C];
    pdb_qmat w;
    fill(&w, PDB_QF_MXFP8, q, sc, bf); /* row 0 holds every byte value, 0x7F and 0xFF included */
    pdb_qmat_scan_nan(&w);
    assert_false(w.nan_free);
    for (int i = 0; i < R * C; i++) if ((q[i] & 0x7F) == 0x7F) q[i] = 0x7E;
    pdb_qmat_scan_nan(&w);
    assert_true(w.nan_free);
    q[R * C - 1] = 0xFF; /* the tail byte too */
    pdb_qmat_scan_nan(&w);
    assert_false(w.nan_free);
}

static void test_rows_identical_across_isas(void **st) {
    static uint8_t q[R * C], sc[R * C / 32];
    static uint16_t bf[R * C];
    pdb_qfmt fmts[] = {PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4};
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    float ref[C], got[C];
    for (int f = 0; f < 3; f++) {
        pdb_qmat w;
        fill(&w, fmts[f], q, sc, bf);
        for (int r = 0; r < R; r++) {
            pdb_qmat_isa_set(PDB_ISA_SCALAR);
            pdb_qmat_row_f32(&w, r, ref);
            for (int isa = PDB_ISA_AVX2; isa <= (int)best; isa++) {
                pdb_qmat_isa_set((pdb_qmat_isa)isa);
                pdb_qmat_row_f32(&w, r, got);
                if (memcmp(ref, got, sizeof ref)) fail_msg("format %d row %d: %s dequantization differs", fmts[f], r, pdb_qmat_isa_name((pdb_qmat_isa)isa));
            }
        }
    }
    pdb_qmat_isa_set(best);
}

/* Bit-identical, except that a NaN only has to meet a NaN: C compilers keep no NaN payload
 * (with -O3 the scalar loops are vectorised and the operand order of a NaN-propagating add
 * changes), and the random bf16 matrix here holds NaN weights. */
static int same_floats(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) && !(isnan(a[i]) && isnan(b[i]))) return 0;
    return 1;
}

static void matmul_identical(pdb_qfmt fmt) {
    static uint8_t q[R * C], sc[R * C / 32];
    static uint16_t bf[R * C];
    pdb_qmat w;
    fill(&w, fmt, q, sc, bf);
    for (int i = 0; i < R * C / 32; i++) sc[i] = (uint8_t)(120 + i % 10); /* finite scales */
    for (int i = 0; i < R * C; i++) if ((q[i] & 0x7F) == 0x7F) q[i] ^= 1;  /* no NaN codes */
    pdb_qmat_scan_nan(&w);
    if (fmt == PDB_QF_MXFP8 && !w.nan_free) fail_msg("scan: a NaN-free matrix was not flagged");
    enum { T = 5 };
    float x[T * C], y0[T * R], y1[T * R];
    for (int i = 0; i < T * C; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    pdb_pool *pool;
    assert_int_equal(pdb_pool_create(2, &pool), PDB_OK);
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(2, C));
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    pdb_qmat_isa_set(PDB_ISA_SCALAR);
    pdb_qmat_matmul(NULL, &w, x, C, T, y0, R, buf);
    for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        pdb_qmat_matmul(pool, &w, x, C, T, y1, R, buf);
        if (!same_floats(y0, y1, T * R)) fail_msg("format %d, %s, 2 threads, T=%d differs from scalar", fmt, pdb_qmat_isa_name((pdb_qmat_isa)isa), T);
        for (int t = 0; t < T; t++) { /* one token at a time = the same rows */
            pdb_qmat_matmul(pool, &w, x + t * C, C, 1, y1 + t * R, R, buf);
        }
        if (!same_floats(y0, y1, T * R)) fail_msg("format %d, %s, T=1 differs from T=%d", fmt, pdb_qmat_isa_name((pdb_qmat_isa)isa), T);
    }
    pdb_qmat_isa_set(best);
    free(buf);
    pdb_pool_destroy(pool);
}

/* decode (T <= 2) uses fused in-register kernels for MX formats: still identical */
static void test_matmul_identical(void **st) {
    matmul_identical(PDB_QF_MXFP8);
    matmul_identical(PDB_QF_MXFP4);
    matmul_identical(PDB_QF_BF16);
}

/* The decode kernels fold the e4m3 rebias into the block scale and scale the e2m1 table instead
 * of each value: exact for every scale, so every e8m0 class (0 = 2^-127, 1, the last one the fold
 * takes (134), the first it does not (135), 254, NaN) and x from subnormal to huge must give the
 * scalar reference's bits, for T = 1 and 2, with and without NaN codes, and for rows wider than
 * the kernels' scale table. */
static void fused_edges(pdb_qfmt fmt, int64_t cols, int nan_codes) {
    enum { FR = 13 };
    int64_t nq = fmt == PDB_QF_MXFP8 ? FR * cols : FR * cols / 2, ns = FR * cols / 32;
    uint8_t *q = malloc((size_t)nq), *sc = malloc((size_t)ns);
    float *x = malloc(sizeof(float) * 2 * (size_t)cols), *y0 = malloc(sizeof(float) * 2 * FR), *y1 = malloc(sizeof(float) * 2 * FR);
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(2, cols));
    static const uint8_t cls[] = {0, 1, 2, 7, 8, 100, 127, 133, 134, 135, 136, 200, 253, 254, 0xFF};
    uint32_t r = 777;
    for (int64_t i = 0; i < nq; i++) {
        r = r * 1664525u + 1013904223u;
        q[i] = (uint8_t)(r >> 24);
        if (!nan_codes && fmt == PDB_QF_MXFP8 && (q[i] & 0x7F) == 0x7F) q[i] ^= 1;
    }
    for (int64_t i = 0; i < 2 * cols; i++) {
        r = r * 1664525u + 1013904223u;
        float m = (float)((r >> 8) & 0xFFFF) / 65536.0f - 0.5f;
        int k = (int)(i % 7);
        x[i] = k == 0 ? m * 0x1p-140f : k == 1 ? m * 0x1p100f : k == 2 ? m * 0x1p-60f : m;
    }
    pdb_pool *pool;
    assert_int_equal(pdb_pool_create(2, &pool), PDB_OK);
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    /* every class in some row; a tame matrix (fast path taken); a tame one with one large scale in
     * the last block of each row (long rows: the kernels switch form after their first chunks) */
    for (int pass = 0; pass < 4; pass++) {
        for (int64_t i = 0; i < ns; i++) {
            r = r * 1664525u + 1013904223u;
            sc[i] = pass >= 2 ? (uint8_t)(110 + (r >> 28)) : pass == 0 ? cls[i % (int64_t)sizeof cls] : cls[(r >> 24) % sizeof cls];
            if (pass == 3 && i % (cols / 32) == cols / 32 - 1) sc[i] = 140;
        }
        pdb_qmat w = {fmt, FR, cols, q, sc, 0};
        pdb_qmat_scan_nan(&w);
        for (int64_t T = 1; T <= 2; T++)
            for (int bw = 1; bw >= 0; bw--) { /* the AVX512BW kernel where the CPU has it, then without */
                pdb_qmat_isa_set(PDB_ISA_SCALAR);
                pdb_qmat_matmul(NULL, &w, x, cols, T, y0, FR, buf);
                pdb_qmat_isa_set(best);
                int old_bw = pdb_qmat_use_bw(bw);
                pdb_qmat_matmul(pool, &w, x, cols, T, y1, FR, buf);
                pdb_qmat_use_bw(old_bw);
                if (!same_floats(y0, y1, (int)T * FR))
                    fail_msg("format %d, cols %lld, nan codes %d, pass %d, T=%lld, bw %d: %s differs from scalar", fmt, (long long)cols,
                             nan_codes, pass, (long long)T, bw, pdb_qmat_isa_name(best));
            }
    }
    pdb_pool_destroy(pool);
    free(q), free(sc), free(x), free(y0), free(y1), free(buf);
}

static void test_fused_edges(void **st) {
    int64_t widths[] = {32, 96, 2048, 16384 + 64};
    for (int i = 0; i < 4; i++) {
        fused_edges(PDB_QF_MXFP8, widths[i], 0);
        fused_edges(PDB_QF_MXFP8, widths[i], 1);
        fused_edges(PDB_QF_MXFP4, widths[i], 0);
    }
}

/* pdb_qmat_dots (four rows at a time) == pdb_qmat_dot row by row, for widths with and without a
 * 32-tail and row counts with and without a 4-tail, on every ISA */
static void test_dots(void **st) {
    enum { N = 200, M = 11, LD = 203 };
    static float x[N], w[M * LD];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 53) % 97) / 31.0f - 1.5f;
    for (int i = 0; i < M * LD; i++) w[i] = (float)((i * 29) % 89) / 17.0f - 2.5f;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    int widths[] = {1, 31, 32, 64, 128, 160, 200};
    for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        for (int wi = 0; wi < 7; wi++) {
            float got[M], ref[M];
            pdb_qmat_dots(x, w, widths[wi], LD, M, got);
            for (int k = 0; k < M; k++) ref[k] = pdb_qmat_dot(x, w + k * LD, widths[wi]);
            if (memcmp(got, ref, sizeof got)) fail_msg("%s, n=%d: pdb_qmat_dots differs from pdb_qmat_dot", pdb_qmat_isa_name((pdb_qmat_isa)isa), widths[wi]);
            pdb_qmat_isa_set(PDB_ISA_SCALAR);
            for (int k = 0; k < M; k++) ref[k] = pdb_qmat_dot(x, w + k * LD, widths[wi]);
            pdb_qmat_isa_set((pdb_qmat_isa)isa);
            if (memcmp(got, ref, sizeof got)) fail_msg("%s, n=%d: pdb_qmat_dots differs from the scalar dot", pdb_qmat_isa_name((pdb_qmat_isa)isa), widths[wi]);
        }
    }
    pdb_qmat_isa_set(best);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_scan_nan), cmocka_unit_test(test_rows_identical_across_isas),
                                       cmocka_unit_test(test_matmul_identical), cmocka_unit_test(test_fused_edges),
                                       cmocka_unit_test(test_dots)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
