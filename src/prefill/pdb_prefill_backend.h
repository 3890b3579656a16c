/* pdb_prefill_backend: the prefill engine's compute backends behind one interface (a struct of
 * function pointers per backend, as ggml does): CPU (src/prefill/pdb_prefill_cpu.c, the shared
 * deterministic kernels) and CUDA (src/cuda/, cuBLAS + own kernels). A backend owns the engine's
 * weights (the HF checkpoint) and its own cache for one sequence at a time, and runs the capture
 * hook: at every layer, from that layer's attention input (RMSNorm(h) with the engine's norm),
 * it computes the decoder's cache rows with the DECODER's weights (kv_a_proj_with_mqa and
 * kv_a_layernorm of DEC_DIR) and the shared row math (pdb_v2_ops_latent_rows semantics).
 * Invariants: forward_chunk appends n positions at pos0 (pos0 == tokens already run); capture
 * rows for layer l, chunk row i land at capture[(l * n + i) * row]; results of a position never
 * depend on how the prompt was chunked (CPU: bit for bit; CUDA: its own fixed kernels). */
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
    /* Run ids[0..n) at positions pos0..pos0+n-1. capture: [num_layers, n, kv_lora_rank +
     * qk_rope_head_dim] f32 host memory, filled by the hook; logits_last: [vocab] of the chunk's
     * last token, or NULL. */
    pdb_status (*forward_chunk)(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, float *capture,
                                float *logits_last);
    /* Capture hook math alone (pool-validate): rows [n, row] of layer l from attention inputs
     * xn [n, hidden] at positions pos[n]. */
    pdb_status (*capture_rows)(pdb_prefill_backend *be, int64_t l, const float *xn, const int64_t *pos, int64_t n,
                               float *rows);
    void (*end)(pdb_prefill_backend *be);      /* release the sequence's cache */
    void (*destroy)(pdb_prefill_backend *be);  /* frees be too */
};

typedef struct pdb_prefill_backend_opts {
    const pdb_config *cfg;       /* engine model config (== decoder config: checked by the caller) */
    const pdb_st *engine;        /* HF checkpoint tensors (the engine's own weights) */
    const pdb_st *decoder;       /* decoder checkpoint tensors (the hook's weights) */
    int threads;                 /* CPU: 0 = all cores */
    int device;                  /* CUDA device index */
} pdb_prefill_backend_opts;

pdb_status pdb_prefill_backend_cpu_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
/* PDB_UNSUPPORTED when built without CUDA; PDB_CUDA (with the driver's message) when no usable GPU. */
pdb_status pdb_prefill_backend_cuda_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);

#ifdef __cplusplus
}
#endif

#endif
