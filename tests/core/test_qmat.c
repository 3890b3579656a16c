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
        if (memcmp(y0, y1, sizeof y0)) fail_msg("%s, 2 threads, T=%d differs from scalar", pdb_qmat_isa_name((pdb_qmat_isa)isa), T);
        for (int t = 0; t < T; t++) { /* one token at a time = the same rows */
            pdb_qmat_matmul(pool, &w, x + t * C, C, 1, y1 + t * R, R, buf);
        }
        if (memcmp(y0, y1, sizeof y0)) fail_msg("%s, T=1 differs from T=%d", pdb_qmat_isa_name((pdb_qmat_isa)isa), T);
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_scan_nan), cmocka_unit_test(test_rows_identical_across_isas),
                                       cmocka_unit_test(test_matmul_identical)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
