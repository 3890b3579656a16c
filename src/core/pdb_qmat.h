/* pdb_qmat: the decoder's weight matrices (f32, bf16, MXFP8, MXFP4; row-major [rows, cols],
 * PyTorch Linear layout) and their deterministic products.
 * Invariant (the exactness contract of issue 6): every output element y[t][o] is computed by
 * one dot product of x[t] with the exactly-dequantized row o, in a fixed order: 32 lanes
 * (lane j takes k = j mod 32) accumulated with fused multiply-adds in k order, then folded
 * 32->16->8->4->2->1 (lane i with lane i + half). The scalar, AVX2, AVX-512 and aarch64 NEON
 * paths implement this same order, so results are bit-identical across ISAs (x86-64 and aarch64
 * included), thread counts, batch sizes and chunkings; the scalar path is the reference on any
 * other CPU. For T <= 2 tokens (decode) the AVX-512, AVX2 (pdb_qmat_avx2.c) and NEON paths
 * dequantize each 32-block in registers and dot it at once (the decode kernels; pdb_qmat_isa_set
 * forces each ISA, so tests compare every path with the scalar one). For T >= 3 tokens the AVX-512
 * path applies blocks of dequantized rows to tiles of
 * tokens (the multi-row form: each element still this one dot in this order, so the same bits as
 * row by row). pdb_qmat_matmul_multi runs several matrices in one pool dispatch under the same
 * contract (each element as a lone pdb_qmat_matmul computes it), pdb_qmat_matmul_gangs also a
 * step per output row after them. */
#ifndef PDB_QMAT_H
#define PDB_QMAT_H

#include <stdint.h>

#include "pdb_pool.h"
#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pdb_qfmt { PDB_QF_F32 = 0, PDB_QF_BF16, PDB_QF_MXFP8, PDB_QF_MXFP4 } pdb_qfmt;

typedef struct pdb_qmat {
    pdb_qfmt fmt;
    int64_t rows, cols;
    const void *data;       /* F32 [rows*cols] | BF16 u16 | MXFP8 e4m3 [rows*cols] | MXFP4 [rows*cols/2] */
    const uint8_t *scales;  /* MX formats: e8m0 [rows * cols/32] */
    int nan_free;           /* MXFP8: no e4m3 NaN code (0x7F/0xFF) anywhere (pdb_qmat_scan_nan); 0 = unknown */
} pdb_qmat;

/* The kernels' instruction sets. Within the x86 family a larger value is a wider ISA; NEON is the
 * aarch64 one (every aarch64 CPU has it). */
typedef enum pdb_qmat_isa { PDB_ISA_SCALAR = 0, PDB_ISA_AVX2, PDB_ISA_AVX512, PDB_ISA_NEON } pdb_qmat_isa;
/* Best ISA this CPU supports (AVX2 needs FMA too). */
pdb_qmat_isa pdb_qmat_isa_detect(void);
/* Whether this build on this CPU can run isa (scalar: always). */
int pdb_qmat_isa_supported(pdb_qmat_isa isa);
const char *pdb_qmat_isa_name(pdb_qmat_isa isa);
/* Force an ISA (tests compare them); returns the previous one. An ISA the CPU lacks gives AVX2
 * for AVX-512 where AVX2 exists, else scalar. */
pdb_qmat_isa pdb_qmat_isa_set(pdb_qmat_isa isa);

/* Use the AVX512BW form of the MXFP8 decode kernel when the CPU has it (default) or not (tests
 * compare the two: same results); returns the previous setting. */
int pdb_qmat_use_bw(int on);

/* Floats of matmul scratch for a pool of `threads` and matrices up to `cols` wide. */
#define PDB_QMAT_ROWBUF_FLOATS(threads, cols) ((int64_t)(threads) * (int64_t)(cols) * 4)

/* Sets w->nan_free for MXFP8 weights (our quantizer never writes NaN codes): the decode kernel
 * then skips the NaN fix-up. Results are the same either way; this only saves work. */
void pdb_qmat_scan_nan(pdb_qmat *w);

/* Rows [r0, r0 + n) of q as a matrix of their own (its data and scales in place). */
pdb_qmat pdb_qmat_view_rows(const pdb_qmat *q, int64_t r0, int64_t n);
/* Exact dequantization of row r into out [cols]. */
void pdb_qmat_row_f32(const pdb_qmat *w, int64_t r, float *out);
/* Deterministic dot product of n floats (the order above). */
float pdb_qmat_dot(const float *a, const float *b, int64_t n);
/* out[k] = pdb_qmat_dot(x, w + k * ldw, n) for k < m, bit for bit, four rows at a time on AVX-512
 * (independent chains: faster than m separate calls). */
void pdb_qmat_dots(const float *x, const float *w, int64_t n, int64_t ldw, int64_t m, float *out);
/* out[i * ldo + k] = pdb_qmat_dot(x + i * ldx, w + k * ldw, n) for i < nx, k < m, bit for bit; on
 * AVX-512 with n a multiple of 32, two rows against four x at a time (each row loaded once per four
 * x: MLA decode scores of every head against a block of latent rows). */
void pdb_qmat_dots_xs(const float *x, int64_t ldx, int64_t nx, const float *w, int64_t ldw, int64_t m, int64_t n, float *out,
                      int64_t ldo);
/* y[t*ldy + o] = dot(x[t*ldx ...], row o) for t < T, o < rows. pool may be NULL (one thread).
 * rowbuf: scratch of PDB_QMAT_ROWBUF_FLOATS(pdb_pool_threads(pool), cols) floats (the caller owns it). */
void pdb_qmat_matmul(pdb_pool *pool, const pdb_qmat *w, const float *x, int64_t ldx, int64_t T, float *y,
                     int64_t ldy, float *rowbuf);
/* One product of a batch: y[t*ldy + o] = dot(x[t*ldx ...], row o of w) for t < n, o < w->rows. */
typedef struct pdb_qmat_job {
    const pdb_qmat *w;
    const float *x;  /* [n, ldx]: n rows of w->cols inputs */
    int64_t ldx, n;  /* n <= 0: the job is skipped */
    float *y;        /* [n, ldy] */
    int64_t ldy;
} pdb_qmat_job;
/* Every job of jobs[0 .. n_jobs) in ONE pool run (one dispatch, one barrier) instead of one per
 * matrix: threads claim output rows across all the jobs. Each y element is computed exactly as
 * pdb_qmat_matmul(pool, w, x, ldx, n, y, ldy) computes it (the same kernel for the job's format
 * and n, the same dot order), so the results are bit-identical to calling pdb_qmat_matmul per job,
 * whatever the jobs, their order, the thread count or the split. Jobs may share an x (read
 * only); no job's y may overlap any job's x or another job's y. rowbuf: scratch of
 * PDB_QMAT_ROWBUF_FLOATS(pdb_pool_threads(pool), widest cols of any job) floats. pool may be NULL. */
void pdb_qmat_matmul_multi(pdb_pool *pool, const pdb_qmat_job *jobs, int n_jobs, float *rowbuf);
/* pdb_qmat_matmul_multi in gangs: jobs [g * gang, (g + 1) * gang) have the same w->rows and are
 * claimed together: a claim of rows [r0, r1) computes those rows of every member (members with
 * n <= 0 skipped; a gang whose members all are is skipped), then the same thread calls
 * post(first member, r0, r1). An elementwise step over the rows just computed (SiLU of gate and
 * up) so runs inside the dispatch instead of in a pool run of its own. Every y element is what
 * pdb_qmat_matmul_multi computes; post sees each row of each gang exactly once. */
typedef void (*pdb_qmat_post_fn)(const pdb_qmat_job *gang, int64_t r0, int64_t r1);
void pdb_qmat_matmul_gangs(pdb_pool *pool, const pdb_qmat_job *jobs, int n_jobs, int gang, pdb_qmat_post_fn post,
                           float *rowbuf);
/* y[c] += a * x[c] for c < n with one fused multiply-add per element (same on every ISA). */
void pdb_qmat_axpy(float *y, float a, const float *x, int64_t n);
/* Weighted row sums: out[i * ldo + c] for i < m, c < k is, for every i, what zeroing it and then
 * pdb_qmat_axpy(out_i, p[i * ldp + j], x + j * ldx, k) for j = 0 .. n-1 in order gives, bit for
 * bit (one chain of fused multiply-adds per element, rows in order). Columns go in registers of
 * 32 (then 16) and eight outputs at a time on AVX-512, so each x row is read once per eight
 * outputs and each weight once per 32 columns (MLA attention's o_lat of all heads in one pass
 * over the latent rows). */
void pdb_qmat_mix(float *out, int64_t ldo, const float *p, int64_t ldp, int64_t m, const float *x, int64_t ldx, int64_t n,
                  int64_t k);

#ifdef __cplusplus
}
#endif

#endif
