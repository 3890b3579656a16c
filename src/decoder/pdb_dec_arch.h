/* pdb_dec_arch: the per-architecture part of the decode engine, a table of function pointers
 * (as ggml's backends): how a checkpoint is opened, what the cache's store layout is, how a
 * sequence cache is made, how a batch of segments runs through the model, and how a block of a
 * sequence is copied to / from the store's block buffer. pdb_dec_model.c dispatches on the
 * config's architecture; the service and the tools never see which one runs.
 * Invariants: every op is deterministic (a token's cache pieces and logits depend only on the
 * weights, the token, its position and the cache before it); get_block after put_block of the
 * same bytes returns those bytes; a sequence's `len` is owned by pdb_dec_model (ops read it). */
#ifndef PDB_DEC_ARCH_H
#define PDB_DEC_ARCH_H

#include "pdb_dec_model.h"
#include "pdb_v4.h"

typedef struct pdb_dec_arch {
    const char *name;
    pdb_status (*layout)(const pdb_config *cfg, pdb_dec_layout *out);
    pdb_status (*check_block_size)(const pdb_config *cfg, int64_t block_size);
    /* impl: the architecture's weights; v4_sem: pdb_v4_semantics (ignored by V2). */
    pdb_status (*open)(const pdb_config *cfg, const pdb_st *st, pdb_pool *pool, int v4_sem, void **impl);
    void (*close)(void *impl);
    pdb_status (*seq_init)(void *impl, pdb_dec_seq *s, int64_t cap);
    void (*seq_free)(pdb_dec_seq *s);
    /* Each segment's tokens at positions seg.seq->len ..; does not advance len (the caller does). */
    pdb_status (*forward)(void *impl, pdb_dec_seg *segs, int n_segs);
    void (*get_block)(void *impl, const pdb_dec_seq *s, int64_t b, int64_t bs, void *buf);
    void (*put_block)(void *impl, pdb_dec_seq *s, int64_t b, int64_t bs, const void *buf);
    const void *(*weights)(void *impl);
} pdb_dec_arch;

extern const pdb_dec_arch pdb_dec_arch_v2;
extern const pdb_dec_arch pdb_dec_arch_v4;

/* ---- V4 pools on a pdb_v4_cache: shared by the decoder and the prefill engine's capture hook,
 * so that a bridged block and a native block are the same bytes by construction. */
pdb_status pdb_dec_v4_layout(const pdb_config *cfg, pdb_dec_layout *out);
/* Block b of cache c into buf (layout order): APPEND rows of the block's span, STATE as now
 * (c->len must be (b+1)*bs for a meaningful snapshot). */
void pdb_dec_v4_get_block(const pdb_config *cfg, const pdb_v4_cache *c, int64_t b, int64_t bs, void *buf);
void pdb_dec_v4_put_block(const pdb_config *cfg, pdb_v4_cache *c, int64_t b, int64_t bs, const void *buf);

#endif
