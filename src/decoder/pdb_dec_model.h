/* pdb_dec_model: the decode engine's model: its own checkpoint (pdbridge quantize output:
 * MXFP4 experts, MXFP8 projections, or --scheme none), resident in memory or mapped, and its
 * forward pass over a batch of sequence segments with the architecture's cache. The
 * architecture-specific part is a table of function pointers (pdb_dec_arch.h: DeepSeek-V2 and
 * DeepSeek-V4, found by the registry's name, pdb_arch.h); this API and the service above it are
 * the same for every architecture.
 * Invariants: (1) the decoder's cache is described by a store layout of per-layer pools
 * (DESIGN §4): V2 one APPEND pool "latent" [RMSNorm(c_kv) | RoPE(k_pe)] f32; V4 the window,
 * compressed entries, indexer keys and overlap halves (docs/v4.md); (2) every output of the forward is a pure
 * function of (weights, the token, its position, the cache rows before it): the same token at
 * the same position gives bit-identical rows and logits whatever the batch, chunking, thread
 * count or ISA (pdb_qmat's fixed-order dot everywhere, per-row reductions only);
 * (3) the fingerprint covers config, scheme, cache semantics and the weights' digest. */
#ifndef PDB_DEC_MODEL_H
#define PDB_DEC_MODEL_H

#include <stdint.h>

#include "pdb_arch.h"
#include "pdb_config.h"
#include "pdb_pool.h"
#include "pdb_qmat.h"
#include "pdb_safetensors.h"
#include "pdb_store.h"

typedef struct pdb_dec_model pdb_dec_model;

typedef struct pdb_dec_seq {
    int64_t cap, len;  /* positions allocated / filled */
    int64_t row;       /* V2: kv_lora_rank + qk_rope_head_dim */
    int64_t n_layers;
    float *lat;        /* V2: [n_layers, cap, row] */
    const pdb_dec_model *model;
    void *state;       /* other architectures' cache (V4: pdb_v4_cache) */
} pdb_dec_seq;

typedef struct pdb_dec_seg {
    pdb_dec_seq *seq;
    const int32_t *ids; /* [n] appended at positions seq->len .. */
    int64_t n;
    float *logits;      /* [V] logits of the segment's last token, or NULL */
} pdb_dec_seg;

pdb_status pdb_dec_model_open(const char *dir, pdb_pool *pool, pdb_dec_model **out);
/* st_flags: pdb_st_open_flags' (PDB_ST_RESIDENT: the checkpoint read into huge-page memory, 0:
 * mmap'd); pdb_dec_model_open passes PDB_DEC_WEIGHTS_DEFAULT, resident: no page faults on a
 * weight's first touch (a cold page cache costs a decode step milliseconds), fewer TLB misses
 * (bench/results/cpu_bench_h200_host_session5.md; decisions D18). */
#define PDB_DEC_WEIGHTS_DEFAULT PDB_ST_RESIDENT
pdb_status pdb_dec_model_open_flags(const char *dir, pdb_pool *pool, int st_flags, pdb_dec_model **out);
void pdb_dec_model_close(pdb_dec_model *m);
const pdb_config *pdb_dec_model_config(const pdb_dec_model *m);
const uint8_t *pdb_dec_model_fingerprint(const pdb_dec_model *m); /* [32] */
const char *pdb_dec_model_scheme(const pdb_dec_model *m);
/* The weights of a model of architecture `arch` (read-only; benchmarks count the bytes a step
 * touches: deepseek_v2's are a pdb_v2_qweights); NULL when the model is of another one. */
const void *pdb_dec_model_weights(const pdb_dec_model *m, const char *arch);
/* The store layout of this model's cache. */
const pdb_store_layout *pdb_dec_model_layout(const pdb_dec_model *m);
/* The cache semantics string of this model (the registry's fingerprint string of its semantics). */
const char *pdb_dec_model_semantics(const pdb_dec_model *m);
/* Its index in the architecture's semantics (pdb_arch.h; with the config it decides the layout). */
int pdb_dec_model_semantics_index(const pdb_dec_model *m);

pdb_status pdb_dec_seq_init(pdb_dec_seq *s, const pdb_dec_model *m, int64_t cap);
void pdb_dec_seq_free(pdb_dec_seq *s);
/* dst (initialised by pdb_dec_seq_init, cap >= src->len) becomes a copy of src's cache (len
 * included): the same rows, so the same logits follow. PDB_UNSUPPORTED when src's engine has no
 * copy (deepseek_v4), PDB_INVALID when dst is too small. */
pdb_status pdb_dec_seq_copy(pdb_dec_seq *dst, const pdb_dec_seq *src);

/* Run all segments as one batch (not thread-safe per model: one forward at a time). */
pdb_status pdb_dec_forward(pdb_dec_model *m, pdb_dec_seg *segs, int n_segs);

/* Copy block b of a sequence into one block buffer (the layout's pools back to back, as
 * pdb_arch_block_pools splits it) and back: the APPEND rows of the block's span and the STATE
 * snapshot at its end. get needs len >= (b+1)*block_size and, for STATE pools, len exactly
 * (b+1)*block_size (the state is the sequence's current one); put writes the block's rows and
 * makes its snapshot the current state, so mounting blocks 0..b in order restores the cache of
 * a prefix of (b+1)*block_size tokens (the caller then sets len). */
void pdb_dec_seq_get_block(const pdb_dec_seq *s, int64_t b, int64_t block_size, void *buf);
void pdb_dec_seq_put_block(pdb_dec_seq *s, int64_t b, int64_t block_size, const void *buf);

/* The decoder's own blocks for token ids[0 .. n_blocks * block_size): a native prefill, one block
 * per forward, each block copied out at its end into out + b * pdb_store_layout_block_bytes (the
 * reference bridged blocks are compared with). */
pdb_status pdb_dec_model_native_blocks(pdb_dec_model *m, const int32_t *ids, int64_t n_blocks, int64_t block_size,
                                       void *out);

/* A decoder checkpoint's identity without loading it: scheme and fingerprint from
 * pdbridge_decoder.json, or for a plain HF directory scheme "none" and the digest of st; the
 * cache semantics as pdb_dec_model_semantics_of reads it. */
pdb_status pdb_dec_model_identity(const char *dir, const pdb_config *cfg, const pdb_st *st, char scheme[32],
                                  uint8_t fingerprint[32]);
/* Weights digest as quantize records it: SHA-256 over every tensor (sorted by name) of
 * name, dtype name, shape and bytes. */
pdb_status pdb_dec_weights_digest(const pdb_st *st, uint8_t out[32]);
/* The cache semantics a decoder directory asks for (an index into its architecture's registry
 * semantics): the value of the architecture's semantics_key in pdbridge_decoder.json (deepseek_v4:
 * "v4_semantics"), the default (0) when the file or the key is absent or the architecture has one
 * semantics; PDB_INVALID naming the file and the valid names for another value. */
pdb_status pdb_dec_model_semantics_of(const char *dir, const pdb_config *cfg, int *sem);
/* fingerprint = SHA-256("pdbridge-decoder-v1" | canonical config JSON | scheme | semantics | digest) */
pdb_status pdb_dec_fingerprint(const pdb_config *cfg, const char *scheme, const char *semantics, const uint8_t digest[32],
                               uint8_t out[32]);

#endif
