/* pdb_make_model: random checkpoints of real architectures in the Hugging Face layout
 * (config.json, model.safetensors in bf16, tokenizer.json when the vocabulary covers the real
 * DeepSeek tokenizer). Invariant: the output is a pure function of (preset, overrides, seed):
 * each tensor draws from its own stream seeded by (seed, tensor name), so changing one
 * override never changes unrelated tensors. */
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
} pdb_make_model_opts;

/* Fill cfg from a preset name; PDB_NOT_FOUND lists the presets. */
pdb_status pdb_make_model_preset(const char *arch, const char *preset, pdb_config *cfg);
pdb_status pdb_make_model_write(const pdb_make_model_opts *o);

#ifdef __cplusplus
}
#endif

#endif
