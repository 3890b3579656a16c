/* pdb_prefill_backend: the prefill engine's compute backends behind one interface (a struct of
 * function pointers per backend, as ggml does): CPU (src/prefill/pdb_prefill_cpu.c, the shared
 * deterministic kernels) and CUDA (src/cuda/, cuBLAS + own kernels). A backend owns the engine's
 * weights (the HF checkpoint) and its own cache for one sequence at a time, and runs the capture
 * hook: at every layer, from that layer's attention input (RMSNorm(h) with the engine's norm),
 * it computes the decoder's cache rows with the DECODER's weights (kv_a_proj_with_mqa and
 * kv_a_layernorm of DEC_DIR) and the shared row math (pdb_v2_ops_latent_rows semantics).
 * Two capture forms: row hooks (DeepSeek-V2: one APPEND pool, no state) write capture rows for
 * layer l, chunk row i at capture[(l * n + i) * row]; block hooks (get_block set, DeepSeek-V4:
 * pools with end-of-block state) keep the decoder's pools for the sequence themselves and copy a
 * finished block out with get_block right after the chunk that ends it (the engine never runs a
 * chunk across a block boundary for them).
 * Invariants: forward_chunk appends n positions at pos0 (pos0 == tokens already run); results of
 * a position never depend on how the prompt was chunked (CPU: bit for bit; CUDA: its own fixed
 * kernels). */
#ifndef PDB_PREFILL_BACKEND_H
#define PDB_PREFILL_BACKEND_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_safetensors.h"
#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_prefill_backend pdb_prefill_backend;

struct pdb_prefill_backend {
    const char *name;          /* "cpu", "cuda" */
    void *impl;
    /* Start a sequence of at most max_tokens positions (allocates the engine's cache). */
    pdb_status (*begin)(pdb_prefill_backend *be, int64_t max_tokens);
    /* Run ids[0..n) at positions pos0..pos0+n-1. Row hooks: capture is [num_layers, n,
     * kv_lora_rank + qk_rope_head_dim] f32 host memory filled by the hook, or NULL (no capture);
     * block hooks: capture is only a flag (non-NULL: run the hook). logits_last: [vocab] of the
     * chunk's last token, or NULL. */
    pdb_status (*forward_chunk)(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, float *capture,
                                float *logits_last);
    /* Capture hook math alone (pool-validate): rows [n, row] of layer l from attention inputs
     * xn [n, hidden] at positions pos[n]. */
    pdb_status (*capture_rows)(pdb_prefill_backend *be, int64_t l, const float *xn, const int64_t *pos, int64_t n,
                               float *rows);
    /* Block hooks only (NULL for row hooks): block b's bytes in the decoder's store layout (pools
     * back to back, pdb_dec_block_pools) into buf; valid right after the chunk ending at
     * (b+1)*block_size, when every chunk since position 0 ran with the hook. */
    pdb_status (*get_block)(pdb_prefill_backend *be, int64_t b, int64_t block_size, void *buf);
    void (*end)(pdb_prefill_backend *be);      /* release the sequence's cache */
    void (*destroy)(pdb_prefill_backend *be);  /* frees be too */
};

typedef struct pdb_prefill_backend_opts {
    const pdb_config *cfg;       /* engine model config (== decoder config: checked by the caller) */
    const pdb_st *engine;        /* HF checkpoint tensors (the engine's own weights) */
    const pdb_st *decoder;       /* decoder checkpoint tensors (the hook's weights) */
    int threads;                 /* CPU: 0 = all cores */
    int v4_sem;                  /* DeepSeek-V4: the decoder's pdb_v4_semantics (engine and hook use it) */
    int device;                  /* CUDA device index */
    int precision;               /* CUDA DeepSeek-V2 engine: 0 bf16 (default), 1 f32, 2 exact (pdb_cuda_prec) */
} pdb_prefill_backend_opts;

/* By name: "cpu", "cuda" (no fallback) or "auto" (CUDA when usable, else the CPU), for the
 * architecture of o->cfg. */
pdb_status pdb_prefill_backend_create(const pdb_prefill_backend_opts *o, const char *want, pdb_prefill_backend **out);
/* Dispatches on cfg->arch: DeepSeek-V2 (row hook) or DeepSeek-V4 (block hook, pdb_prefill_cpu_v4.c). */
pdb_status pdb_prefill_backend_cpu_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
pdb_status pdb_prefill_backend_cpu_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
/* PDB_UNSUPPORTED when built without CUDA; PDB_CUDA (with the driver's message) when no usable GPU. */
pdb_status pdb_prefill_backend_cuda_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
/* DeepSeek-V4 on a GPU: the V4 engine and hook of pdb_prefill_cpu_v4.c with every matrix product
 * on device o->device (pdb_cuda_v4, the reference order: blocks bit-identical to the CPU
 * backend's); the rest of the layer math (hyper-connections, norms, window/compressed attention,
 * indexer top-k) stays on the host's threads. Same errors as pdb_prefill_backend_cuda_create. */
pdb_status pdb_prefill_backend_cuda_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);

#ifdef __cplusplus
}
#endif

#endif
