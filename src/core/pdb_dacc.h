/* pdb_dacc: products of f32 data accumulated in double, each output one sequential sum (0 + the
 * first term + the second ...; every term a product of two floats, hence exact in double, so a
 * fused multiply-add gives the same sum), vectorized across independent outputs only: every
 * output is bit for bit the scalar loop `double s = 0; for k: s += (double)a[k] * b[k]; (float)s`
 * on every ISA (AVX-512 where the CPU has it, else that loop). The V4 attention's scores and
 * weighted sums and the indexer's scores over a chunk of T queries run here (pdb_v4.h states the
 * order they must keep). Inputs are double copies of f32 values (the caller converts once). */
#ifndef PDB_DACC_H
#define PDB_DACC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[n * ldn + m * ldm] = (float)(sum_{k=0..K-1} at[k * ldat + m] * b[n][k]) for m < M, n < N:
 * a given transposed (k-major: the M values of one k side by side), b as N row pointers. */
void pdb_dacc_dots(const double *at, int64_t ldat, int64_t M, const double *const *b, int64_t N, int64_t K, float *out,
                   int64_t ldm, int64_t ldn);
/* out[m * ldo + e] = (float)(sum_{i=0..N-1} p[m * ldp + i] * x[i][e]) for m < M, e < E (i in order). */
void pdb_dacc_mix(const double *p, int64_t ldp, int64_t M, const double *const *x, int64_t N, int64_t E, float *out,
                  int64_t ldo);
/* Use the vector kernels where the CPU has them (default) or the scalar loops (tests compare the
 * two: same bits); returns the previous setting. */
int pdb_dacc_use_simd(int on);

#ifdef __cplusplus
}
#endif

#endif
