/* pdb_kernel_digest: the fixed-order kernels' results in one number per ISA, for comparing CPUs
 * (make test-arm64 runs it on x86-64 and under qemu-aarch64 and requires the same digest).
 * Runs, on seeded NaN-free data, every kernel whose order pdb_qmat.h fixes: row dequantization of
 * BF16 / MXFP8 / MXFP4 rows, pdb_qmat_matmul on F32 / BF16 / MXFP8 (NaN-free flag set and unset)
 * / MXFP4 matrices at widths that take every kernel form (one block, 17 blocks, 257 blocks: past
 * the AVX-512 kernels' chunk of 256) with e8m0 scales from the subnormal 2^-127 to 2^73 and
 * 1, 2, 3 and 5 tokens on 1 and 2 threads, pdb_qmat_dot / dots / dots_xs at odd lengths,
 * pdb_qmat_axpy, pdb_qmat_mix and pdb_math_argmax (ties, -0/+0, NaNs among numbers), and
 * hashes every output byte (FNV-1a 64). Every ISA this CPU supports is run; their digests must be
 * equal (the exactness contract), else it exits 1. NaNs are kept out of the products on purpose:
 * which of two NaNs an IEEE operation returns differs between x86 and ARM, and so does the NaN
 * that inf - inf makes (x86's default NaN is 0xFFC00000, ARM's 0x7FC00000; measured: scales up to
 * 2^127 made sums overflow and the digests differ in that one bit), so NaN bits are not part of
 * the contract across CPUs (tests/core/test_qmat.c covers NaN codes and scales within one CPU).
 * usage: pdb_kernel_digest [--isa NAME] (only that ISA; default: every supported one) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_math.h"
#include "pdb_pool.h"
#include "pdb_qmat.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint32_t rng = 2463534242u;
static uint32_t next(void) { /* xorshift32 */
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static float unit(void) { return (float)(next() >> 8) * 0x1p-23f - 1.0f; } /* [-1, 1) */

enum { ROWS = 9 };

typedef struct {
    pdb_qmat w;
    void *data;
    uint8_t *scales;
} mat;

/* A ROWS x cols matrix of format fmt: codes random but never an e4m3 NaN (0x7F / 0xFF), bf16
 * random finite, scales mostly near 2^0 with 0 (2^-127), 1, 140 and 200 (2^73; past the AVX-512
 * fast form's 134, small enough that no sum overflows) mixed in. */
static mat make(pdb_qfmt fmt, uint32_t cols) {
    mat m = {0};
    size_t n = ROWS * (size_t)cols, bytes = fmt == PDB_QF_F32 ? 4 * n : fmt == PDB_QF_BF16 ? 2 * n : fmt == PDB_QF_MXFP8 ? n : n / 2;
    m.data = malloc(bytes);
    uint8_t *b = m.data;
    if (fmt == PDB_QF_F32)
        for (size_t i = 0; i < n; i++) ((float *)m.data)[i] = unit();
    else if (fmt == PDB_QF_BF16)
        for (size_t i = 0; i < n; i++) {
            float f = unit() * 4.0f;
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)m.data)[i] = (uint16_t)(u >> 16);
        }
    else
        for (size_t i = 0; i < bytes; i++) {
            b[i] = (uint8_t)next();
            if (fmt == PDB_QF_MXFP8 && (b[i] & 0x7F) == 0x7F) b[i] ^= 1;
        }
    if (fmt == PDB_QF_MXFP8 || fmt == PDB_QF_MXFP4) {
        m.scales = malloc(n / 32);
        for (size_t i = 0; i < n / 32; i++) {
            uint32_t r = next() % 64;
            m.scales[i] = (uint8_t)(r == 0 ? 0 : r == 1 ? 1 : r == 2 ? 200 : r == 3 ? 140 : 110 + r % 24);
        }
    }
    m.w = (pdb_qmat){fmt, ROWS, cols, m.data, m.scales, 0};
    if (fmt == PDB_QF_MXFP8) pdb_qmat_scan_nan(&m.w);
    return m;
}

static uint64_t digest(pdb_pool *pool1, pdb_pool *pool2) {
    uint64_t h = 1469598103934665603ull;
    rng = 2463534242u;
    const uint32_t widths[] = {32, 544, 8224};
    const pdb_qfmt fmts[] = {PDB_QF_F32, PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4};
    float *x = malloc(sizeof(float) * 5 * 8224), *y = malloc(sizeof(float) * 5 * ROWS), *row = malloc(sizeof(float) * 8224);
    float *rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(2, 8224));
    for (int wi = 0; wi < 3; wi++)
        for (int fi = 0; fi < 4; fi++) {
            int64_t Cw = widths[wi];
            mat m = make(fmts[fi], Cw);
            for (int64_t i = 0; i < 5 * Cw; i++) x[i] = unit();
            for (int pass = 0; pass < (fmts[fi] == PDB_QF_MXFP8 ? 2 : 1); pass++) {
                if (pass) m.w.nan_free = 0; /* the general form with the NaN fix-up, on the same codes */
                for (int64_t r = 0; r < ROWS; r++) {
                    pdb_qmat_row_f32(&m.w, r, row);
                    h = fnv(h, row, sizeof(float) * (size_t)Cw);
                }
                const int64_t Ts[] = {1, 2, 3, 5};
                for (int ti = 0; ti < 4; ti++)
                    for (int p = 0; p < 2; p++) {
                        memset(y, 0, sizeof(float) * 5 * ROWS);
                        pdb_qmat_matmul(p ? pool2 : pool1, &m.w, x, Cw, Ts[ti], y, ROWS, rowbuf);
                        h = fnv(h, y, sizeof(float) * (size_t)(Ts[ti] * ROWS));
                    }
            }
            free(m.data);
            free(m.scales);
        }
    /* dots at odd lengths (tails under 32 lanes), several rows and several x */
    const int64_t ns[] = {1, 7, 31, 32, 33, 100, 1000};
    float *a = malloc(sizeof(float) * 8 * 1000), *b = malloc(sizeof(float) * 8 * 1000), out[64];
    for (int i = 0; i < 8 * 1000; i++) a[i] = unit(), b[i] = unit();
    for (int ni = 0; ni < 7; ni++) {
        int64_t n = ns[ni];
        float d = pdb_qmat_dot(a, b, n);
        h = fnv(h, &d, 4);
        pdb_qmat_dots(a, b, n, n, 7, out);
        h = fnv(h, out, sizeof(float) * 7);
        pdb_qmat_dots_xs(a, n, 5, b, n, 3, n, out, 3);
        h = fnv(h, out, sizeof(float) * 15);
    }
    /* axpy and mix (outputs m x k from n weighted rows) */
    float *acc = malloc(sizeof(float) * 1000);
    for (int i = 0; i < 1000; i++) acc[i] = unit();
    for (int i = 0; i < 5; i++) pdb_qmat_axpy(acc, unit(), a + i * 1000, 997);
    h = fnv(h, acc, sizeof(float) * 1000);
    float *mix = malloc(sizeof(float) * 11 * 70), p[11 * 9];
    for (int i = 0; i < 11 * 9; i++) p[i] = unit();
    pdb_qmat_mix(mix, 70, p, 9, 11, a, 70, 9, 70);
    h = fnv(h, mix, sizeof(float) * 11 * 70);
    /* argmax: the first of equal maxima, -0 before +0, NaNs skipped */
    float v[37];
    for (int i = 0; i < 37; i++) v[i] = (float)(i % 5) - 2.0f;
    int64_t am[4];
    am[0] = pdb_math_argmax(v, 37);
    v[3] = NAN, v[4] = NAN, v[36] = 9.0f;
    am[1] = pdb_math_argmax(v, 37);
    for (int i = 0; i < 37; i++) v[i] = i % 2 ? 0.0f : -0.0f;
    am[2] = pdb_math_argmax(v, 37);
    for (int i = 0; i < 37; i++) v[i] = i == 20 ? -1.0f : NAN;
    am[3] = pdb_math_argmax(v, 37);
    h = fnv(h, am, sizeof am);
    free(x), free(y), free(row), free(rowbuf), free(a), free(b), free(acc), free(mix);
    return h;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--help")) {
        printf("usage: pdb_kernel_digest [--isa scalar|avx2+fma|avx512|neon]\n"
               "prints 'kernel digest ISA HEX' for every ISA this CPU supports (or the one named) and\n"
               "exits 1 when they differ (the fixed-order kernels' exactness contract, pdb_qmat.h)\n");
        return 0;
    }
    const char *only = argc > 2 && !strcmp(argv[1], "--isa") ? argv[2] : NULL;
    if (argc > 1 && !only) {
        fprintf(stderr, "pdb_kernel_digest: unknown option %s (--help)\n", argv[1]);
        return 2;
    }
    pdb_pool *pool1 = NULL, *pool2 = NULL;
    if (pdb_pool_create(1, &pool1) || pdb_pool_create(2, &pool2)) {
        fprintf(stderr, "pdb_kernel_digest: %s\n", pdb_err_msg());
        return 1;
    }
    uint64_t first = 0;
    int n = 0, bad = 0;
    for (int i = PDB_ISA_SCALAR; i <= PDB_ISA_NEON; i++) {
        pdb_qmat_isa isa = (pdb_qmat_isa)i;
        if (!pdb_qmat_isa_supported(isa) || (only && strcmp(only, pdb_qmat_isa_name(isa)))) continue;
        pdb_qmat_isa_set(isa);
        uint64_t d = digest(pool1, pool2);
        printf("kernel digest %s %016llx\n", pdb_qmat_isa_name(isa), (unsigned long long)d);
        if (n++ == 0) first = d;
        else if (d != first) bad = 1;
    }
    pdb_pool_destroy(pool1);
    pdb_pool_destroy(pool2);
    if (!n) {
        fprintf(stderr, "pdb_kernel_digest: ISA %s is not supported here\n", only ? only : "?");
        return 2;
    }
    if (bad) fprintf(stderr, "pdb_kernel_digest: the ISAs' digests DIFFER\n");
    return bad;
}
