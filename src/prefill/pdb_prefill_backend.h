/* pdb_prefill_backend: the prefill engine's compute backends behind one interface (a struct of
 * function pointers per backend, as ggml does). An engine is an (architecture, device) pair:
 * pdb_prefill_backend.c holds the table of them (deepseek_v2 on the CPU, pdb_prefill_cpu.c, and
 * on CUDA, pdb_prefill_cuda.c over src/cuda/pdb_cuda_prefill.cu; deepseek_v4 on the CPU and on
 * CUDA, pdb_prefill_cpu_v4.c over src/cuda/pdb_cuda_v4.cu). A backend owns the engine's weights (the HF checkpoint), its own cache
 * for one sequence at a time, and the capture hook: at every layer, from that layer's attention
 * input, it computes the decoder's cache pieces with the DECODER's weights and the decoder's own
 * pool math (pdb_v2_ops_latent_rows; pdb_v4_cache_feed), and hands a finished block out in the
 * decoder's store layout (pdb_arch.h: the pools back to back) with get_block: one capture form
 * for every architecture and device.
 * A backend's unit of work is a whole chunk through all layers (a device backend keeps the
 * chunk's activations on the device, except where its comment says otherwise).
 * Invariants: forward_chunk appends n positions at pos0 (pos0 == tokens already run) and never
 * across a block boundary (the caller clips chunks at multiples of block_size); results of a
 * position never depend on how the prompt was chunked (CPU: bit for bit; CUDA: its own fixed
 * kernels); get_block(b) is valid right after the chunk ending at (b+1)*block_size when every
 * chunk of block b ran with capture. */
#ifndef PDB_PREFILL_BACKEND_H
#define PDB_PREFILL_BACKEND_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_cuda_prefill.h" /* pdb_cuda_prec */
#include "pdb_safetensors.h"
#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_prefill_backend pdb_prefill_backend;

struct pdb_prefill_backend {
    const char *name;          /* "cpu", "cuda" */
    int exact;                 /* 1: the engine's own math is the decoder's (its blocks equal the decoder's native
                                  blocks when it runs the decoder's weights): CPU, CUDA exact, CUDA V4 */
    void *impl;
    int semantics;             /* the decoder's cache semantics its blocks are made for (opts.semantics): with the config,
                                  it decides the blocks' layout (pdb_arch_layout_of) */
    /* Start a sequence of at most max_tokens positions cut into blocks of block_size (allocates
     * the engine's cache and the hook's block state). */
    pdb_status (*begin)(pdb_prefill_backend *be, int64_t max_tokens, int64_t block_size);
    /* Run ids[0..n) at positions pos0..pos0+n-1 (within one block). capture 0: the caller will
     * not ask for this block (a backend whose hook needs every chunk from position 0 runs it
     * anyway). logits_last: [vocab] of the chunk's last token, or NULL. */
    pdb_status (*forward_chunk)(pdb_prefill_backend *be, const int32_t *ids, int64_t pos0, int64_t n, int capture,
                                float *logits_last);
    /* The capture hook alone (pool-validate), as if a forward of positions pos0..pos0+n-1 (within
     * one block) had produced the attention inputs xn [num_layers, n, hidden] (f32, host): the
     * engine's own cache is not touched. Optional (NULL: not offered). */
    pdb_status (*hook_chunk)(pdb_prefill_backend *be, const float *xn, int64_t pos0, int64_t n);
    /* Block b's bytes in the decoder's store layout (pdb_arch_block_pools splits them) into buf. */
    pdb_status (*get_block)(pdb_prefill_backend *be, int64_t b, void *buf);
    void (*end)(pdb_prefill_backend *be);      /* release the sequence's cache */
    void (*destroy)(pdb_prefill_backend *be);  /* frees be too */
};

/* Where an engine runs (kept apart from the weights it loads). */
typedef struct pdb_prefill_exec {
    int threads;                 /* CPU threads: 0 = all cores */
    int device;                  /* CUDA device index */
} pdb_prefill_exec;

typedef struct pdb_prefill_backend_opts {
    const pdb_config *cfg;       /* engine model config (== decoder config: checked by the caller) */
    const pdb_st *engine;        /* HF checkpoint tensors (the engine's own weights) */
    const pdb_st *decoder;       /* decoder checkpoint tensors (the hook's weights) */
    int semantics;               /* the decoder's cache semantics (an index into the registry's, pdb_arch.h) */
    pdb_cuda_prec precision;     /* CUDA engines: bf16 (default), f32, exact (the decoder's math, bit-identical blocks) */
    pdb_prefill_exec exec;
} pdb_prefill_backend_opts;

/* By name: "cpu", "cuda" (no fallback) or "auto" (CUDA when usable, else the CPU), for the
 * architecture of o->cfg (PDB_UNSUPPORTED when no engine of that architecture exists). */
pdb_status pdb_prefill_backend_create(const pdb_prefill_backend_opts *o, const char *want, pdb_prefill_backend **out);

/* The engines of the table (pdb_prefill_backend.c). CUDA: PDB_UNSUPPORTED when built without
 * CUDA, PDB_CUDA (with the driver's message) when no usable GPU. */
pdb_status pdb_prefill_backend_cpu_v2_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
pdb_status pdb_prefill_backend_cuda_v2_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
pdb_status pdb_prefill_backend_cpu_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
/* DeepSeek-V4 on a GPU, device o->exec.device: precision bf16 / f32, the device-resident engine
 * (pdb_cuda_v4_engine: the whole chunk on the device, each layer's attention input copied to the
 * host for the hook); precision exact, the CPU engine of pdb_prefill_cpu_v4.c with every matrix
 * product and the attention on the device in the reference order (pdb_cuda_v4: blocks
 * bit-identical to the CPU backend's, activations crossing per product). The hook runs on the
 * host with its products on the provider either way. */
pdb_status pdb_prefill_backend_cuda_v4_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);

#ifdef __cplusplus
}
#endif

#endif
