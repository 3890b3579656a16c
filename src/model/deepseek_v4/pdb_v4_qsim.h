/* pdb_v4_qsim: DeepSeek-V4's inference-time quantization simulations (the `official`
 * semantics), the one implementation every CPU component shares (reference forward, decoder,
 * capture hook). Invariants: each function is a pure, in-place map of f32 values, applied per
 * block in index order, so its result depends only on the block's inputs; scales are exact
 * powers of two, so dividing by a scale is exact and the only rounding is the element cast.
 *  - FP8: blocks of 64; s = 2^ceil(log2(max(amax, 1e-4) / 448)) with the division in f32;
 *    x -> e4m3(clamp(x / s, +-448)) * s, e4m3 round to nearest even.
 *  - FP4: blocks of 32; s = 2^ceil(log2(max(amax, 6 * 2^-126) / 6)); x -> e2m1(clamp(x / s, +-6)) * s,
 *    e2m1 round to nearest even (ties 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
 *  - Hadamard: Sylvester-ordered Walsh-Hadamard butterflies (h = 1, 2, 4, ...; x[i] = a + b,
 *    x[i+h] = a - b), then a multiply by f32(n^-0.5). Orthogonal, so q.k is preserved exactly in
 *    real arithmetic; only the FP4 rounding after it changes scores.
 * ceil(log2(r)) is computed exactly from the binary exponent (frexpf), not with a log. */
#ifndef PDB_V4_QSIM_H
#define PDB_V4_QSIM_H

#include <stdint.h>

/* 2^ceil(log2(r)) for finite r > 0. */
float pdb_v4_qsim_pow2_ceil(float r);
/* FP8 e4m3 round-trip of x[n] in blocks of 64 (n % 64 == 0). */
void pdb_v4_qsim_fp8(float *x, int64_t n);
/* FP4 e2m1 round-trip of x[n] in blocks of 32 (n % 32 == 0). */
void pdb_v4_qsim_fp4(float *x, int64_t n);
/* Normalised Walsh-Hadamard transform of x[n] in place (n a power of two). */
void pdb_v4_qsim_hadamard(float *x, int64_t n);

#endif
