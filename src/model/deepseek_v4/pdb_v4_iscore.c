/* pdb_v4_iscore: the indexer's key scores on the cache's key rows (pdb_v4_iscore.h states the
 * exactness argument). Layout of a prepared query (one buffer, pdb_v4_iscore_query_bytes):
 *   iq_hdr, then per head h and block b (nb = dim / 32 blocks):
 *     qv   int8  [nih, dim]  2 * the e2m1 value of each dim, in the kernel's order: block b's bytes
 *                            0..15 are dims 32b + 0, 2, .., 30 (the low nibbles of the key's 16
 *                            packed bytes), bytes 16..31 dims 32b + 1, 3, .., 31 (the high ones)
 *     corr int32 [nih, nb]   12 * sum of the block's qv (the keys enter the VNNI kernel as 2k + 12 >= 0)
 *     qs   f64   [nih, nb]   2^(Eq_b - 1), Eq_b = the block's e8m0 byte - 127
 * A key's 2k and 2^(Ek_b - 1) come from its row; the score's block terms are
 * N_b * qs_b * ks_b, N_b = sum qv * kv, all exact (pdb_v4_iscore.h). */
#include "pdb_v4_iscore.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dtype.h"
#include "pdb_v4_dots.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ISC_X86 1
#include <immintrin.h>
#else
#define ISC_X86 0
#endif

enum { TILE = 16, NB_MAX = 64 /* dim <= 2048 */ };

typedef struct iq_hdr {
    pdb_v4_row kr;
    const float *q, *hw;
    float sscale;
    int64_t nih, dim, nb;
    int ok;        /* every query head is e2m1 x 2^k per 32 (re-encoded without loss), no NaN scale, nb <= NB_MAX */
    int qspread;   /* max over heads of (max_b Eq_b - min_b Eq_b) */
    int spread_max; /* the largest s with 144 * dim * 2^s <= 2^53: a (head, key) pair whose block exponents span
                       at most s has an exact double chain (dim 128: 38; 2048: 34) */
    int64_t off_qv, off_corr, off_qs;
} iq_hdr;

static int64_t al64(int64_t n) { return (n + 63) & ~(int64_t)63; }

int64_t pdb_v4_iscore_query_bytes(int64_t nih, int64_t ihd) {
    int64_t nb = ihd / 32;
    return al64((int64_t)sizeof(iq_hdr)) + al64(nih * ihd) + al64(4 * nih * nb) + al64(8 * nih * nb) + 64;
}

static void *aligned(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* 2 * e2m1 of a nibble (sign in bit 3). */
static const int8_t E2M1_X2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void pdb_v4_iscore_prepare(const pdb_v4_row *kr, const float *q, const float *hw, int64_t nih, float sscale, void *buf) {
    iq_hdr *h = aligned(buf);
    int64_t dim = kr->dim, nb = dim / 32;
    *h = (iq_hdr){.kr = *kr, .q = q, .hw = hw, .sscale = sscale, .nih = nih, .dim = dim, .nb = nb, .ok = 1};
    while (((uint64_t)144 * (uint64_t)dim << (h->spread_max + 1)) <= ((uint64_t)1 << 53)) h->spread_max++;
    h->off_qv = al64((int64_t)sizeof(iq_hdr));
    h->off_corr = h->off_qv + al64(nih * dim);
    h->off_qs = h->off_corr + al64(4 * nih * nb);
    if (kr->fmt != PDB_V4_ROW_FP4) { h->ok = 0; return; }
    int8_t *qv = (int8_t *)h + h->off_qv;
    int32_t *corr = (int32_t *)((char *)h + h->off_corr);
    double *qs = (double *)((char *)h + h->off_qs);
    uint8_t row[NB_MAX * 17 + 4];
    for (int64_t i = 0; i < nih; i++) {
        if (pdb_v4_row_encode(kr, q + i * dim, row)) h->ok = 0; /* not an FP4 row: the f32 path for every key */
        int emin = 1000, emax = -1000;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t e = row[kr->off_scales + b];
            if (e == 0xFF) h->ok = 0;
            int E = (int)e - 127;
            emin = E < emin ? E : emin;
            emax = E > emax ? E : emax;
            qs[i * nb + b] = ldexp(1.0, E - 1);
            int32_t sum = 0;
            for (int m = 0; m < 16; m++) {
                uint8_t p = row[b * 16 + m];
                int8_t lo = E2M1_X2[p & 15], hi = E2M1_X2[p >> 4];
                qv[i * dim + b * 32 + m] = lo;
                qv[i * dim + b * 32 + 16 + m] = hi;
                sum += lo + hi;
            }
            corr[i * nb + b] = 12 * sum;
        }
        if (emax - emin > h->qspread) h->qspread = emax - emin;
    }
}

/* A key's exponent spread (max - min of its blocks' E); 1000 when a scale byte is NaN. */
static int key_spread(const pdb_v4_row *kr, const uint8_t *row, int64_t nb) {
    int emin = 1000, emax = -1000;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t e = row[kr->off_scales + b];
        if (e == 0xFF) return 1000;
        emin = e < emin ? e : emin;
        emax = e > emax ? e : emax;
    }
    return emax - emin;
}

static int64_t n_int, n_f32; /* pdb_v4_iscore_counts */

void pdb_v4_iscore_counts(int64_t *int_keys, int64_t *f32_keys) {
    *int_keys = __atomic_load_n(&n_int, __ATOMIC_RELAXED);
    *f32_keys = __atomic_load_n(&n_f32, __ATOMIC_RELAXED);
}

/* The f32 path for keys [w0, w1): decoded exactly, scored by the reference kernel. */
static void score_f32(const iq_hdr *h, const uint8_t *keys, int64_t w0, int64_t w1, float *out) {
    float buf[8192]; /* 64 keys of 128 (32 KB of stack, as the reference kernel's own tile) */
    int64_t step = 8192 / h->dim; /* >= 4: official's dim <= 2048 (pdb_v4_check_semantics) */
    for (int64_t w = w0; w < w1; w += step) {
        int64_t n = w1 - w < step ? w1 - w : step;
        pdb_v4_row_decode_rows(&h->kr, keys + w * h->kr.bytes, NULL, n, buf);
        pdb_v4_index_scores(h->q, h->hw, h->nih, h->dim, buf, 0, n, h->sscale, out + (w - w0));
    }
}

/* A tile of the integer kernels that takes the f32 path. */
static void tile_f32(const iq_hdr *h, const uint8_t *keys, int64_t w0, int64_t w1, float *out) {
    __atomic_fetch_sub(&n_int, w1 - w0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&n_f32, w1 - w0, __ATOMIC_RELAXED);
    score_f32(h, keys, w0, w1, out);
}

/* What follows each head's dot, per key: the reference's f32 relu, scale and weight, the double sum
 * over heads in order. */
static inline double head_term(const iq_hdr *h, int64_t i, double dot) {
    float dp = (float)dot, rl = dp > 0 ? dp * h->sscale : 0.0f;
    return (double)(rl * h->hw[i]);
}

/* The portable integer kernel: one key at a time. */
static void score_scalar(const iq_hdr *h, const uint8_t *keys, int64_t w0, int64_t w1, float *out) {
    const int8_t *qv = (const int8_t *)h + h->off_qv;
    const double *qs = (const double *)((const char *)h + h->off_qs);
    int64_t nb = h->nb, dim = h->dim;
    for (int64_t w = w0; w < w1; w++) {
        const uint8_t *row = keys + w * h->kr.bytes;
        if (h->qspread + key_spread(&h->kr, row, nb) > h->spread_max) {
            tile_f32(h, keys, w, w + 1, out + (w - w0));
            continue;
        }
        int8_t kv[2048];
        double ks[NB_MAX];
        for (int64_t b = 0; b < nb; b++) {
            ks[b] = ldexp(1.0, (int)row[h->kr.off_scales + b] - 128);
            for (int m = 0; m < 16; m++) {
                uint8_t p = row[b * 16 + m];
                kv[b * 32 + m] = E2M1_X2[p & 15];
                kv[b * 32 + 16 + m] = E2M1_X2[p >> 4];
            }
        }
        double s = 0;
        for (int64_t i = 0; i < h->nih; i++) {
            double dot = 0;
            for (int64_t b = 0; b < nb; b++) {
                int32_t n = 0;
                const int8_t *a = qv + i * dim + b * 32, *k = kv + b * 32;
                for (int d = 0; d < 32; d++) n += a[d] * k[d];
                dot += (double)n * (qs[i * nb + b] * ks[b]);
            }
            s += head_term(h, i, dot);
        }
        out[w - w0] = (float)s;
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && ISC_X86
#define ISC_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
static int isc_on = -1; /* the CPU has the kernel's instructions; -1: not checked yet */
static int isc_cpu(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}
static int isc_vnni(void) {
    int r = __atomic_load_n(&isc_on, __ATOMIC_RELAXED);
    if (r < 0) {
        r = isc_cpu();
        __atomic_store_n(&isc_on, r, __ATOMIC_RELAXED);
    }
    return r;
}

/* One tile of 16 keys (rows r[0..15]): per block b and group g (4 dims) a register of the 16 keys'
 * 4 bytes (2k + 12), kt[(b * 8 + g) * 64 ..]; the keys' 2^(Ek_b - 1) into ks[b * 16 + j]. */
ISC_VNNI static void tile_build(const iq_hdr *h, const uint8_t *const *r, uint8_t *kt, double *ks) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i m4 = _mm512_set1_epi8(15);
    int64_t off = h->kr.off_scales;
    for (int64_t b = 0; b < h->nb; b++) {
        __m512i zl[4], zh[4];
        for (int q = 0; q < 4; q++) { /* keys 4q .. 4q+3, one per 128-bit lane */
            __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r[4 * q] + b * 16)));
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 1] + b * 16)), 1);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 2] + b * 16)), 2);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 3] + b * 16)), 3);
            zl[q] = _mm512_shuffle_epi8(lut, _mm512_and_si512(z, m4));
            zh[q] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
        }
        for (int g = 0; g < 4; g++) { /* dword g of each lane of zl[0..3] -> dword 4q + lane */
            const __m512i ix = _mm512_setr_epi32(g, 4 + g, 8 + g, 12 + g, 16 + g, 20 + g, 24 + g, 28 + g, 0, 0, 0, 0, 0, 0, 0, 0);
            __m512i a = _mm512_permutex2var_epi32(zl[0], ix, zl[1]), c = _mm512_permutex2var_epi32(zl[2], ix, zl[3]);
            _mm512_store_si512((__m512i *)(kt + (b * 8 + g) * 64), _mm512_shuffle_i64x2(a, c, 0x44));
            a = _mm512_permutex2var_epi32(zh[0], ix, zh[1]);
            c = _mm512_permutex2var_epi32(zh[2], ix, zh[3]);
            _mm512_store_si512((__m512i *)(kt + (b * 8 + 4 + g) * 64), _mm512_shuffle_i64x2(a, c, 0x44));
        }
        for (int j = 0; j < TILE; j++) ks[b * TILE + j] = ldexp(1.0, (int)r[j][off + b] - 128);
    }
}

/* Head i's term for the tile's 16 keys from its nb block sums acc[b] (already with the +12 offset
 * removed), added to the two double accumulators s0 (keys 0..7), s1 (8..15). N_b * (qs * ks) is
 * exact (an integer below 2^14 times a power of two), so the fused multiply-add rounds the same sum
 * as a multiply and an add. */
ISC_VNNI static inline __attribute__((always_inline)) void tile_head(const iq_hdr *h, int64_t i, const __m512i *acc, int64_t nb,
                                                                     const double *ks, const double *qs, __m512d *s0,
                                                                     __m512d *s1) {
    __m512d d0 = _mm512_setzero_pd(), d1 = d0;
    for (int64_t b = 0; b < nb; b++) {
        __m512d q = _mm512_set1_pd(qs[b]);
        __m512d n0 = _mm512_cvtepi32_pd(_mm512_castsi512_si256(acc[b]));
        __m512d n1 = _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(acc[b], 1));
        d0 = _mm512_fmadd_pd(n0, _mm512_mul_pd(q, _mm512_load_pd(ks + b * TILE)), d0);
        d1 = _mm512_fmadd_pd(n1, _mm512_mul_pd(q, _mm512_load_pd(ks + b * TILE + 8)), d1);
    }
    /* (float)dot; relu_s: dot > 0 ? dot * sscale : 0 (max(x, +0) is +0 for -0 and NaN, as the
     * reference's comparison); times the head weight in f32; into the double sum */
    __m512 dp = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(d0)), _mm512_cvtpd_ps(d1), 1);
    __m512 rl = _mm512_mul_ps(_mm512_max_ps(dp, _mm512_setzero_ps()), _mm512_set1_ps(h->sscale));
    __m512 t = _mm512_mul_ps(rl, _mm512_set1_ps(h->hw[i]));
    *s0 = _mm512_add_pd(*s0, _mm512_cvtps_pd(_mm512_castps512_ps256(t)));
    *s1 = _mm512_add_pd(*s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1)));
}

/* Heads i .. i+3 over one tile, nb blocks (a constant where it is inlined: the accumulators stay in
 * registers): four heads share each key register. */
ISC_VNNI static inline __attribute__((always_inline)) void tile_heads4(const iq_hdr *h, int64_t i, const uint8_t *kt,
                                                                       const double *ks, const int nb, __m512d *s0, __m512d *s1) {
    const int8_t *qv = (const int8_t *)h + h->off_qv;
    const int32_t *corr = (const int32_t *)((const char *)h + h->off_corr);
    const double *qs = (const double *)((const char *)h + h->off_qs);
    int64_t dim = h->dim;
    __m512i acc[4][4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) acc[k][b] = _mm512_set1_epi32(-corr[(i + k) * nb + b]);
#pragma GCC unroll 4
    for (int b = 0; b < nb; b++)
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i kk = _mm512_load_si512((const __m512i *)(kt + (b * 8 + g) * 64));
            const int8_t *qb = qv + i * dim + b * 32 + 4 * g;
            int32_t q0, q1, q2, q3;
            memcpy(&q0, qb, 4), memcpy(&q1, qb + dim, 4), memcpy(&q2, qb + 2 * dim, 4), memcpy(&q3, qb + 3 * dim, 4);
            acc[0][b] = _mm512_dpbusd_epi32(acc[0][b], kk, _mm512_set1_epi32(q0));
            acc[1][b] = _mm512_dpbusd_epi32(acc[1][b], kk, _mm512_set1_epi32(q1));
            acc[2][b] = _mm512_dpbusd_epi32(acc[2][b], kk, _mm512_set1_epi32(q2));
            acc[3][b] = _mm512_dpbusd_epi32(acc[3][b], kk, _mm512_set1_epi32(q3));
        }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) tile_head(h, i + k, acc[k], nb, ks, qs + (i + k) * nb, s0, s1);
}

ISC_VNNI static void score_vnni(const iq_hdr *h, const uint8_t *keys, int64_t w0, int64_t w1, float *out) {
    const int8_t *qv = (const int8_t *)h + h->off_qv;
    const int32_t *corr = (const int32_t *)((const char *)h + h->off_corr);
    const double *qs = (const double *)((const char *)h + h->off_qs);
    int64_t nb = h->nb, dim = h->dim, nih = h->nih;
    _Alignas(64) uint8_t kt[NB_MAX * 8 * 64];
    _Alignas(64) double ks[NB_MAX * TILE], so[TILE];
    for (int64_t w = w0; w < w1; w += TILE) {
        int64_t n = w1 - w < TILE ? w1 - w : TILE;
        const uint8_t *r[TILE];
        int spread = 0;
        for (int64_t j = 0; j < TILE; j++) { /* a short tile repeats key w (results dropped) */
            r[j] = keys + (w + (j < n ? j : 0)) * h->kr.bytes;
            int sp = key_spread(&h->kr, r[j], nb);
            spread = sp > spread ? sp : spread;
        }
        if (h->qspread + spread > h->spread_max) {
            tile_f32(h, keys, w, w + n, out + (w - w0));
            continue;
        }
        tile_build(h, r, kt, ks);
        __m512d s0 = _mm512_setzero_pd(), s1 = s0;
        int64_t i = 0;
        switch (nb) { /* four heads at a time, the blocks unrolled (index_head_dim 32, 64, 128) */
        case 1: for (; i + 4 <= nih; i += 4) tile_heads4(h, i, kt, ks, 1, &s0, &s1); break;
        case 2: for (; i + 4 <= nih; i += 4) tile_heads4(h, i, kt, ks, 2, &s0, &s1); break;
        case 4: for (; i + 4 <= nih; i += 4) tile_heads4(h, i, kt, ks, 4, &s0, &s1); break;
        default: break;
        }
        for (; i < nih; i++) { /* one head at a time (the last heads; any nb) */
            __m512i acc[NB_MAX];
            for (int64_t b = 0; b < nb; b++) {
                acc[b] = _mm512_set1_epi32(-corr[i * nb + b]);
                for (int g = 0; g < 8; g++) {
                    int32_t q0;
                    memcpy(&q0, qv + i * dim + b * 32 + 4 * g, 4);
                    acc[b] = _mm512_dpbusd_epi32(acc[b], _mm512_load_si512((const __m512i *)(kt + (b * 8 + g) * 64)),
                                                 _mm512_set1_epi32(q0));
                }
            }
            tile_head(h, i, acc, nb, ks, qs + i * nb, &s0, &s1);
        }
        _mm512_store_pd(so, s0);
        _mm512_store_pd(so + 8, s1);
        for (int64_t j = 0; j < n; j++) out[w - w0 + j] = (float)so[j];
    }
}
#endif

int pdb_v4_iscore_has_vnni(void) {
#if (defined(__x86_64__) || defined(__i386__)) && ISC_X86
    return isc_vnni();
#else
    return 0;
#endif
}

static int isc_kernel = -1; /* -1: the default, chosen at the first call */

int pdb_v4_iscore_kernel(int k) {
    int old = __atomic_load_n(&isc_kernel, __ATOMIC_RELAXED);
    if (old < 0) old = pdb_v4_iscore_has_vnni() ? PDB_V4_ISCORE_VNNI : PDB_V4_ISCORE_F32;
    if (k == PDB_V4_ISCORE_VNNI && !pdb_v4_iscore_has_vnni()) k = PDB_V4_ISCORE_F32;
    __atomic_store_n(&isc_kernel, k, __ATOMIC_RELAXED);
    return old;
}

void pdb_v4_iscore(const void *buf, const uint8_t *keys, int64_t w0, int64_t w1, float *out) {
    const iq_hdr *h = aligned((void *)buf);
    if (w1 <= w0) return;
    if (h->kr.fmt == PDB_V4_ROW_F32) {
        pdb_v4_index_scores(h->q, h->hw, h->nih, h->dim, (const float *)keys, w0, w1, h->sscale, out);
        return;
    }
    int k = __atomic_load_n(&isc_kernel, __ATOMIC_RELAXED);
    if (k < 0) k = pdb_v4_iscore_has_vnni() ? PDB_V4_ISCORE_VNNI : PDB_V4_ISCORE_F32; /* the default */
    if (!h->ok) __atomic_fetch_add(&n_f32, w1 - w0, __ATOMIC_RELAXED);
    if (!h->ok || k == PDB_V4_ISCORE_F32) { score_f32(h, keys, w0, w1, out); return; }
    __atomic_fetch_add(&n_int, w1 - w0, __ATOMIC_RELAXED); /* a tile the kernels hand to score_f32 moves back (tile_f32) */
#if (defined(__x86_64__) || defined(__i386__)) && ISC_X86
    if (k == PDB_V4_ISCORE_VNNI) { score_vnni(h, keys, w0, w1, out); return; }
#endif
    score_scalar(h, keys, w0, w1, out);
}
