/* pdb_dec_model: the decode engine's model: its own checkpoint (pdbridge quantize output:
 * MXFP4 experts, MXFP8 projections, or --scheme none), mmap'd, and its forward pass over a
 * batch of sequence segments with f32 latent-row caches.
 * Invariants: (1) the decoder's cache for a token is [RMSNorm(c_kv) | RoPE(k_pe)] in f32 per
 * layer, the store's single APPEND pool "latent"; (2) every output of the forward is a pure
 * function of (weights, the token, its position, the cache rows before it): the same token at
 * the same position gives bit-identical rows and logits whatever the batch, chunking, thread
 * count or ISA (pdb_qmat's fixed-order dot everywhere, per-row reductions only);
 * (3) the fingerprint covers config, scheme, cache semantics and the weights' digest. */
#ifndef PDB_DEC_MODEL_H
#define PDB_DEC_MODEL_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_pool.h"
#include "pdb_qmat.h"
#include "pdb_safetensors.h"
#include "pdb_store.h"

#define PDB_DEC_CACHE_SEMANTICS "deepseek_v2/latent-f32/v1"

typedef struct pdb_dec_model pdb_dec_model;

typedef struct pdb_dec_seq {
    int64_t cap, len;  /* positions allocated / filled */
    int64_t row;       /* kv_lora_rank + qk_rope_head_dim */
    int64_t n_layers;
    float *lat;        /* [n_layers, cap, row] */
} pdb_dec_seq;

typedef struct pdb_dec_seg {
    pdb_dec_seq *seq;
    const int32_t *ids; /* [n] appended at positions seq->len .. */
    int64_t n;
    float *logits;      /* [V] logits of the segment's last token, or NULL */
} pdb_dec_seg;

pdb_status pdb_dec_model_open(const char *dir, pdb_pool *pool, pdb_dec_model **out);
void pdb_dec_model_close(pdb_dec_model *m);
const pdb_config *pdb_dec_model_config(const pdb_dec_model *m);
const uint8_t *pdb_dec_model_fingerprint(const pdb_dec_model *m); /* [32] */
const char *pdb_dec_model_scheme(const pdb_dec_model *m);
/* The weights (read-only; benchmarks count the bytes a step touches). */
const struct pdb_v2_qweights *pdb_dec_model_weights(const pdb_dec_model *m);
/* The store layout of this model's cache (one APPEND pool "latent"). */
const pdb_store_layout *pdb_dec_model_layout(const pdb_dec_model *m);

pdb_status pdb_dec_seq_init(pdb_dec_seq *s, const pdb_dec_model *m, int64_t cap);
void pdb_dec_seq_free(pdb_dec_seq *s);

/* Run all segments as one batch (not thread-safe per model: one forward at a time). */
pdb_status pdb_dec_forward(pdb_dec_model *m, pdb_dec_seg *segs, int n_segs);

/* Copy block b's rows of a sequence into a store buffer [n_layers, block_size, row] and back. */
void pdb_dec_seq_get_block(const pdb_dec_seq *s, int64_t b, int64_t block_size, float *buf);
void pdb_dec_seq_put_block(pdb_dec_seq *s, int64_t b, int64_t block_size, const float *buf);

/* A decoder checkpoint's identity without loading it: scheme and fingerprint from
 * pdbridge_decoder.json, or for a plain HF directory scheme "none" and the digest of st. */
pdb_status pdb_dec_model_identity(const char *dir, const pdb_config *cfg, const pdb_st *st, char scheme[32],
                                  uint8_t fingerprint[32]);
/* Weights digest as quantize records it: SHA-256 over every tensor (sorted by name) of
 * name, dtype name, shape and bytes. */
pdb_status pdb_dec_weights_digest(const pdb_st *st, uint8_t out[32]);
/* fingerprint = SHA-256("pdbridge-decoder-v1" | canonical config JSON | scheme | semantics | digest) */
pdb_status pdb_dec_fingerprint(const pdb_config *cfg, const char *scheme, const uint8_t digest[32], uint8_t out[32]);

#endif
