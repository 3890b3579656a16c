/* pdb_qmat_neon: the aarch64 NEON forms of pdb_qmat's fixed-order kernels, called only by
 * pdb_qmat.c's dispatch when the ISA is PDB_ISA_NEON (compiled to nothing on other CPUs).
 * Invariant: every function gives, bit for bit, what pdb_qmat.c's scalar reference gives (and
 * so what its AVX2 and AVX-512 forms give): the same exact dequantization, and every dot in the
 * 32-lane order of pdb_qmat.h (lane j takes k = j mod 32, fused multiply-adds in k order, then
 * the 32->16->8->4->2->1 fold, lane i with lane i + half). A 32-lane accumulator is eight
 * float32x4_t registers (register r = lanes 4r..4r+3), vfmaq_f32 is one fused multiply-add per
 * lane (one rounding), as _mm512_fmadd_ps and fmaf are. */
#ifndef PDB_QMAT_NEON_H
#define PDB_QMAT_NEON_H

#include <stdint.h>

#include "pdb_qmat.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__aarch64__)
#define PDB_QMAT_HAVE_NEON 1

/* pdb_qmat_dot's order for n floats (any n: a tail under 32 goes lane by lane, as dot_scalar's). */
float pdb_qmat_neon_dot(const float *a, const float *b, int64_t n);
/* Exact dequantization of row r of a BF16, MXFP8 or MXFP4 matrix into out [cols] (MX: cols a
 * multiple of 32); returns 0 for F32 (the caller copies). */
int pdb_qmat_neon_row(const pdb_qmat *w, int64_t r, float *out);
/* The decode kernel: rows [r0, r1) of a BF16 / MXFP8 / MXFP4 matrix (cols a multiple of 32)
 * against T <= 2 tokens, each 32-block dequantized in registers:
 * y[t * ldy + r] = pdb_qmat_dot(x + t * ldx, dequantized row r, cols) bit for bit. */
void pdb_qmat_neon_rows(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, int64_t T, float *y,
                        int64_t ldy);
/* y[c] = fmaf(a, x[c], y[c]) for c < n. */
void pdb_qmat_neon_axpy(float *y, float a, const float *x, int64_t n);
#endif

#ifdef __cplusplus
}
#endif

#endif
