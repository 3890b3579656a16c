/* pdb_make_model: random checkpoints of real architectures in the Hugging Face layout
 * (config.json, model.safetensors in bf16, tokenizer.json when the vocabulary covers the real
 * DeepSeek tokenizer), or in DeepSeek's own layout (format "deepseek": the weights the
 * architecture's quantization rule makes MX stored as DeepSeek ships them, FP8 e4m3 with an e8m0
 * scale per 128x128 block or packed FP4 e2m1 with an e8m0 scale per 32 inputs; docs/formats/
 * deepseek.md). Invariant: the output is a pure function of (preset, overrides, seed, format):
 * each tensor draws from its own stream seeded by (seed, tensor name), so changing one
 * override never changes unrelated tensors, and a deepseek-format weight holds its bf16
 * checkpoint's values rounded per block. */
#ifndef PDB_MAKE_MODEL_H
#define PDB_MAKE_MODEL_H

#include <stdint.h>

#include "pdb_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_make_model_opts {
    const char *arch;       /* "deepseek_v2", "deepseek_v4" */
    const char *preset;     /* v2: "tiny", "small", "v2-lite"; v4: "tiny", "v4-flash" */
    uint64_t seed;
    int64_t layers, experts, vocab, hidden; /* 0 = preset value */
    const char *tokenizer;  /* tokenizer.json to copy when vocab >= its size; NULL = none */
    const char *out_dir;
    const char *format;     /* "bf16" (NULL: the default) or "deepseek" */
} pdb_make_model_opts;

/* The architecture side (pdb_<arch>_make.c through the registry): a tensor of the checkpoint
 * being written, drawn from its own stream seeded by (seed, name), in bf16 (normal: N(mean,
 * std^2); linear: N(0, 1/in); norm: 1 + N(0, 0.05^2)), or an I64 [V, K] table of K distinct
 * picks among E per row (V4's tid2eid). Under format "deepseek" a linear weight whose
 * architecture quantization rule (pdb_arch_def.quant_kind) is MXFP8 or MXFP4, and whose input
 * dim is a multiple of 32 (what quantize's scheme mx converts), is written as FP8 128x128 or
 * FP4 per 32 instead, generated while the file is written (one tensor in memory at a time). */
typedef struct pdb_make_ctx pdb_make_ctx;
pdb_status pdb_make_model_normal(pdb_make_ctx *x, const char *name, int64_t d0, int64_t d1, double mean, double std);
pdb_status pdb_make_model_linear(pdb_make_ctx *x, const char *name, int64_t out, int64_t in);
pdb_status pdb_make_model_norm(pdb_make_ctx *x, const char *name, int64_t n);
pdb_status pdb_make_model_picks(pdb_make_ctx *x, const char *name, int64_t V, int64_t K, int64_t E);
/* A tensor's stream (the splitmix64 seed of its values) for a checkpoint of `seed`: element pair i, i + 1
 * (i even) of a normal tensor is Box-Muller of draws i + 1 and i + 2 (pdb_make_model.c); the device
 * engine's seeded weights (pdb_cuda_v4_engine_create_seeded) regenerate them from this. */
uint64_t pdb_make_model_stream(const char *name, uint64_t seed);
/* The picks tensor of stream s0 ([V, K] distinct experts of E per token) as int32. */
pdb_status pdb_make_model_picks_fill(uint64_t s0, int64_t V, int64_t K, int64_t E, int32_t *out);
/* What every preset starts from: the architecture, rms_norm_eps 1e-6, a MoE layer every layer,
 * one expert group, bos 0, eos 1. */
void pdb_make_model_defaults(pdb_config *c, pdb_arch arch, const char *model_type);
/* Each architecture's presets, layer override and tensor list (the registry points to them). */
pdb_status pdb_v2_make_preset(const char *preset, pdb_config *c);
pdb_status pdb_v2_make_layers(pdb_config *c, int64_t layers);
pdb_status pdb_v2_make_tensors(pdb_make_ctx *x, const pdb_config *c);
pdb_status pdb_v4_make_preset(const char *preset, pdb_config *c);
pdb_status pdb_v4_make_layers(pdb_config *c, int64_t layers);
pdb_status pdb_v4_make_tensors(pdb_make_ctx *x, const pdb_config *c);

/* Fill cfg from a preset name; PDB_NOT_FOUND lists the presets. */
pdb_status pdb_make_model_preset(const char *arch, const char *preset, pdb_config *cfg);
pdb_status pdb_make_model_write(const pdb_make_model_opts *o);

#ifdef __cplusplus
}
#endif

#endif
