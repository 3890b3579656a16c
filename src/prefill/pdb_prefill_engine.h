/* pdb_prefill_engine: chunked prefill of one prompt on a backend, handing each finished block of
 * the decoder's cache (one segment) to a callback as soon as the chunk that completes it has
 * passed the last layer.
 * Invariants: only full blocks are produced, in increasing order, from first_block on; the
 * prompt is run only up to its last full block (the decoder computes the tail itself); chunks
 * never cross a block boundary; memory held for captures is one segment plus the backend's
 * hook state (V2: one block of rows; V4: the decoder-pool cache), whatever the prompt length. */
#ifndef PDB_PREFILL_ENGINE_H
#define PDB_PREFILL_ENGINE_H

#include <stdint.h>

#include "pdb_prefill_backend.h"

/* data: the block's pools back to back in the decoder's store layout (pdb_arch_block_pools;
 * DeepSeek-V2: the "latent" pool [n_layers, block_size, row] f32), `bytes` in all. */
typedef pdb_status (*pdb_prefill_segment_fn)(void *user, int64_t block, const void *data, uint64_t bytes);

typedef struct pdb_prefill_stats {
    int64_t tokens_run, blocks_sent;
    double engine_s, callback_s;   /* time in the backend / in the segment callback */
    uint64_t capture_bytes_peak;   /* capture + segment buffers */
} pdb_prefill_stats;

/* chunk <= 0: 512. block_size must suit cfg's architecture (pdb_arch_check_block_size). */
pdb_status pdb_prefill_run(pdb_prefill_backend *be, const pdb_config *cfg, const int32_t *ids, int64_t n_ids,
                           int64_t block_size, int64_t first_block, int64_t chunk, pdb_prefill_segment_fn fn, void *user,
                           pdb_prefill_stats *stats);

#endif
