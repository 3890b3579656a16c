/* pdb_cuda_prefill: the CUDA prefill backend for DeepSeek-V2 (pdb_prefill_backend_cuda_create
 * and a variant with an explicit engine precision). Invariants: see pdb_cuda_prefill.cu and
 * docs/cuda.md — engine GEMMs through cuBLAS with f32 accumulation, the engine's own paged
 * latent cache, and capture rows computed with the decoder's exactly-dequantized kv_a weights
 * in pdb_qmat_dot's order on the GPU plus the shared CPU row math (pdb_math_rmsnorm,
 * pdb_rope_apply) on the host. pdb_prefill_backend_cuda_v2_create is this with default options. */
#ifndef PDB_CUDA_PREFILL_H
#define PDB_CUDA_PREFILL_H

#ifdef __cplusplus
extern "C" {
#endif

#include "pdb_prefill_backend.h"

/* The engine precision is pdb_cuda_prec (pdb_prefill_backend.h). */
enum { PDB_CUDA_GEMM_ROWS_DEFAULT = 256 };

typedef struct pdb_cuda_prefill_opts {
    pdb_cuda_prec prec;
    int64_t sub_chunk; /* largest run of tokens per internal pass (scratch bound); 0 = 8192 */
    int64_t page_tokens; /* engine cache page size in tokens (power of two); 0 = 64 */
    int64_t gemm_rows;   /* GEMMs run as cuBLAS calls of exactly this many rows, so a row's result does
                            not depend on the chunking (chunked = one-shot); 0 = the default
                            (PDB_CUDA_GEMM_ROWS_DEFAULT), -1 = off (one call per product, fastest) */
} pdb_cuda_prefill_opts;

pdb_status pdb_cuda_prefill_create(const pdb_prefill_backend_opts *o, const pdb_cuda_prefill_opts *co,
                                   pdb_prefill_backend **out);

#ifdef __cplusplus
}
#endif

#endif
