/* pdb_front_bridge: one bridge transfer. Asks the prefill server for blocks
 * [first_block, end_block) of a prompt, verifies each arriving segment (frame checksum, order,
 * header identity) and writes it as one block through the decoder's block writer
 * (pdb_store_stream_put), holding one segment in memory. Stops at the first bad or missing
 * segment; blocks already written stay (they are complete and verified). The prefill server keeps
 * the transfer's segments until acknowledged: the bridge acknowledges the blocks the store has
 * accepted (every few blocks, before a resume, and all of them at the end, which releases the
 * transfer), and a resume names the transfer (X-PD-Transfer) so that the server can answer it from
 * the kept segments instead of recomputing.
 * Invariant: blocks_written counts only blocks the store accepted, contiguous from first_block;
 * a block is acknowledged only after the store accepted it. */
#ifndef PDB_FRONT_BRIDGE_H
#define PDB_FRONT_BRIDGE_H

#include <stdint.h>

#include "pdb_status.h"
#include "pdb_store.h"

typedef struct pdb_front_bridge_opts {
    const char *prefill_url;     /* http://host:port */
    const char *api_key;         /* sent as Bearer when set */
    long connect_timeout_ms;     /* 0 = 2000 */
    long total_timeout_ms;       /* 0 = 600000 */
    const pdb_store_layout *layout; /* the store's layout: a segment is its pools back to back
                                     * (NULL: a single pool) */
} pdb_front_bridge_opts;

typedef struct pdb_front_bridge_result {
    int64_t blocks_written;
    uint64_t bytes;              /* segment bytes written to the store */
    double engine_ms, transfer_ms, write_ms, total_ms;
    char reason[96];             /* "" when every requested block arrived */
    int resumes;                 /* transfers resumed from a block boundary after a break */
    int64_t spool_blocks;        /* blocks the prefill server sent from its spool (no recomputation) */
    int64_t acks;                /* acknowledgements the prefill server accepted */
    char transfer[33];           /* the prefill server's transfer id ("" when none was given) */
} pdb_front_bridge_result;

#define PDB_FRONT_BRIDGE_MAX_RESUMES 2

/* ids: the prompt; blocks [first_block, end_block) of block_size tokens are requested; a transfer
 * that breaks (connection lost, truncated or corrupt stream) is resumed from the next block
 * boundary up to PDB_FRONT_BRIDGE_MAX_RESUMES times within total_timeout_ms. Returns
 * PDB_OK even when the transfer stopped early: the result says how far it got and why. */
pdb_status pdb_front_bridge_run(const pdb_front_bridge_opts *o, pdb_store *store, const char *fingerprint_hex,
                                const int32_t *ids, int64_t block_size, int64_t first_block, int64_t end_block,
                                pdb_front_bridge_result *res);

#endif
