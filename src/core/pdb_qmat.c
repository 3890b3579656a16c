/* pdb_qmat: row dequantization (exact) and the fixed-order dot product in scalar, AVX2+FMA and
 * AVX-512 forms, plus the threaded matmul that splits work over output rows. */
#include "pdb_qmat.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dtype.h"

/* ---- dequantization ------------------------------------------------------------------------ */

static float lut_e4m3[256];
static float lut_e2m1[16];
static int lut_ready;

static void lut_init(void) {
    if (__atomic_load_n(&lut_ready, __ATOMIC_ACQUIRE)) return;
    for (int i = 0; i < 256; i++) lut_e4m3[i] = pdb_e4m3_to_f32((uint8_t)i);
    for (int i = 0; i < 16; i++) lut_e2m1[i] = pdb_e2m1_to_f32((uint8_t)i);
    __atomic_store_n(&lut_ready, 1, __ATOMIC_RELEASE);
}

void pdb_qmat_row_f32(const pdb_qmat *w, int64_t r, float *out) {
    int64_t C = w->cols;
    switch (w->fmt) {
    case PDB_QF_F32:
        memcpy(out, (const float *)w->data + r * C, sizeof(float) * (size_t)C);
        break;
    case PDB_QF_BF16: {
        const uint8_t *p = (const uint8_t *)w->data + r * C * 2;
        for (int64_t c = 0; c < C; c++) {
            uint32_t u = (uint32_t)(p[2 * c] | (p[2 * c + 1] << 8)) << 16;
            memcpy(&out[c], &u, 4);
        }
        break;
    }
    case PDB_QF_MXFP8: {
        lut_init();
        const uint8_t *q = (const uint8_t *)w->data + r * C, *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            float sc = pdb_e8m0_to_f32(s[b]);
            for (int j = 0; j < 32; j++) out[b * 32 + j] = lut_e4m3[q[b * 32 + j]] * sc;
        }
        break;
    }
    case PDB_QF_MXFP4: {
        lut_init();
        const uint8_t *q = (const uint8_t *)w->data + r * (C / 2), *s = w->scales + r * (C / 32);
        for (int64_t b = 0; b < C / 32; b++) {
            float sc = pdb_e8m0_to_f32(s[b]);
            for (int j = 0; j < 16; j++) {
                uint8_t v = q[b * 16 + j];
                out[b * 32 + 2 * j] = lut_e2m1[v & 15] * sc;
                out[b * 32 + 2 * j + 1] = lut_e2m1[v >> 4] * sc;
            }
        }
        break;
    }
    }
}

/* ---- the fixed-order dot product ------------------------------------------------------------ */

static float fold32(float *l) { /* 32 lanes -> 1, lane i with lane i + half */
    for (int half = 16; half >= 1; half /= 2)
        for (int i = 0; i < half; i++) l[i] = l[i] + l[i + half];
    return l[0];
}

static float dot_scalar(const float *a, const float *b, int64_t n) {
    float l[32] = {0};
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
        for (int j = 0; j < 32; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 v0 = _mm256_setzero_ps(), v1 = v0, v2 = v0, v3 = v0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        v0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), v0);
        v1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), v1);
        v2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(b + k + 16), v2);
        v3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(b + k + 24), v3);
    }
    float l[32];
    _mm256_storeu_ps(l, v0);
    _mm256_storeu_ps(l + 8, v1);
    _mm256_storeu_ps(l + 16, v2);
    _mm256_storeu_ps(l + 24, v3);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 z0 = _mm512_setzero_ps(), z1 = z0;
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        z0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), z0);
        z1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), z1);
    }
    float l[32];
    _mm512_storeu_ps(l, z0);
    _mm512_storeu_ps(l + 16, z1);
    for (int j = 0; k + j < n; j++) l[j] = fmaf(a[k + j], b[k + j], l[j]);
    return fold32(l);
}

static pdb_qmat_isa isa_cur = (pdb_qmat_isa)-1;

pdb_qmat_isa pdb_qmat_isa_detect(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return PDB_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PDB_ISA_AVX2;
    return PDB_ISA_SCALAR;
}

const char *pdb_qmat_isa_name(pdb_qmat_isa isa) {
    return isa == PDB_ISA_AVX512 ? "avx512" : isa == PDB_ISA_AVX2 ? "avx2+fma" : "scalar";
}

static pdb_qmat_isa isa_get(void) {
    pdb_qmat_isa i = __atomic_load_n(&isa_cur, __ATOMIC_RELAXED);
    if ((int)i < 0) {
        i = pdb_qmat_isa_detect();
        __atomic_store_n(&isa_cur, i, __ATOMIC_RELAXED);
    }
    return i;
}

pdb_qmat_isa pdb_qmat_isa_set(pdb_qmat_isa isa) {
    pdb_qmat_isa old = isa_get();
    if (isa > pdb_qmat_isa_detect()) isa = pdb_qmat_isa_detect();
    __atomic_store_n(&isa_cur, isa, __ATOMIC_RELAXED);
    return old;
}

float pdb_qmat_dot(const float *a, const float *b, int64_t n) {
    switch (isa_get()) {
    case PDB_ISA_AVX512: return dot_avx512(a, b, n);
    case PDB_ISA_AVX2: return dot_avx2(a, b, n);
    default: return dot_scalar(a, b, n);
    }
}

void pdb_qmat_axpy(float *y, float a, const float *x, int64_t n) {
    for (int64_t c = 0; c < n; c++) y[c] = fmaf(a, x[c], y[c]);
}

/* ---- matmul: tasks are blocks of output rows ------------------------------------------------ */

enum { QM_ROWS_PER_TASK = 16 };

typedef struct {
    const pdb_qmat *w;
    const float *x;
    int64_t ldx, T, ldy;
    float *y;
    float *rowbuf; /* [threads, cols] */
} qm_ctx;

static void qm_task(void *vc, int64_t task, int thread) {
    qm_ctx *c = vc;
    int64_t C = c->w->cols, r0 = task * QM_ROWS_PER_TASK;
    int64_t r1 = r0 + QM_ROWS_PER_TASK < c->w->rows ? r0 + QM_ROWS_PER_TASK : c->w->rows;
    float *row = c->rowbuf + (int64_t)thread * C;
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = row;
        if (c->w->fmt == PDB_QF_F32) wr = (const float *)c->w->data + r * C;
        else pdb_qmat_row_f32(c->w, r, row);
        for (int64_t t = 0; t < c->T; t++) c->y[t * c->ldy + r] = pdb_qmat_dot(c->x + t * c->ldx, wr, C);
    }
}

void pdb_qmat_matmul(pdb_pool *pool, const pdb_qmat *w, const float *x, int64_t ldx, int64_t T, float *y,
                     int64_t ldy, float *rowbuf) {
    if (T <= 0 || w->rows <= 0) return;
    qm_ctx c = {w, x, ldx, T, ldy, y, rowbuf};
    int64_t tasks = (w->rows + QM_ROWS_PER_TASK - 1) / QM_ROWS_PER_TASK;
    if (pool) pdb_pool_run(pool, tasks, qm_task, &c);
    else
        for (int64_t i = 0; i < tasks; i++) qm_task(&c, i, 0);
}
