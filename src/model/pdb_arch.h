/* pdb_arch: the registry of model architectures. Each family has one pdb_arch_def (a static const
 * table in its own file: pdb_v2_arch.c, pdb_v4_arch.c) that holds what every component must know
 * of it: the decoder's cache layout (its pool table) and the block-size rule, the cache
 * semantics a decoder may choose and the string each puts in the fingerprint, which engine and
 * decoder configs compute the same cache, and the demo's preset. The registry maps config.json's
 * model_type (pdb_config.arch) to it. Outside a model's own files, components see models only
 * through this interface and through the engine tables keyed by pdb_arch_def.name (the decoder's
 * pdb_dec_arch, the prefill engine's backends).
 * Invariants: (1) a semantics value is an index into def->semantics, 0 is the default; its
 * fingerprint string changes whenever the cache's math or layout changes, so blocks of another
 * version can never hit; (2) layout() is a pure function of the config and the semantics; a block buffer holds the
 * layout's pools back to back in table order (pdb_arch_block_pools). */
#ifndef PDB_ARCH_H
#define PDB_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_config.h"
#include "pdb_names.h"
#include "pdb_status.h"
#include "pdb_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model's store layout with its own pool table (do not copy: layout.pools points into it). */
#define PDB_ARCH_MAX_POOLS 16
typedef struct pdb_arch_layout {
    pdb_store_pool pools[PDB_ARCH_MAX_POOLS];
    pdb_store_layout layout;
} pdb_arch_layout;

typedef struct pdb_arch_semantics {
    const char *name;        /* as options and pdbridge_decoder.json spell it ("official") */
    const char *fingerprint; /* the cache-semantics string hashed into the decoder fingerprint */
} pdb_arch_semantics;

/* What quantize's scheme mx makes of a weight (pdb_quantize.c applies it to 2-D float ".weight"
 * tensors whose input dim is a multiple of 32; every other tensor is kept). */
typedef enum pdb_arch_quant { PDB_ARCH_Q_KEEP = 0, PDB_ARCH_Q_MXFP8 = 1, PDB_ARCH_Q_MXFP4 = 2 } pdb_arch_quant;

struct json_t; /* jansson's */
struct pdb_make_ctx; /* pdb_make_model.h */

typedef struct pdb_arch_def {
    const char *name;          /* config.json model_type, and the key of the engine tables */
    pdb_arch id;
    const pdb_names_table *names; /* every tensor name its loaders and make-model use (pdb_<arch>_names.c) */
    struct {                   /* what `pdbridge up` generates and sends for this architecture */
        const char *title;     /* "DeepSeek-V2" */
        const char *preset;    /* make-model preset */
        const char *dir_name;  /* the checkpoint's directory under --dir */
        int64_t vocab;         /* make-model vocabulary (0: the preset's) */
        int64_t tokens;        /* default prompt tokens */
    } demo;
    const pdb_arch_semantics *semantics; /* [n_semantics]; [0] is the default */
    int n_semantics;
    const char *semantics_key; /* pdbridge_decoder.json's key naming the semantics; NULL: only one */
    const char *block_size_rule; /* the rule check_block_size enforces, in words (API errors) */
    /* config.json's fields for this model_type into cfg (validated; errors name origin and the
     * field), and cfg back to the JSON transformers' save_pretrained writes (malloc'd). */
    pdb_status (*config_parse)(struct json_t *root, const char *origin, pdb_config *cfg);
    pdb_status (*config_to_json)(const pdb_config *cfg, char **out);
    /* The decoder's cache as store pools under semantics sem (V4: official keeps its K=V rows and
     * indexer keys as FP8 / FP4 rows, exact as f32; pdb_v4_rows.h). */
    pdb_status (*layout)(const pdb_config *cfg, int sem, pdb_arch_layout *out);
    /* The f32 values of n_rows rows of a pool of layout(cfg, sem) that is not F32 (V4 official: its
     * FP8 / FP4 rows, decoded exactly), *dim per row, into out [n_rows, *dim] (out NULL: only *dim).
     * PDB_UNSUPPORTED for a pool it does not define. Optional (NULL: every pool is F32). The
     * exactness tools compare values through it (pdb_arch_pool_values). */
    pdb_status (*pool_decode)(const pdb_config *cfg, int sem, const pdb_store_pool *pool, const void *rows, int64_t n_rows,
                              float *out, int64_t *dim);
    /* PDB_INVALID naming the reason unless block_size suits the cache (always a positive multiple
     * of 128; V4 also of every compression rate, so a block ends with empty buffers). */
    pdb_status (*check_block_size)(const pdb_config *cfg, int64_t block_size);
    /* PDB_UNSUPPORTED naming the reason when cfg's shapes cannot run semantics sem. Optional. */
    pdb_status (*check_semantics)(const pdb_config *cfg, int sem);
    /* 1 when a prefill engine of config a computes exactly the cache a decoder of config b holds. */
    int (*same_cache)(const pdb_config *a, const pdb_config *b);
    /* The decoder checkpoint's format of weight `name` under scheme mx (by its tensor name); also
     * which weights make-model --format deepseek writes as FP4 (MXFP4) and FP8 128x128 (MXFP8),
     * so that quantize converts that layout without loss (docs/formats/deepseek.md). */
    pdb_arch_quant (*quant_kind)(const char *name);
    /* make-model: a preset into cfg (PDB_NOT_FOUND listing the presets), --layers applied to it,
     * and every tensor of a random checkpoint of cfg written through ctx. */
    pdb_status (*make_preset)(const char *preset, pdb_config *cfg);
    pdb_status (*make_layers)(pdb_config *cfg, int64_t layers);
    pdb_status (*make_tensors)(struct pdb_make_ctx *ctx, const pdb_config *cfg);
    /* The reference forward (f32, the definition parity is checked against) on one sequence of
     * at most cap positions of the model in dir under semantics sem: ref_forward runs the next n
     * tokens and writes every position's logits [n, vocab]. */
    pdb_status (*ref_open)(const char *dir, int sem, int64_t cap, void **ref);
    pdb_status (*ref_forward)(void *ref, const int32_t *ids, int64_t n, float *logits);
    void (*ref_close)(void *ref);
} pdb_arch_def;

extern const pdb_arch_def pdb_arch_deepseek_v2;
extern const pdb_arch_def pdb_arch_deepseek_v4;

/* The registered names, comma-separated, into buf (for messages); returns buf. */
const char *pdb_arch_names(char *buf, size_t n);
/* The definition of model_type (NULL when no architecture has that name). */
const pdb_arch_def *pdb_arch_find(const char *model_type);
/* The definition of cfg's architecture; PDB_UNSUPPORTED naming the model_type and the supported ones. */
pdb_status pdb_arch_of(const pdb_config *cfg, const pdb_arch_def **out);
/* cfg's decoder cache layout / block-size check through its definition (errors as pdb_arch_of). */
pdb_status pdb_arch_layout_of(const pdb_config *cfg, int sem, pdb_arch_layout *out);
pdb_status pdb_arch_check_block_size(const pdb_config *cfg, int64_t block_size);
/* A semantics name -> index (PDB_INVALID listing the valid names); NULL name: the default. */
pdb_status pdb_arch_semantics_parse(const pdb_arch_def *a, const char *name, int *sem);
/* Index -> name / fingerprint string (the default's for an index out of range). */
const char *pdb_arch_semantics_name(const pdb_arch_def *a, int sem);
const char *pdb_arch_semantics_fingerprint(const pdb_arch_def *a, int sem);
/* One block's pool p data (pdb_store_pool_bytes bytes) as f32 values, malloc'd into *out (*n values,
 * n_layers * rows * values per row): an F32 pool as it is, another through the architecture's
 * pool_decode; PDB_UNSUPPORTED naming the pool when neither applies. */
pdb_status pdb_arch_pool_values(const pdb_config *cfg, int sem, const pdb_store_pool *pool, int64_t block_size, const void *data,
                                float **out, int64_t *n);
/* Pool pointers of one block buffer whose pools lie back to back in layout order
 * (pdb_store_layout_block_bytes bytes in all): ptrs[p] = block + the earlier pools' bytes. */
void pdb_arch_block_pools(const pdb_store_layout *layout, int64_t block_size, const void *block, const void **ptrs);
/* The rule every architecture shares: PDB_INVALID unless block_size is a positive multiple of 128. */
pdb_status pdb_arch_check_block_128(int64_t block_size);

#ifdef __cplusplus
}
#endif

#endif
