/* pdb_test_blocks: what the prefill tests compare against, shared (header-only, for tests that
 * link the decoder): a segment sink that keeps every block at its index, and the decoder's own
 * blocks for a prompt (one block per forward, the snapshot taken at each block's end). */
#ifndef PDB_TEST_BLOCKS_H
#define PDB_TEST_BLOCKS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_model.h"
#include "pdb_test_util.h"

/* blocks: [max blocks * bytes], filled by pdb_test_on_segment; got[]: the indices in arrival order. */
typedef struct pdb_test_sink {
    char *blocks;
    uint64_t bytes;
    int64_t got[64];
    int n;
} pdb_test_sink;

static inline pdb_status pdb_test_on_segment(void *u, int64_t b, const void *data, uint64_t bytes) {
    pdb_test_sink *s = u;
    s->bytes = bytes;
    memcpy(s->blocks + (uint64_t)b * bytes, data, bytes);
    if (s->n < 64) s->got[s->n] = b;
    s->n++;
    return PDB_OK;
}

/* The decoder checkpoint dec's native blocks 0..nb-1 of ids (malloc'd; *bytes per block). */
static inline char *pdb_test_decoder_blocks(const char *dec, const int32_t *ids, int64_t nb, int64_t bs, uint64_t *bytes) {
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m));
    *bytes = pdb_store_layout_block_bytes(pdb_dec_model_layout(m), bs);
    char *out = malloc(*bytes * (uint64_t)nb);
    PDB_TEST_OK(pdb_dec_model_native_blocks(m, ids, nb, bs, out));
    pdb_dec_model_close(m);
    return out;
}

#endif
