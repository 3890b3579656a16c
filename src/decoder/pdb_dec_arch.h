/* pdb_dec_arch: the decode engine of one architecture, a table of function pointers (as ggml's
 * backends) keyed by the registry's name (pdb_arch_def.name): how a checkpoint is opened, how a
 * sequence cache is made, how a batch of segments runs through the model, and how a block of a
 * sequence is copied to / from the store's block buffer (the layout itself is the registry's,
 * pdb_arch.h). pdb_dec_model.c finds the engine by name; the service and the tools never see
 * which one runs.
 * Invariants: every op is deterministic (a token's cache pieces and logits depend only on the
 * weights, the token, its position and the cache before it); get_block after put_block of the
 * same bytes returns those bytes; a sequence's `len` is owned by pdb_dec_model (ops read it). */
#ifndef PDB_DEC_ARCH_H
#define PDB_DEC_ARCH_H

#include "pdb_dec_model.h"

typedef struct pdb_dec_arch {
    const char *name; /* == the pdb_arch_def's name */
    /* impl: the architecture's weights and scratch; pool: the threads every forward runs on (not
     * owned); sem: an index into the registry's semantics of this architecture. */
    pdb_status (*open)(const pdb_config *cfg, const pdb_st *st, pdb_pool *pool, int sem, void **impl);
    void (*close)(void *impl);
    pdb_status (*seq_init)(void *impl, pdb_dec_seq *s, int64_t cap);
    void (*seq_free)(pdb_dec_seq *s);
    /* Each segment's tokens at positions seg.seq->len ..; does not advance len (the caller does). */
    pdb_status (*forward)(void *impl, pdb_dec_seg *segs, int n_segs);
    void (*get_block)(void *impl, const pdb_dec_seq *s, int64_t b, int64_t bs, void *buf);
    void (*put_block)(void *impl, pdb_dec_seq *s, int64_t b, int64_t bs, const void *buf);
    /* Optional: dst (initialised, cap >= src->len) gets src's cache of positions 0 .. src->len (n
     * choices of one prompt share its prefill this way); NULL: not available (the service then
     * prefills each choice's tail after the store's blocks). */
    void (*seq_copy)(void *impl, pdb_dec_seq *dst, const pdb_dec_seq *src);
    /* Optional: the weights for benchmarks that count the bytes a step reads (NULL: none exposed). */
    const void *(*weights)(void *impl);
} pdb_dec_arch;

extern const pdb_dec_arch pdb_dec_arch_v2;
extern const pdb_dec_arch pdb_dec_arch_v4;

#endif
