/* test_dtype: exhaustive round trips of every narrow-float bit pattern, rounding (ties to
 * even) and saturation against an independent nearest-value oracle, FP8 block dequant and
 * MXFP4/MXFP8 quantization. Invariant: the oracle shares no code with pdb_dtype.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pdb_dtype.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

/* ---- exhaustive round trips ---------------------------------------------------------------- */

static void test_bf16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pdb_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits(f), h << 16);
        if (isnan(f))
            assert_true(isnan(pdb_bf16_to_f32(pdb_f32_to_bf16(f))));
        else
            assert_int_equal(pdb_f32_to_bf16(f), h);
    }
}

static void test_f16_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pdb_f16_to_f32((uint16_t)h);
        /* value check independent of the bit tricks */
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            assert_true(m ? isnan(f) : isinf(f));
        } else {
            double want = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp((double)m, -24);
            if (h & 0x8000) want = -want;
            assert_true((double)f == want);
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
        }
        if (isnan(f))
            assert_true(isnan(pdb_f16_to_f32(pdb_f32_to_f16(f))));
        else
            assert_int_equal(pdb_f32_to_f16(f), h);
    }
}

static void test_e4m3_roundtrip_all(void **state) {
    (void)state;
    int nans = 0;
    for (uint32_t b = 0; b < 256; b++) {
        float f = pdb_e4m3_to_f32((uint8_t)b);
        uint32_t e = (b >> 3) & 15, m = b & 7;
        if (e == 15 && m == 7) {
            assert_true(isnan(f));
            nans++;
            assert_int_equal(pdb_f32_to_e4m3(f) & 0x7F, 0x7F);
            continue;
        }
        double want = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp((double)m, -9);
        if (b & 0x80) want = -want;
        assert_true((double)f == want);
        assert_int_equal(pdb_f32_to_e4m3(f), b);
    }
    assert_int_equal(nans, 2);
    assert_true(pdb_e4m3_to_f32(0x7E) == 448.0f);
    assert_true(pdb_e4m3_to_f32(0xFE) == -448.0f);
    assert_true(pdb_e4m3_to_f32(0x01) == 0x1p-9f);
}

static void test_e2m1_roundtrip_all(void **state) {
    (void)state;
    static const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (uint32_t b = 0; b < 16; b++) {
        float f = pdb_e2m1_to_f32((uint8_t)b);
        assert_true(fabsf(f) == want[b & 7]);
        assert_int_equal(signbit(f) != 0, (b & 8) != 0);
        assert_int_equal(pdb_f32_to_e2m1(f), b);
        assert_int_equal(bits(pdb_e2m1_to_f32((uint8_t)(b | 0xF0))), bits(f)); /* high bits ignored */
    }
}

static void test_e8m0_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 256; b++) {
        float f = pdb_e8m0_to_f32((uint8_t)b);
        if (b == 255) {
            assert_true(isnan(f));
            assert_int_equal(pdb_f32_to_e8m0(f), 255);
            continue;
        }
        assert_true((double)f == ldexp(1.0, (int)b - 127));
        assert_int_equal(pdb_f32_to_e8m0(f), b);
    }
}

/* ---- rounding against an oracle ------------------------------------------------------------ */

/* Sorted non-negative finite values of a format, with their codes; the oracle picks the
 * nearest (ties: even code); for formats with inf, a virtual next binade stands for inf. */
typedef struct grid {
    double v[70000];
    uint32_t code[70000];
    int n;
    int has_inf;
    uint32_t inf_code;
} grid;

static void grid_sort(grid *g) { /* codes ascend with value: only check it */
    for (int i = 1; i < g->n; i++) assert_true(g->v[i] > g->v[i - 1]);
}

static uint32_t oracle(const grid *g, float x, uint32_t sign_bit) {
    double a = fabs((double)x);
    uint32_t s = signbit(x) ? sign_bit : 0;
    if (isinf(a)) return s | (g->has_inf ? g->inf_code : g->code[g->n - 1]);
    int lo = 0, hi = g->n - 1;
    if (a >= g->v[hi]) {
        if (!g->has_inf) return s | g->code[hi];
        /* virtual next value: max + ulp(max) */
        double next = g->v[hi] + (g->v[hi] - g->v[hi - 1]);
        double mid = (g->v[hi] + next) / 2;
        return s | (a >= mid ? g->inf_code : g->code[hi]); /* tie -> inf (even code) */
    }
    while (hi - lo > 1) {
        int m = (lo + hi) / 2;
        if (g->v[m] <= a) lo = m; else hi = m;
    }
    double dl = a - g->v[lo], dh = g->v[hi] - a;
    if (dl < dh) return s | g->code[lo];
    if (dh < dl) return s | g->code[hi];
    return s | ((g->code[lo] & 1) ? g->code[hi] : g->code[lo]);
}

static float random_float_in(int emin, int emax) {
    uint32_t m = rng() & 0x7FFFFF;
    int e = emin + (int)(rng() % (uint32_t)(emax - emin + 1));
    float f = ldexpf(1.0f + (float)m / 8388608.0f, e);
    /* sometimes make it an exact midpoint-ish value: few mantissa bits */
    if (rng() % 4 == 0) f = ldexpf((float)(rng() % 64), e - 5);
    return (rng() & 1) ? -f : f;
}

static void check_format(grid *g, int emin, int emax, uint32_t sign_bit, uint32_t (*conv)(float), int iters) {
    for (int i = 0; i < iters; i++) {
        float x = random_float_in(emin, emax);
        uint32_t want = oracle(g, x, sign_bit), got = conv(x);
        if (want != got) fail_msg("x=%a (%.9g): want code 0x%x got 0x%x", x, x, want, got);
    }
}

static uint32_t conv_bf16(float f) { return pdb_f32_to_bf16(f); }
static uint32_t conv_f16(float f) { return pdb_f32_to_f16(f); }
static uint32_t conv_e4m3(float f) { return pdb_f32_to_e4m3(f); }
static uint32_t conv_e2m1(float f) { return pdb_f32_to_e2m1(f); }

static void test_rounding_vs_oracle(void **state) {
    (void)state;
    grid *g = calloc(1, sizeof *g);
    assert_non_null(g);
    /* bf16 */
    g->n = 0;
    for (uint32_t c = 0; c < 0x7F80; c++) {
        g->v[g->n] = (double)from_bits(c << 16);
        g->code[g->n++] = c;
    }
    g->has_inf = 1;
    g->inf_code = 0x7F80;
    grid_sort(g);
    check_format(g, -140, 127, 0x8000, conv_bf16, 300000);
    /* f16 */
    g->n = 0;
    for (uint32_t c = 0; c < 0x7C00; c++) {
        uint32_t e = c >> 10, m = c & 1023;
        g->v[g->n] = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp((double)m, -24);
        g->code[g->n++] = c;
    }
    g->inf_code = 0x7C00;
    grid_sort(g);
    check_format(g, -27, 17, 0x8000, conv_f16, 300000);
    /* e4m3: saturating, no inf */
    g->n = 0;
    for (uint32_t c = 0; c < 0x7F; c++) {
        uint32_t e = c >> 3, m = c & 7;
        g->v[g->n] = e ? ldexp(1.0 + m / 8.0, (int)e - 7) : ldexp((double)m, -9);
        g->code[g->n++] = c;
    }
    g->has_inf = 0;
    grid_sort(g);
    check_format(g, -12, 10, 0x80, conv_e4m3, 300000);
    /* e2m1 */
    static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    g->n = 0;
    for (uint32_t c = 0; c < 8; c++) {
        g->v[g->n] = e2m1[c];
        g->code[g->n++] = c;
    }
    grid_sort(g);
    check_format(g, -4, 4, 0x8, conv_e2m1, 200000);
    free(g);
}

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
static void test_f16_vs_compiler(void **state) {
    (void)state;
    for (int i = 0; i < 2000000; i++) {
        float x = from_bits(rng());
        if (isnan(x)) continue;
        _Float16 h = (_Float16)x;
        uint16_t hb;
        memcpy(&hb, &h, 2);
        if (pdb_f32_to_f16(x) != hb) fail_msg("x=%a: want 0x%04x got 0x%04x", x, hb, pdb_f32_to_f16(x));
    }
}
#endif

static void test_ties_and_saturation(void **state) {
    (void)state;
    /* bf16: 8 significant bits */
    assert_int_equal(pdb_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);         /* tie -> even (down) */
    assert_int_equal(pdb_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);     /* tie -> even (up) */
    assert_int_equal(pdb_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81); /* above the tie */
    assert_int_equal(pdb_f32_to_bf16(-1.0f - 0x1p-8f), 0xBF80);
    assert_int_equal(pdb_f32_to_bf16(3.4028235e38f), 0x7F80);          /* rounds to inf */
    assert_int_equal(pdb_f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(pdb_f32_to_bf16(-0.0f), 0x8000);
    assert_true(isnan(pdb_bf16_to_f32(pdb_f32_to_bf16(from_bits(0x7F800001))))); /* sNaN stays NaN */
    /* f16 */
    assert_int_equal(pdb_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    assert_int_equal(pdb_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    assert_int_equal(pdb_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(pdb_f32_to_f16(65519.0f), 0x7BFF);
    assert_int_equal(pdb_f32_to_f16(65520.0f), 0x7C00); /* tie at max + half ulp -> inf */
    assert_int_equal(pdb_f32_to_f16(-1e10f), 0xFC00);
    assert_int_equal(pdb_f32_to_f16(0x1p-25f), 0x0000);      /* half the smallest subnormal: tie -> 0 */
    assert_int_equal(pdb_f32_to_f16(3 * 0x1p-25f), 0x0002);  /* 1.5 ulp: tie -> even (2) */
    assert_int_equal(pdb_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(pdb_f32_to_f16(0x1.ff8p-15f), 0x03FF);  /* largest subnormal */
    assert_int_equal(pdb_f32_to_f16(0x1.ffcp-15f), 0x0400);  /* tie above it rounds into the first normal */
    assert_int_equal(pdb_f32_to_f16(from_bits(1)), 0x0000);
    assert_int_equal(pdb_f32_to_f16(NAN) & 0x7E00, 0x7E00);
    /* e4m3fn */
    assert_int_equal(pdb_f32_to_e4m3(1.0625f), 0x38); /* tie between 1 and 1.125 -> 1 */
    assert_int_equal(pdb_f32_to_e4m3(1.1875f), 0x3A); /* tie between 1.125 and 1.25 -> 1.25 */
    assert_int_equal(pdb_f32_to_e4m3(448.0f), 0x7E);
    assert_int_equal(pdb_f32_to_e4m3(464.0f), 0x7E);  /* would round to 480: saturates */
    assert_int_equal(pdb_f32_to_e4m3(1e30f), 0x7E);
    assert_int_equal(pdb_f32_to_e4m3(INFINITY), 0x7E);
    assert_int_equal(pdb_f32_to_e4m3(-INFINITY), 0xFE);
    assert_int_equal(pdb_f32_to_e4m3(-500.0f), 0xFE);
    assert_int_equal(pdb_f32_to_e4m3(NAN) & 0x7F, 0x7F);
    assert_int_equal(pdb_f32_to_e4m3(0x1p-10f), 0x00);      /* half of 2^-9: tie -> 0 */
    assert_int_equal(pdb_f32_to_e4m3(3 * 0x1p-10f), 0x02);  /* 1.5 * 2^-9: tie -> 2 */
    assert_int_equal(pdb_f32_to_e4m3(0x1.fp-7f), 0x08);     /* 7.75 * 2^-9 -> 8 * 2^-9 = 2^-6, first normal */
    assert_int_equal(pdb_f32_to_e4m3(-0.0f), 0x80);
    /* e2m1 */
    static const struct { float x; uint8_t want; } e2[] = {
        {0.25f, 0}, {0.26f, 1}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6},
        {5.01f, 7}, {7.0f, 7}, {100.0f, 7}, {INFINITY, 7}, {-5.0f, 0xE}, {-0.1f, 0x8}, {-100.0f, 0xF},
    };
    for (size_t i = 0; i < sizeof e2 / sizeof e2[0]; i++) {
        if (pdb_f32_to_e2m1(e2[i].x) != e2[i].want)
            fail_msg("e2m1(%g): want 0x%x got 0x%x", e2[i].x, e2[i].want, pdb_f32_to_e2m1(e2[i].x));
    }
    assert_int_equal(pdb_f32_to_e2m1(NAN), 0);
    /* e8m0: nearest power of two, 1.5 * 2^k is the tie, even code wins */
    assert_int_equal(pdb_f32_to_e8m0(1.0f), 127);
    assert_int_equal(pdb_f32_to_e8m0(1.4f), 127);
    assert_int_equal(pdb_f32_to_e8m0(1.5f), 128); /* 127 odd -> 128 */
    assert_int_equal(pdb_f32_to_e8m0(3.0f), 128); /* 128 even stays */
    assert_int_equal(pdb_f32_to_e8m0(1.6f), 128);
    assert_int_equal(pdb_f32_to_e8m0(0.0f), 0);
    assert_int_equal(pdb_f32_to_e8m0(1e-45f), 0);
    assert_int_equal(pdb_f32_to_e8m0(3e38f), 254);
    assert_int_equal(pdb_f32_to_e8m0(INFINITY), 254);
    assert_int_equal(pdb_f32_to_e8m0(NAN), 255);
}

/* ---- bulk conversions ------------------------------------------------------------------------ */

static void test_bulk_conversions(void **state) {
    (void)state;
    uint8_t raw[1 + 8 * 4];
    float out[4];
    /* unaligned sources */
    double d[4] = {1.5, -2.25, 1e300, 0.0};
    memcpy(raw + 1, d, sizeof d);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_F64, raw + 1, 4, out), PDB_OK);
    assert_true(out[0] == 1.5f && out[1] == -2.25f && isinf(out[2]) && out[3] == 0.0f);
    int64_t i64[3] = {-7, 1 << 20, 123456789012LL};
    memcpy(raw + 1, i64, sizeof i64);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_I64, raw + 1, 3, out), PDB_OK);
    assert_true(out[0] == -7.0f && out[1] == 1048576.0f && out[2] == 123456789012.0f);
    int32_t i32[2] = {-5, 100000};
    memcpy(raw + 1, i32, sizeof i32);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_I32, raw + 1, 2, out), PDB_OK);
    assert_true(out[0] == -5.0f && out[1] == 100000.0f);
    uint8_t bytes[3] = {0xFF, 0x80, 0x01};
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_I8, bytes, 3, out), PDB_OK);
    assert_true(out[0] == -1.0f && out[1] == -128.0f && out[2] == 1.0f);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_U8, bytes, 3, out), PDB_OK);
    assert_true(out[0] == 255.0f && out[1] == 128.0f && out[2] == 1.0f);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_F8_E8M0, bytes, 3, out), PDB_OK);
    assert_true(isnan(out[0]) && out[1] == 2.0f && out[2] == 0x1p-126f);

    float src[5] = {1.0f, -3.140625f, 65504.0f, 0.5f, 448.0f};
    static const pdb_dtype dts[] = {PDB_DT_F32, PDB_DT_BF16, PDB_DT_F16, PDB_DT_F8_E4M3};
    for (size_t k = 0; k < 4; k++) {
        uint8_t buf[1 + 5 * 4];
        float back[5];
        assert_int_equal(pdb_dtype_from_f32(dts[k], src, 5, buf + 1), PDB_OK);
        assert_int_equal(pdb_dtype_to_f32(dts[k], buf + 1, 5, back), PDB_OK);
        for (int i = 0; i < 5; i++) {
            float want = src[i];
            if (dts[k] == PDB_DT_BF16) want = pdb_bf16_to_f32(pdb_f32_to_bf16(src[i]));
            if (dts[k] == PDB_DT_F8_E4M3) want = pdb_e4m3_to_f32(pdb_f32_to_e4m3(src[i]));
            assert_true(back[i] == want);
        }
    }
    assert_int_equal(pdb_dtype_from_f32(PDB_DT_I32, src, 5, out), PDB_UNSUPPORTED);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_F32, src, -1, out), PDB_INVALID);
    assert_int_equal(pdb_dtype_to_f32(PDB_DT_F32, NULL, 0, NULL), PDB_OK);
}

static void test_names(void **state) {
    (void)state;
    for (int i = 0; i < PDB_DT_COUNT; i++) {
        pdb_dtype dt;
        assert_int_equal(pdb_dtype_parse(pdb_dtype_name((pdb_dtype)i), &dt), PDB_OK);
        assert_int_equal(dt, i);
        assert_true(pdb_dtype_size(dt) >= 1);
    }
    pdb_dtype dt;
    assert_int_equal(pdb_dtype_parse("F8_E5M2", &dt), PDB_UNSUPPORTED);
    assert_non_null(strstr(pdb_err_msg(), "F8_E5M2"));
    assert_int_equal(pdb_dtype_size(PDB_DT_BF16), 2);
    assert_int_equal(pdb_dtype_size(PDB_DT_I64), 8);
    assert_string_equal(pdb_dtype_name(PDB_DT_F8_E4M3), "F8_E4M3");
}

/* ---- block formats --------------------------------------------------------------------------- */

static void test_fp8_block_dequant(void **state) {
    (void)state;
    const int64_t R = 200, C = 300, SR = 2, SC = 3; /* neither a multiple of 128 */
    uint8_t *w = malloc((size_t)(R * C));
    float *out = malloc((size_t)(R * C) * sizeof *out);
    float scale[6] = {0.5f, 2.0f, 1.0f / 3.0f, -1.25f, 1e-3f, 7.0f};
    assert_non_null(w);
    assert_non_null(out);
    for (int64_t i = 0; i < R * C; i++) {
        w[i] = (uint8_t)rng();
        if ((w[i] & 0x7F) == 0x7F) w[i] = 0x42; /* no NaN */
    }
    pdb_dequant_fp8_block(w, scale, R, C, out);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            float want = pdb_e4m3_to_f32(w[r * C + c]) * scale[(r / 128) * SC + c / 128];
            assert_true(out[r * C + c] == want);
        }
    (void)SR;
    free(w);
    free(out);
}

/* e2m1 / e4m3 rounding error bound for |v| within range: half a spacing at v's binade. */
static double half_spacing(double v, int mbits, int emin) {
    int e;
    frexp(v, &e); /* v = m * 2^e, m in [0.5,1): binade exponent e-1 */
    int be = e - 1 < emin ? emin : e - 1;
    return ldexp(1.0, be - mbits - 1);
}

/* The largest |x| of a 32-block (no NaNs here). A comparison, not an fmax reduction: GCC 12's
 * aarch64 vectorizer crashes on that loop (internal compiler error in vect_transform_reduction). */
static double block_amax(const float *x) {
    double amax = 0;
    for (int i = 0; i < 32; i++) {
        double a = fabs(x[i]);
        if (a > amax) amax = a;
    }
    return amax;
}

static void test_mx_error_bounds(void **state) {
    (void)state;
    enum { N = 32 * 64 };
    float x[N], y[N];
    uint8_t packed[N / 2], q[N], sc4[N / 32], sc8[N / 32];
    for (int i = 0; i < N; i++) x[i] = random_float_in(-20, 20) * ((i / 32) % 3 == 0 ? 1.0f : 1e-3f);
    x[5] = 0.0f;
    pdb_quant_mxfp4_row(x, N, packed, sc4);
    pdb_dequant_mxfp4_row(packed, sc4, N, y);
    for (int b = 0; b < N / 32; b++) {
        double amax = block_amax(x + b * 32);
        int k;
        frexp(amax, &k);
        assert_int_equal(sc4[b], k - 1 - 2 + 127); /* floor(log2 amax) - 2 */
        double s = ldexp(1.0, sc4[b] - 127);
        for (int i = 0; i < 32; i++) {
            double v = fabs(x[b * 32 + i]) / s, err = fabs((double)y[b * 32 + i] - x[b * 32 + i]) / s;
            if (y[b * 32 + i] != 0) assert_int_equal(signbit(y[b * 32 + i]) != 0, signbit(x[b * 32 + i]) != 0);
            if (v <= 6.0) {
                if (err > half_spacing(v, 1, 0) * 1.0000001) fail_msg("mxfp4 b=%d i=%d v=%g err=%g", b, i, v, err);
            } else {
                assert_true(fabs(y[b * 32 + i]) == 6.0 * s); /* saturated */
            }
        }
    }
    pdb_quant_mxfp8_row(x, N, q, sc8);
    pdb_dequant_mxfp8_row(q, sc8, N, y);
    for (int b = 0; b < N / 32; b++) {
        double amax = block_amax(x + b * 32);
        int k;
        frexp(amax, &k);
        assert_int_equal(sc8[b], k - 1 - 8 + 127); /* floor(log2 amax) - 8 */
        double s = ldexp(1.0, sc8[b] - 127);
        for (int i = 0; i < 32; i++) {
            double v = fabs(x[b * 32 + i]) / s, err = fabs((double)y[b * 32 + i] - x[b * 32 + i]) / s;
            if (v <= 448.0) {
                if (err > half_spacing(v, 3, -6) * 1.0000001) fail_msg("mxfp8 b=%d i=%d v=%g err=%g", b, i, v, err);
            } else {
                assert_true(fabs(y[b * 32 + i]) == 448.0 * s);
            }
        }
    }
}

static void test_mx_grid_exact(void **state) {
    (void)state;
    enum { N = 32 * 40 };
    float x[N], y[N];
    uint8_t packed[N / 2], q[N], sc[N / 32];
    static const float g4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int b = 0; b < N / 32; b++) {
        int s = (int)(rng() % 200) - 120; /* block scale exponent, e8m0-representable */
        for (int i = 0; i < 32; i++) {
            float v = ldexpf(g4[rng() % 8], s);
            x[b * 32 + i] = (rng() & 1) ? -v : v;
        }
        x[b * 32 + (int)(rng() % 32)] = ldexpf((rng() & 1) ? 4.0f : -6.0f, s); /* pins the scale to 2^s */
    }
    pdb_quant_mxfp4_row(x, N, packed, sc);
    pdb_dequant_mxfp4_row(packed, sc, N, y);
    for (int i = 0; i < N; i++)
        if (x[i] != y[i]) fail_msg("mxfp4 i=%d x=%a y=%a", i, x[i], y[i]);
    for (int b = 0; b < N / 32; b++) {
        int s = (int)(rng() % 200) - 110;
        for (int i = 0; i < 32; i++) {
            uint8_t c = (uint8_t)(rng() % 0x7F);
            if (s - 9 < -126 && (c >> 3) == 0) c |= 0x08; /* keep results out of f32 subnormals */
            x[b * 32 + i] = ldexpf(pdb_e4m3_to_f32(c), s) * ((rng() & 1) ? -1.0f : 1.0f);
        }
        x[b * 32 + (int)(rng() % 32)] = ldexpf(256.0f + 32.0f * (float)(rng() % 7), s);
    }
    pdb_quant_mxfp8_row(x, N, q, sc);
    pdb_dequant_mxfp8_row(q, sc, N, y);
    for (int i = 0; i < N; i++)
        if (x[i] != y[i]) fail_msg("mxfp8 i=%d x=%a y=%a", i, x[i], y[i]);
}

static void test_mx_special_blocks(void **state) {
    (void)state;
    float x[64] = {0}, y[64];
    uint8_t packed[32], q[64], sc[2];
    x[32] = 1.0f; /* block 0: all zero; block 1: amax 1 */
    pdb_quant_mxfp4_row(x, 64, packed, sc);
    assert_int_equal(sc[0], 0);
    assert_int_equal(sc[1], 125);
    pdb_dequant_mxfp4_row(packed, sc, 64, y);
    for (int i = 0; i < 64; i++) assert_true(y[i] == x[i]);
    pdb_quant_mxfp8_row(x, 64, q, sc);
    assert_int_equal(sc[0], 0);
    assert_int_equal(sc[1], 119);
    pdb_dequant_mxfp8_row(q, sc, 64, y);
    for (int i = 0; i < 64; i++) assert_true(y[i] == x[i]);
    /* tiny amax clamps to the lowest scale; values then quantize on that scale */
    for (int i = 0; i < 32; i++) x[i] = 0x1p-140f;
    pdb_quant_mxfp8_row(x, 64, q, sc);
    assert_int_equal(sc[0], 0);
    /* NaN / inf poison a block's scale */
    x[3] = NAN;
    x[40] = INFINITY;
    pdb_quant_mxfp4_row(x, 64, packed, sc);
    assert_int_equal(sc[0], 0xFF);
    assert_int_equal(sc[1], 0xFF);
    pdb_dequant_mxfp4_row(packed, sc, 64, y);
    assert_true(isnan(y[0]) && isnan(y[63]));
    /* packing: element 2i low nibble, 2i+1 high nibble */
    float z[32] = {0};
    z[0] = 1.0f;
    z[1] = -6.0f;
    z[2] = 0.5f;
    pdb_quant_mxfp4_row(z, 32, packed, sc);
    assert_int_equal(sc[0], 127);
    assert_int_equal(packed[0], 0xF2);
    assert_int_equal(packed[1], 0x01);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_roundtrip_all),
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_e4m3_roundtrip_all),
        cmocka_unit_test(test_e2m1_roundtrip_all),
        cmocka_unit_test(test_e8m0_roundtrip_all),
        cmocka_unit_test(test_rounding_vs_oracle),
#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
        cmocka_unit_test(test_f16_vs_compiler),
#endif
        cmocka_unit_test(test_ties_and_saturation),
        cmocka_unit_test(test_bulk_conversions),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_fp8_block_dequant),
        cmocka_unit_test(test_mx_error_bounds),
        cmocka_unit_test(test_mx_grid_exact),
        cmocka_unit_test(test_mx_special_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
