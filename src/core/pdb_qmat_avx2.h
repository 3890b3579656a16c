/* pdb_qmat_avx2: the AVX2+FMA forms of pdb_qmat's decode kernel and row dequantization, for x86-64
 * CPUs without AVX-512 (called only by pdb_qmat.c's dispatch when the ISA is PDB_ISA_AVX2;
 * compiled to nothing on other CPUs). Before D37 such CPUs dequantized every row to a buffer with
 * the scalar loop and then dotted it.
 * Invariant: every function gives, bit for bit, what pdb_qmat.c's scalar reference gives (and so
 * what its AVX-512 and the NEON forms give): the same exact dequantization (each value one IEEE
 * multiply of the exact code value by the e8m0 block scale, or a provably identical single
 * rounding), and every dot in the 32-lane order of pdb_qmat.h (lane j takes k = j mod 32, fused
 * multiply-adds in k order, then the 32->16->8->4->2->1 fold, lane i with lane i + half, the
 * lower lane the first operand). A 32-lane accumulator is four __m256 (register r = lanes
 * 8r..8r+7). */
#ifndef PDB_QMAT_AVX2_H
#define PDB_QMAT_AVX2_H

#include <stdint.h>

#include "pdb_qmat.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__x86_64__)
#define PDB_QMAT_HAVE_AVX2 1

/* Exact dequantization of row r of a BF16, MXFP8 or MXFP4 matrix into out [cols] (MX: cols a
 * multiple of 32, as the formats require); returns 0 for F32 (the caller copies). */
int pdb_qmat_avx2_row(const pdb_qmat *w, int64_t r, float *out);
/* The decode kernel: rows [r0, r1) of a BF16 / MXFP8 / MXFP4 matrix (cols a multiple of 32)
 * against T <= 2 tokens, each 32-block dequantized in registers (two rows at a time for one
 * token, one row for two): y[t * ldy + r] = pdb_qmat_dot(x + t * ldx, dequantized row r, cols)
 * bit for bit. */
void pdb_qmat_avx2_rows(const pdb_qmat *w, int64_t r0, int64_t r1, const float *x, int64_t ldx, int64_t T, float *y,
                        int64_t ldy);
#endif

#ifdef __cplusplus
}
#endif

#endif
