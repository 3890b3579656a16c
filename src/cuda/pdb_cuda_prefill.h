/* pdb_cuda_prefill: the CUDA prefill engine for DeepSeek-V2 and its capture hook, one sequence
 * at a time (create -> begin -> forward ... -> end -> free). The prefill component wraps it as
 * its "cuda" backend (src/prefill/pdb_prefill_cuda.c, pdb_prefill_backend_cuda_v2_create): the
 * functions here have the semantics of pdb_prefill_backend's of the same names, without that
 * interface's type, which is the prefill's (above this component).
 * Invariants: see pdb_cuda_prefill.cu and docs/cuda.md — engine GEMMs through cuBLAS with f32 accumulation, the engine's own paged
 * latent cache, and capture rows computed with the decoder's exactly-dequantized kv_a weights
 * in pdb_qmat_dot's order on the GPU plus the shared CPU row math (pdb_math_rmsnorm,
 * pdb_rope_apply) on the host. */
#ifndef PDB_CUDA_PREFILL_H
#define PDB_CUDA_PREFILL_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

#include "pdb_config.h"
#include "pdb_safetensors.h"
#include "pdb_status.h"

/* Engine precision: weights, GEMM operands and the engine's latent cache. */
typedef enum pdb_cuda_prec {
    PDB_CUDA_PREC_BF16 = 0, /* default: bf16 weights/operands/cache, f32 accumulation and activations */
    PDB_CUDA_PREC_F32 = 1,  /* validation: f32 everywhere (no TF32) */
    PDB_CUDA_PREC_EXACT = 2 /* the decoder's own math: f32 weights, every product in pdb_qmat_dot's
                               order (own kernels, no cuBLAS), the CPU's attention task order, so
                               the rows equal the CPU engine's (slow: for validation and for a
                               bridge that must be token-identical to native) */
} pdb_cuda_prec;

enum { PDB_CUDA_GEMM_ROWS_DEFAULT = 256 };

/* The bf16 engine's attention (docs/cuda.md; all chunk-invariant): AUTO = the MHA form on the
 * tensor cores (K and V expanded per head from the cached latent rows: the fewest FLOPs) where
 * v_head_dim fits, else ABSORBED_TC = the absorbed form on the tensor cores where
 * kv_lora_rank fits, else CUDA_CORES = the absorbed form in f32 on CUDA cores. The other two
 * force a form (for comparison). */
typedef enum pdb_cuda_attn {
    PDB_CUDA_ATTN_AUTO = 0,
    PDB_CUDA_ATTN_CUDA_CORES = 1,
    PDB_CUDA_ATTN_ABSORBED_TC = 2
} pdb_cuda_attn;

typedef struct pdb_cuda_prefill_opts {
    pdb_cuda_prec prec;
    int64_t sub_chunk; /* largest run of tokens per internal pass (scratch bound); 0 = 8192 */
    int64_t page_tokens; /* engine cache page size in tokens (power of two); 0 = 64 */
    int64_t gemm_rows;   /* GEMMs run as cuBLAS calls of exactly this many rows, so a row's result does
                            not depend on the chunking (chunked = one-shot); 0 = the default
                            (PDB_CUDA_GEMM_ROWS_DEFAULT), -1 = off (one call per product, fastest) */
    pdb_cuda_attn attn;  /* bf16 engine's attention kernel (the other precisions have their own) */
    int moe_cublas;      /* bf16 engine: routed experts as per-expert cuBLAS calls (as many rows as each expert
                            has) instead of the device layout's row tiles, for comparison */
    int moe_kernel;      /* bf16 engine: the device layout's tiles on the own grouped tensor-core GEMM
                            (pdb_cuda_moe_tc.cu) instead of cuBLAS row-tile products (pdb_cuda_moe_tiles, the
                            default), for comparison */
    int mha_kv_recompute; /* bf16 MHA form: expand every key's K and V again at each pass (what runs when
                             the GPU cannot keep every layer's), for comparison; same output bits */
    int profile;         /* time every stage of each forward pass with CUDA events
                            (pdb_cuda_prefill_profile_take) */
} pdb_cuda_prefill_opts;

typedef struct pdb_cuda_prefill pdb_cuda_prefill;

/* The engine of model cfg (DeepSeek-V2 only) from the engine's checkpoint, its hook from the
 * decoder's checkpoint, on device `device`; co NULL = the defaults, bf16. PDB_CUDA (with the
 * driver's message) when no usable GPU, PDB_UNSUPPORTED when built without CUDA. */
pdb_status pdb_cuda_prefill_create(const pdb_config *cfg, const pdb_st *engine, const pdb_st *decoder, int device,
                                   const pdb_cuda_prefill_opts *co, pdb_cuda_prefill **out);
/* pdb_prefill_backend's begin, forward_chunk, hook_chunk, get_block, end, destroy (the capture:
 * the block being assembled, host [L, block_size, row], the decoder's "latent" pool of one
 * block), and whether the engine runs the decoder's own math (precision exact). */
pdb_status pdb_cuda_prefill_begin(pdb_cuda_prefill *c, int64_t max_tokens, int64_t block_size);
pdb_status pdb_cuda_prefill_forward(pdb_cuda_prefill *c, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                                    float *logits_last);
pdb_status pdb_cuda_prefill_hook_chunk(pdb_cuda_prefill *c, const float *xn, int64_t pos0, int64_t n);
pdb_status pdb_cuda_prefill_get_block(pdb_cuda_prefill *c, int64_t b, void *buf);
int pdb_cuda_prefill_exact(const pdb_cuda_prefill *c);
/* With opts.profile: the device time of each stage summed over the forward passes since the
 * last take, as "stage=ms ..." into buf (then reset); "" without profiling. */
void pdb_cuda_prefill_profile_take(pdb_cuda_prefill *c, char *buf, size_t n);
void pdb_cuda_prefill_end(pdb_cuda_prefill *c);
void pdb_cuda_prefill_free(pdb_cuda_prefill *c);

#ifdef __cplusplus
}
#endif

#endif
