/* pdb_cuda_v4_engine: the device-resident DeepSeek-V4 prefill engine (issue 21): every weight
 * uploaded once, and within a pass no activation leaves the device except each layer's
 * attention input, copied to pinned host memory for the capture hook. One sequence at a time:
 * create -> begin -> forward ... -> end -> free.
 * Invariants: the math is the CPU forward's (pdb_v4.c, semantics exact) in bf16 (weights and GEMM
 * operands bf16, f32 accumulation, activations and the engine's cache f32) or f32 (validation:
 * f32 everywhere, no TF32); a position's values do not depend on how the prompt is cut into
 * passes (every kernel is row-local and the GEMMs run in M-invariant tiles); the engine is not
 * the decoder's math (its blocks come from the hook, which is: pdb_prefill_cpu_v4.c). */
#ifndef PDB_CUDA_V4_ENGINE_H
#define PDB_CUDA_V4_ENGINE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <stdint.h>

#include "pdb_cuda_prefill.h"
#include "pdb_v4.h"

/* The products' M-invariant tile by default: the prefill server's pass (one block, 512 tokens by default)
 * in one call per product (256-row tiles: 0.92x at 8K, H100, bench/results/issue21_session15.md). */
enum { PDB_CUDA_V4_GEMM_ROWS_DEFAULT = 512 };
/* The pass by default: 32768 tokens (each expert's weights serve more rows per 128-row tile and fewer
 * tiles are half empty: 16384 over 8192 gave the routed experts 1.40x on the H100, issue21_session16;
 * 32768 over 16384 the pass 1.03x at 32K and 128K on the H200, issue21_session18), halved down to 8192
 * while the larger pass's scratch does not fit beside the weights. Results do not depend on it. */
enum { PDB_CUDA_V4_PASS_DEFAULT = 32768, PDB_CUDA_V4_PASS_FALLBACK = 8192 };

typedef struct pdb_cuda_v4_engine_opts {
    pdb_cuda_prec prec;  /* BF16 (default) or F32; EXACT is refused (the exact path is pdb_cuda_v4's provider) */
    int64_t sub_chunk;   /* largest pass in tokens (scratch bound); 0 = PDB_CUDA_V4_PASS_DEFAULT where the sequence's
                            scratch fits the device's memory, else its halves down to PDB_CUDA_V4_PASS_FALLBACK */
    int64_t gemm_rows;   /* M-invariant GEMM tile rows; 0 = PDB_CUDA_V4_GEMM_ROWS_DEFAULT, -1 = one call per product */
    int gemm_tiles_sequential; /* 1: every full tile its own cuBLAS call (session 15's form), for comparison; 0: the
                                  full tiles of a product batched into one call where that form was checked on this
                                  device to give each tile's bits (pdb_cuda_gemm) */
    int profile;         /* CUDA events around every stage (pdb_cuda_v4_engine_profile_take) */
    int moe_kernel;      /* bf16 routed experts on the own grouped kernel (pdb_cuda_moe_gemm) instead of cuBLAS
                            row-tile products (the default), for comparison */
    int attn_f32_keys;   /* bf16 attention reading the f32 key rows (pdb_cuda_v4_attention_tc) instead of their bf16
                            mirrors (pdb_cuda_v4_attention_wg where it fits, else _tc16: the default), for comparison */
    int attn_mma_sync;   /* bf16 attention on the bf16 mirrors by mma.sync (pdb_cuda_v4_attention_tc16) where the
                            warpgroup kernel (pdb_cuda_v4_attention_wg, the default where it fits) would run, and
                            the indexer's scores likewise (pdb_cuda_v4_index_scores_tc's mma_sync), for comparison */
    int hookless;        /* 1: forwards take no hook and hook_products is refused, so begin leaves out the hook's
                            slots (HOOK_SLOTS x pass x H floats on the device and pinned on the host: 64 KB a pass
                            token each); 0 (default): any forward may take a hook */
} pdb_cuda_v4_engine_opts;

typedef struct pdb_cuda_v4_engine pdb_cuda_v4_engine;

/* Upload model m's weights (any pdb_qmat format; MXFP8 / MXFP4 are dequantized exactly and held
 * as bf16 for now) to device `device`. m may be freed afterwards. o NULL = the defaults.
 * PDB_CUDA (no GPU, out of device memory: naming the tensor), PDB_UNSUPPORTED (no CUDA build, a
 * shape the kernels do not take), PDB_INVALID (a hook-only model). */
pdb_status pdb_cuda_v4_engine_create(const pdb_v4_model *m, int device, const pdb_cuda_v4_engine_opts *o,
                                     pdb_cuda_v4_engine **out);
/* The same engine for config cfg with the weights make-model writes for `seed` (format bf16),
 * generated on the device from each tensor's stream (pdb_make_model_stream) instead of read from
 * a file: V4-Flash-shaped models with all 256 experts without a checkpoint on disk. The values are
 * the file's up to the device's double log / cos / sin (within an ulp of glibc's: a bf16 value
 * differs only where that ulp crosses a rounding boundary; docs/cuda.md). */
pdb_status pdb_cuda_v4_engine_create_seeded(const pdb_config *cfg, uint64_t seed, int device,
                                            const pdb_cuda_v4_engine_opts *o, pdb_cuda_v4_engine **out);
/* The capture hook's products on the device: per layer the decoder's hook weights (dm, a model of
 * any part: wkv, the compressor's and the indexer compressor's wkv / wgate, dequantized exactly and
 * held in f32; NULL: the engine's own, for a decoder with the engine's weights) are uploaded once,
 * and a forward whose hook has feed_rows gets each layer's products (f32 on the copy stream in
 * pdb_qmat's order, pdb_cuda_v4_mm_exact: the CPU hook's bits) instead of the attention input; a
 * thread of the forward hands them over layer by layer while the device runs on. Only between
 * sequences. PDB_INVALID: dm's shape is not the engine's. */
pdb_status pdb_cuda_v4_engine_set_hook(pdb_cuda_v4_engine *e, const pdb_v4_model *dm);
/* The same products of given attention inputs x [n, H] (host, n <= the pass size) of layer l, into
 * *out (host memory valid until the next call or forward): the hook alone (hook_chunk). */
pdb_status pdb_cuda_v4_engine_hook_products(pdb_cuda_v4_engine *e, int64_t l, const float *x, int64_t n,
                                            pdb_v4_feed_rows *out);
/* A new sequence of at most max_tokens positions (the previous one, if any, is dropped). With the
 * default pass bound, a scratch that does not fit at PDB_CUDA_V4_PASS_DEFAULT is retried at half the
 * pass, down to PDB_CUDA_V4_PASS_FALLBACK, before failing. */
pdb_status pdb_cuda_v4_engine_begin(pdb_cuda_v4_engine *e, int64_t max_tokens);
/* n tokens at the sequence's next positions (passes of at most sub_chunk tokens). hook (NULL: none)
 * receives, for every pass and layer in order, that layer's attention input [T, H] (or with
 * set_hook and hook->feed_rows its feed products; host memory, valid during the call) while the
 * device runs the later layers; a hook error stops the forward.
 * logits_last [V] (NULL: skipped): the last token's logits. On an error the sequence is unusable
 * (begin again). */
pdb_status pdb_cuda_v4_engine_forward(pdb_cuda_v4_engine *e, const int32_t *ids, int64_t n, const pdb_v4_hook *hook,
                                      float *logits_last);
/* The pass size of the sequence (min(max_tokens, the pass bound begin could allocate); 0 before begin). */
int64_t pdb_cuda_v4_engine_pass_tokens(const pdb_cuda_v4_engine *e);
/* Positions filled so far. */
int64_t pdb_cuda_v4_engine_len(const pdb_cuda_v4_engine *e);
/* The product forms checked so far (shape, tile count) and how many of them were refused (their
 * tiles then run one call each). */
void pdb_cuda_v4_engine_gemm_forms(const pdb_cuda_v4_engine *e, int64_t *checked, int64_t *rejected);
/* Device bytes of the uploaded weights. */
int64_t pdb_cuda_v4_engine_weight_bytes(const pdb_cuda_v4_engine *e);
/* With opts.profile: "stage=ms ... total_ms=X" summed over the passes since the last take ("" otherwise). */
void pdb_cuda_v4_engine_profile_take(pdb_cuda_v4_engine *e, char *buf, size_t n);
void pdb_cuda_v4_engine_end(pdb_cuda_v4_engine *e);
void pdb_cuda_v4_engine_free(pdb_cuda_v4_engine *e);

#ifdef __cplusplus
}
#endif

#endif
