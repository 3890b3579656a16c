/* test_qmat: the quantized kernels are exact and ISA-independent: every row format dequantizes
 * bit-identically on the scalar, AVX2, AVX-512 and NEON paths (those this CPU has; the ISA table
 * itself: aarch64 detects NEON, x86 never does) (all 256 e4m3 codes, all 16 e2m1 codes,
 * every e8m0 scale class incl. subnormal and NaN), and matmul results are bit-identical across
 * ISAs, thread counts and batch sizes; the batched pdb_qmat_matmul_multi equals one matmul per job,
 * and its gangs add their post exactly once per row; the multi-row form for T >= 3 tokens equals the
 * per-row dot bit for bit in every format; pdb_qmat_mix equals zeroing then one pdb_qmat_axpy per row;
 * the thread pool's trace (its diagnosis of the matmul's dispatches) records each run once. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
                if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
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
        if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
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
    int64_t nq = fmt == PDB_QF_MXFP8 ? FR * cols : fmt == PDB_QF_BF16 ? 2 * FR * cols : FR * cols / 2, ns = FR * cols / 32;
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
            for (int isa = PDB_ISA_AVX2; isa <= (int)best; isa++) { /* every vector ISA this CPU has (AVX2 on an AVX-512 CPU too) */
                if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue;
                for (int bw = 1; bw >= 0; bw--) { /* the AVX512BW kernel where the CPU has it, then without */
                    if (!bw && isa != PDB_ISA_AVX512) continue;
                    pdb_qmat_isa_set(PDB_ISA_SCALAR);
                    pdb_qmat_matmul(NULL, &w, x, cols, T, y0, FR, buf);
                    pdb_qmat_isa_set((pdb_qmat_isa)isa);
                    int old_bw = pdb_qmat_use_bw(bw);
                    pdb_qmat_matmul(pool, &w, x, cols, T, y1, FR, buf);
                    pdb_qmat_use_bw(old_bw);
                    if (!same_floats(y0, y1, (int)T * FR))
                        fail_msg("format %d, cols %lld, nan codes %d, pass %d, T=%lld, bw %d: %s differs from scalar", fmt, (long long)cols,
                                 nan_codes, pass, (long long)T, bw, pdb_qmat_isa_name((pdb_qmat_isa)isa));
                }
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
        fused_edges(PDB_QF_BF16, widths[i], 0);
    }
}

/* The multi-row form (T >= 3 on AVX-512: blocks of 16 dequantized rows x tiles of five tokens, each
 * lane half in its own pass) equals the per-row definition bit for bit: every y[t][o] ==
 * pdb_qmat_dot(x_t, row o dequantized) on the scalar ISA, for every format, odd and even T (a last
 * tile of every size 1-4, and 3), row counts with
 * 16-, 4- and single-row tails, widths with and without a 32-tail (f32 / bf16) and MX widths of
 * odd block counts, on 1 and 2 threads and through pdb_qmat_matmul_multi beside another job. */
static void multirow_case(pdb_qfmt fmt, int64_t rows, int64_t cols, int64_t T, pdb_pool *pool) {
    int64_t n = rows * cols, nq = fmt == PDB_QF_F32 ? 4 * n : fmt == PDB_QF_BF16 ? 2 * n : fmt == PDB_QF_MXFP8 ? n : n / 2;
    uint8_t *q = malloc((size_t)nq), *sc = malloc((size_t)(n / 32 + 1));
    float *x = malloc(sizeof(float) * (size_t)(T * cols)), *ref = malloc(sizeof(float) * (size_t)(T * rows));
    float *got = malloc(sizeof(float) * (size_t)(T * rows)), *row = malloc(sizeof(float) * (size_t)cols);
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(2, cols));
    uint32_t r = (uint32_t)(rows * 31 + cols * 7 + T);
    for (int64_t i = 0; i < nq; i++) {
        r = r * 1664525u + 1013904223u;
        q[i] = (uint8_t)(r >> 24);
    }
    if (fmt == PDB_QF_F32) /* finite floats of varied magnitude */
        for (int64_t i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            float v = ((float)(r >> 8) / 16777216.0f - 0.5f) * (float)(1 << (r % 9));
            memcpy(q + 4 * i, &v, 4);
        }
    if (fmt == PDB_QF_BF16)
        for (int64_t i = 0; i < n; i++) q[2 * i + 1] = (uint8_t)((q[2 * i + 1] & 0x80) | (0x38 + q[2 * i + 1] % 16)); /* finite */
    for (int64_t i = 0; i < n / 32 + 1; i++) sc[i] = (uint8_t)(118 + i % 17);
    for (int64_t i = 0; i < T * cols; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    pdb_qmat w = {fmt, rows, cols, q, fmt == PDB_QF_MXFP8 || fmt == PDB_QF_MXFP4 ? sc : NULL, 0};
    pdb_qmat_scan_nan(&w);
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    pdb_qmat_isa_set(PDB_ISA_SCALAR); /* the definition: each element one dot of x_t with the dequantized row */
    for (int64_t o = 0; o < rows; o++) {
        pdb_qmat_row_f32(&w, o, row);
        for (int64_t t = 0; t < T; t++) ref[t * rows + o] = pdb_qmat_dot(x + t * cols, row, cols);
    }
    pdb_qmat_isa_set(best);
    for (int th = 0; th < 2; th++) {
        memset(got, 0xFF, sizeof(float) * (size_t)(T * rows));
        pdb_qmat_matmul(th ? pool : NULL, &w, x, cols, T, got, rows, buf);
        if (!same_floats(ref, got, (int)(T * rows)))
            fail_msg("format %d, %lld x %lld, T=%lld, %s, %d thread(s): the multi-row product differs from the per-row dot", fmt,
                     (long long)rows, (long long)cols, (long long)T, pdb_qmat_isa_name(best), th + 1);
    }
    /* in one dispatch beside a one-token job of the same matrix (its own kernel) */
    float *y1 = malloc(sizeof(float) * (size_t)rows);
    pdb_qmat_job jobs[2] = {{&w, x + (T - 1) * cols, cols, 1, y1, rows}, {&w, x, cols, T, got, rows}};
    memset(got, 0xFF, sizeof(float) * (size_t)(T * rows));
    pdb_qmat_matmul_multi(pool, jobs, 2, buf);
    if (!same_floats(ref, got, (int)(T * rows)) || !same_floats(ref + (T - 1) * rows, y1, (int)rows))
        fail_msg("format %d, %lld x %lld, T=%lld: the multi-row product in a batch differs", fmt, (long long)rows, (long long)cols, (long long)T);
    free(y1);
    free(q), free(sc), free(x), free(ref), free(got), free(row), free(buf);
}

static void test_matmul_multirow(void **st) {
    pdb_pool *pool;
    assert_int_equal(pdb_pool_create(2, &pool), PDB_OK);
    const pdb_qfmt fmts[] = {PDB_QF_F32, PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4};
    const int64_t Ts[] = {3, 4, 6, 7, 9, 37}, rows[] = {37, 53, 4, 19}; /* last token tiles of 3, 4, 1, 2, 4, 2 */
    for (int f = 0; f < 4; f++) {
        int mx = fmts[f] == PDB_QF_MXFP8 || fmts[f] == PDB_QF_MXFP4;
        const int64_t cols[] = {mx ? 160 : 101, mx ? 96 : 37, mx ? 32 : 7, mx ? 4128 : 4099};
        for (int c = 0; c < 4; c++)
            for (int t = 0; t < 6; t++) multirow_case(fmts[f], rows[(c + t) % 4], cols[c], Ts[t], pool);
    }
    pdb_pool_destroy(pool);
}

/* pdb_qmat_dots (four rows at a time) == pdb_qmat_dot row by row, for widths with and without a
 * 32-tail and row counts with and without a 4-tail, on every ISA */
static void test_dots(void **st) {
    enum { N = 200, M = 11, LD = 203 };
    static float x[N], w[M * LD];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 53) % 97) / 31.0f - 1.5f;
    for (int i = 0; i < M * LD; i++) w[i] = (float)((i * 29) % 89) / 17.0f - 2.5f;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    int widths[] = {1, 31, 32, 64, 128, 160, 192, 200};
    for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
        if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        for (int wi = 0; wi < (int)(sizeof widths / sizeof widths[0]); wi++) {
            float got[M], ref[M];
            pdb_qmat_dots(x, w, widths[wi], LD, M, got);
            for (int k = 0; k < M; k++) ref[k] = pdb_qmat_dot(x, w + k * LD, widths[wi]);
            if (memcmp(got, ref, sizeof got)) fail_msg("%s, n=%d: pdb_qmat_dots differs from pdb_qmat_dot", pdb_qmat_isa_name((pdb_qmat_isa)isa), widths[wi]);
            pdb_qmat_isa_set(PDB_ISA_SCALAR);
            for (int k = 0; k < M; k++) ref[k] = pdb_qmat_dot(x, w + k * LD, widths[wi]);
            pdb_qmat_isa_set((pdb_qmat_isa)isa);
            if (memcmp(got, ref, sizeof got)) fail_msg("%s, n=%d: pdb_qmat_dots differs from the scalar dot", pdb_qmat_isa_name((pdb_qmat_isa)isa), widths[wi]);
            /* several x against the rows: every x count around the group of four, every row count around the pair */
            enum { NX = 9, LDX = 201, LDO = 13 };
            static float xs[NX * LDX], o[NX * LDO], r2[NX * LDO];
            for (int i = 0; i < NX * LDX; i++) xs[i] = (float)((i * 41) % 103) / 23.0f - 2.2f;
            for (int nx = 1; nx <= NX; nx++)
                for (int m = 0; m <= M; m++) {
                    memset(o, 0x7F, sizeof o);
                    memcpy(r2, o, sizeof r2);
                    pdb_qmat_dots_xs(xs, LDX, nx, w, LD, m, widths[wi], o, LDO);
                    for (int i = 0; i < nx; i++)
                        for (int k = 0; k < m; k++) r2[i * LDO + k] = pdb_qmat_dot(xs + i * LDX, w + k * LD, widths[wi]);
                    if (memcmp(o, r2, sizeof o))
                        fail_msg("%s, n=%d, %d x, %d rows: pdb_qmat_dots_xs differs from pdb_qmat_dot", pdb_qmat_isa_name((pdb_qmat_isa)isa),
                                 widths[wi], nx, m);
                }
        }
    }
    pdb_qmat_isa_set(best);
}

/* pdb_qmat_mix == memset + pdb_qmat_axpy per row in order, on every ISA, for output counts
 * around the group of eight, widths around the registers of 16 and 32, and zero rows. */
static void test_mix(void **st) {
    enum { NMAX = 45, KMAX = 70, MMAX = 19, LDX = 73, LDP = 47, LDO = 71 };
    static float x[NMAX * LDX], p[MMAX * LDP], got[MMAX * LDO], ref[MMAX * LDO];
    for (int i = 0; i < NMAX * LDX; i++) x[i] = (float)((i * 37) % 101) / 13.0f - 3.7f;
    for (int i = 0; i < MMAX * LDP; i++) p[i] = (float)((i * 19) % 83) / 97.0f;
    p[5] = -0.0f, x[3] = 1e-30f, x[4] = -1e30f;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    int ms[] = {1, 7, 8, 9, 16, 19}, ns[] = {0, 1, 5, 45}, ks[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 70};
    for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
        if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        for (int a = 0; a < 6; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < (int)(sizeof ks / sizeof ks[0]); c++) {
                    int m = ms[a], n = ns[b], k = ks[c];
                    memset(got, 0x7F, sizeof got);
                    memcpy(ref, got, sizeof ref);
                    pdb_qmat_mix(got, LDO, p, LDP, m, x, LDX, n, k);
                    pdb_qmat_isa_set(PDB_ISA_SCALAR);
                    for (int i = 0; i < m; i++) {
                        memset(ref + i * LDO, 0, sizeof(float) * (size_t)k);
                        for (int j = 0; j < n; j++) pdb_qmat_axpy(ref + i * LDO, p[i * LDP + j], x + j * LDX, k);
                    }
                    pdb_qmat_isa_set((pdb_qmat_isa)isa);
                    if (memcmp(got, ref, sizeof got)) fail_msg("%s, m=%d n=%d k=%d: pdb_qmat_mix differs from the axpy chain", pdb_qmat_isa_name((pdb_qmat_isa)isa), m, n, k);
                }
    }
    pdb_qmat_isa_set(best);
}

/* pdb_qmat_matmul_multi == pdb_qmat_matmul job by job, bit for bit: mixed formats (MXFP4, MXFP8
 * with and without NaN codes, bf16, f32), shapes (tails under four rows, one job under the claim
 * minimum, a skipped n = 0 job), jobs sharing an x and jobs with their own, n = 1..5 rows (the
 * decode kernels for n <= 2, the general path above), distinct inputs of one shape, pools of 1, 2 and 3 threads and none, both
 * job orders, every ISA and the MXFP8 kernel with and without AVX512BW. y is compared with its
 * padding (ldy > rows), so the multi form writes exactly the elements a matmul writes. */
enum { MJ = 9 };

static void multi_case(pdb_qmat_job *jobs, float **yref, float **ygot, const int64_t *ysz, pdb_pool **pools, float *buf,
                       const char *what) {
    for (int j = 0; j < MJ; j++) { /* the reference: one matmul per job, one thread */
        for (int64_t i = 0; i < ysz[j]; i++) yref[j][i] = -7.0f;
        pdb_qmat_job r = jobs[j];
        r.y = yref[j];
        pdb_qmat_matmul(NULL, r.w, r.x, r.ldx, r.n, r.y, r.ldy, buf);
    }
    for (int p = 0; p < 4; p++)
        for (int rev = 0; rev < 2; rev++) {
            pdb_qmat_job js[MJ];
            for (int j = 0; j < MJ; j++) {
                int k = rev ? MJ - 1 - j : j;
                js[j] = jobs[k];
                js[j].y = ygot[k];
                for (int64_t i = 0; i < ysz[k]; i++) ygot[k][i] = -7.0f;
            }
            pdb_qmat_matmul_multi(pools[p], js, MJ, buf);
            for (int j = 0; j < MJ; j++)
                if (!same_floats(yref[j], ygot[j], (int)ysz[j]))
                    fail_msg("%s: job %d (format %d, %lld x %lld, n %lld), %d threads, %s order: multi differs from matmul", what, j,
                             jobs[j].w->fmt, (long long)jobs[j].w->rows, (long long)jobs[j].w->cols, (long long)jobs[j].n,
                             p ? pdb_pool_threads(pools[p]) : 0, rev ? "reversed" : "given");
        }
}

static void test_matmul_multi(void **st) {
    static const struct { pdb_qfmt fmt; int64_t rows, cols; int x, nan; } spec[MJ] = {
        {PDB_QF_MXFP4, 37, 256, 0, 0}, {PDB_QF_MXFP4, 40, 256, 4, 0}, {PDB_QF_MXFP8, 100, 256, 0, 0},
        {PDB_QF_BF16, 13, 96, 1, 0},   {PDB_QF_F32, 21, 96, 1, 0},    {PDB_QF_MXFP8, 9, 64, 2, 1},
        {PDB_QF_MXFP4, 3, 64, 2, 0},   {PDB_QF_MXFP8, 12, 64, 2, 0},  {PDB_QF_MXFP4, 64, 1024, 3, 0}};
    static const int64_t xcols[5] = {256, 96, 64, 1024, 256}; /* x 4: another input of x 0's shape */
    enum { NMAX = 5 };
    pdb_qmat w[MJ];
    void *data[MJ];
    uint8_t *scl[MJ];
    float *x[5], *yref[MJ], *ygot[MJ];
    int64_t ysz[MJ];
    uint32_t r = 4242;
    for (int j = 0; j < MJ; j++) {
        int64_t n = spec[j].rows * spec[j].cols, bytes = spec[j].fmt == PDB_QF_F32 ? 4 * n : spec[j].fmt == PDB_QF_BF16 ? 2 * n
                                                          : spec[j].fmt == PDB_QF_MXFP8 ? n : n / 2;
        uint8_t *d = malloc((size_t)bytes);
        scl[j] = malloc((size_t)(n / 32));
        for (int64_t i = 0; i < bytes; i++) {
            r = r * 1664525u + 1013904223u;
            d[i] = (uint8_t)(r >> 24);
            if (spec[j].fmt == PDB_QF_MXFP8 && !spec[j].nan && (d[i] & 0x7F) == 0x7F) d[i] ^= 1;
        }
        if (spec[j].fmt == PDB_QF_F32) /* tame floats */
            for (int64_t i = 0; i < n; i++) ((float *)d)[i] = (float)((i * 31 + j) % 97) / 41.0f - 1.1f;
        for (int64_t i = 0; i < n / 32; i++) { /* mostly the fast path's scales, some beyond it */
            r = r * 1664525u + 1013904223u;
            scl[j][i] = (uint8_t)((r >> 24) % 11 == 0 ? 140 : 115 + (r >> 28));
        }
        data[j] = d;
        w[j] = (pdb_qmat){spec[j].fmt, spec[j].rows, spec[j].cols, d,
                          spec[j].fmt == PDB_QF_MXFP8 || spec[j].fmt == PDB_QF_MXFP4 ? scl[j] : NULL, 0};
        pdb_qmat_scan_nan(&w[j]);
        ysz[j] = NMAX * (spec[j].rows + 3);
        yref[j] = malloc(sizeof(float) * (size_t)ysz[j]);
        ygot[j] = malloc(sizeof(float) * (size_t)ysz[j]);
    }
    for (int k = 0; k < 5; k++) {
        x[k] = malloc(sizeof(float) * (size_t)(NMAX * (xcols[k] + 5)));
        for (int64_t i = 0; i < NMAX * (xcols[k] + 5); i++) x[k][i] = (float)((i * 37 + k) % 101) / 50.0f - 1.0f;
    }
    pdb_pool *pools[4] = {NULL};
    for (int p = 1; p <= 3; p++) assert_int_equal(pdb_pool_create(p, &pools[p]), PDB_OK);
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(3, 1024));
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    for (int64_t n = 1; n <= NMAX; n++) {
        pdb_qmat_job jobs[MJ];
        for (int j = 0; j < MJ; j++) { /* job 6 has its own n; job 7 is skipped (n = 0) */
            int64_t nj = j == 6 ? NMAX + 1 - n : j == 7 ? 0 : n;
            jobs[j] = (pdb_qmat_job){&w[j], x[spec[j].x], xcols[spec[j].x] + 5, nj, NULL, spec[j].rows + 3};
        }
        char what[96];
        for (int isa = PDB_ISA_SCALAR; isa <= (int)best; isa++) {
            if (!pdb_qmat_isa_supported((pdb_qmat_isa)isa)) continue; /* AVX2 / AVX-512 on aarch64 */
            pdb_qmat_isa_set((pdb_qmat_isa)isa);
            snprintf(what, sizeof what, "n=%lld, %s", (long long)n, pdb_qmat_isa_name((pdb_qmat_isa)isa));
            multi_case(jobs, yref, ygot, ysz, pools, buf, what);
        }
        int old_bw = pdb_qmat_use_bw(0);
        snprintf(what, sizeof what, "n=%lld, %s without AVX512BW", (long long)n, pdb_qmat_isa_name(best));
        multi_case(jobs, yref, ygot, ysz, pools, buf, what);
        pdb_qmat_use_bw(old_bw);
    }
    pdb_qmat_isa_set(best);
    for (int p = 1; p <= 3; p++) pdb_pool_destroy(pools[p]);
    for (int j = 0; j < MJ; j++) free(data[j]), free(scl[j]), free(yref[j]), free(ygot[j]);
    for (int k = 0; k < 5; k++) free(x[k]);
    free(buf);
}

/* pdb_qmat_matmul_gangs == one matmul per job, then the post over every row: gangs of three
 * mixed-format members (one member skipped in the second gang, all in the third), n = 1..3, pools
 * of 1-3 threads and none; the post runs after its members' rows (it reads them) and sees each row
 * of each live gang exactly once, the dead gang never. */
enum { GJ = 9 };
static float *gang_first[3];
static _Atomic int gang_hits[3][R];

static void gang_post(const pdb_qmat_job *g, int64_t r0, int64_t r1) {
    int id = g[0].y == gang_first[0] ? 0 : g[0].y == gang_first[1] ? 1 : 2;
    for (int64_t r = r0; r < r1; r++) gang_hits[id][r]++;
    for (int64_t t = 0; t < g[0].n; t++)
        for (int64_t r = r0; r < r1; r++) g[0].y[t * g[0].ldy + r] = g[0].y[t * g[0].ldy + r] * 2.0f + g[2].y[t * g[2].ldy + r];
}

static void test_matmul_gangs(void **st) {
    static const pdb_qfmt fmt[GJ] = {PDB_QF_MXFP4, PDB_QF_MXFP8, PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4,
                                     PDB_QF_BF16,  PDB_QF_MXFP4, PDB_QF_MXFP8, PDB_QF_BF16};
    pdb_qmat w[GJ];
    uint8_t *q[GJ], *sc[GJ];
    uint16_t *bf[GJ];
    float *x = malloc(sizeof(float) * 3 * (C + 3)), *yref[GJ], *ygot[GJ];
    for (int i = 0; i < 3 * (C + 3); i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int j = 0; j < GJ; j++) {
        q[j] = malloc(R * C), sc[j] = malloc(R * C / 32), bf[j] = malloc(sizeof(uint16_t) * R * C);
        fill(&w[j], fmt[j], q[j], sc[j], bf[j]);
        for (int i = 0; i < R * C / 32; i++) sc[j][i] = (uint8_t)(110 + (i * 7 + j) % 20); /* finite results */
        yref[j] = malloc(sizeof(float) * 3 * (R + 2));
        ygot[j] = malloc(sizeof(float) * 3 * (R + 2));
    }
    pdb_pool *pools[4] = {NULL};
    for (int p = 1; p <= 3; p++) assert_int_equal(pdb_pool_create(p, &pools[p]), PDB_OK);
    float *buf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(3, C));
    for (int64_t n = 1; n <= 3; n++) {
        pdb_qmat_job jobs[GJ];
        for (int j = 0; j < GJ; j++) {
            int64_t nj = j == 4 || j >= 6 ? 0 : n; /* gang 1 skips a member, gang 2 all */
            jobs[j] = (pdb_qmat_job){&w[j], x, C + 3, nj, yref[j], R + 2};
            for (int i = 0; i < 3 * (R + 2); i++) yref[j][i] = -7.0f;
            pdb_qmat_matmul(NULL, &w[j], x, C + 3, nj, yref[j], R + 2, buf);
        }
        for (int g = 0; g < 2; g++)
            for (int64_t t = 0; t < n; t++)
                for (int r = 0; r < R; r++) yref[3 * g][t * (R + 2) + r] = yref[3 * g][t * (R + 2) + r] * 2.0f + yref[3 * g + 2][t * (R + 2) + r];
        for (int p = 0; p < 4; p++) {
            for (int j = 0; j < GJ; j++) {
                jobs[j].y = ygot[j];
                for (int i = 0; i < 3 * (R + 2); i++) ygot[j][i] = -7.0f;
            }
            for (int g = 0; g < 3; g++) {
                gang_first[g] = ygot[3 * g];
                for (int r = 0; r < R; r++) gang_hits[g][r] = 0;
            }
            pdb_qmat_matmul_gangs(pools[p], jobs, GJ, 3, gang_post, buf);
            for (int j = 0; j < GJ; j++)
                if (!same_floats(yref[j], ygot[j], 3 * (R + 2)))
                    fail_msg("n=%lld, %d threads: job %d of the gangs differs from matmul + post", (long long)n,
                             p ? pdb_pool_threads(pools[p]) : 0, j);
            for (int g = 0; g < 3; g++)
                for (int r = 0; r < R; r++)
                    if (gang_hits[g][r] != (g < 2))
                        fail_msg("n=%lld, %d threads: gang %d row %d posted %d times", (long long)n, p ? pdb_pool_threads(pools[p]) : 0,
                                 g, r, (int)gang_hits[g][r]);
        }
    }
    for (int p = 1; p <= 3; p++) pdb_pool_destroy(pools[p]);
    for (int j = 0; j < GJ; j++) free(q[j]), free(sc[j]), free(bf[j]), free(yref[j]), free(ygot[j]);
    free(x), free(buf);
}

/* pdb_pool_trace: one record per run that reaches the workers (past the buffer's capacity only
 * counted), each thread's start and end inside its run's publish and return, every task once;
 * a one-task run (the caller alone) and runs after tracing stops leave no record. */
static void count_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    __atomic_add_fetch(&((int *)ctx)[task], 1, __ATOMIC_RELAXED);
}

/* The ISA table: the detected ISA is supported, scalar always is, an aarch64 build detects NEON and
 * an x86-64 one never claims it, and forcing an ISA this CPU lacks never selects it. */
static void test_isa_table(void **st) {
    (void)st;
    pdb_qmat_isa best = pdb_qmat_isa_detect();
    assert_true(pdb_qmat_isa_supported(PDB_ISA_SCALAR));
    assert_true(pdb_qmat_isa_supported(best));
#if defined(__aarch64__)
    assert_int_equal(best, PDB_ISA_NEON);
    assert_false(pdb_qmat_isa_supported(PDB_ISA_AVX2));
    assert_false(pdb_qmat_isa_supported(PDB_ISA_AVX512));
#elif defined(__x86_64__)
    assert_false(pdb_qmat_isa_supported(PDB_ISA_NEON));
    assert_true(best == PDB_ISA_SCALAR || best == PDB_ISA_AVX2 || best == PDB_ISA_AVX512);
#endif
    for (int isa = PDB_ISA_SCALAR; isa <= PDB_ISA_NEON; isa++) {
        pdb_qmat_isa_set((pdb_qmat_isa)isa);
        pdb_qmat_isa now = pdb_qmat_isa_set(best); /* returns what the first call selected */
        assert_true(pdb_qmat_isa_supported(now));
        if (pdb_qmat_isa_supported((pdb_qmat_isa)isa)) assert_int_equal(now, isa);
        for (int j = 0; j < isa; j++) assert_string_not_equal(pdb_qmat_isa_name((pdb_qmat_isa)isa), pdb_qmat_isa_name((pdb_qmat_isa)j));
    }
    printf("  ISAs here:");
    for (int isa = PDB_ISA_SCALAR; isa <= PDB_ISA_NEON; isa++)
        if (pdb_qmat_isa_supported((pdb_qmat_isa)isa)) printf(" %s", pdb_qmat_isa_name((pdb_qmat_isa)isa));
    printf(" (best %s)\n", pdb_qmat_isa_name(best));
}

static void test_pool_trace(void **state) {
    (void)state;
    pdb_pool *pool;
    assert_int_equal(pdb_pool_create(3, &pool), PDB_OK);
    enum { CAP = 4, N = 3, W = 2 + 2 * N };
    double rec[CAP * W];
    int64_t count = 0;
    int hits[64] = {0};
    pdb_pool_trace(pool, rec, CAP, &count);
    for (int r = 0; r < 5; r++) pdb_pool_run(pool, 64, count_task, hits);
    pdb_pool_run(pool, 1, count_task, hits);
    assert_int_equal(count, 5);
    for (int k = 0; k < CAP; k++) {
        const double *t = rec + k * W;
        assert_true(t[0] > 0 && t[1] >= t[0]);
        for (int i = 0; i < N; i++) {
            assert_true(t[2 + 2 * i] >= t[0] && t[3 + 2 * i] >= t[2 + 2 * i]);
            assert_true(t[3 + 2 * i] <= t[1]);
        }
    }
    pdb_pool_trace(pool, NULL, 0, NULL);
    pdb_pool_run(pool, 64, count_task, hits);
    assert_int_equal(count, 5);
    for (int i = 0; i < 64; i++) assert_int_equal(hits[i], i == 0 ? 7 : 6);
    pdb_pool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_scan_nan), cmocka_unit_test(test_rows_identical_across_isas),
                                       cmocka_unit_test(test_matmul_identical), cmocka_unit_test(test_fused_edges),
                                       cmocka_unit_test(test_matmul_multirow),
                                       cmocka_unit_test(test_dots), cmocka_unit_test(test_matmul_multi), cmocka_unit_test(test_mix),
                                       cmocka_unit_test(test_matmul_gangs),
                                       cmocka_unit_test(test_pool_trace), cmocka_unit_test(test_isa_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
