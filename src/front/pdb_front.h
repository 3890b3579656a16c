/* pdb_front: `pdbridge front`, the OpenAI-compatible front door. For each completion/chat
 * request it tokenizes exactly as the decoder does (pdb_prompt_encode_request), asks the store
 * how many leading blocks exist, applies the policy (and the X-PD-Bridge-Mode header), bridges
 * the missing blocks from the prefill server into the store through the decoder's block writer,
 * then forwards the original request to the decoder and relays its answer with the verdict
 * (header X-PD-Bridge, "pd_bridge" in the body or the final stream chunk).
 * Invariants: any failure of the bridge serves natively; the verdict is computed from the
 * decoder's own cached_tokens (read from its first stream chunk or its body) before the
 * client's headers are sent, so it is never a guess; several bridges run at once (one per
 * connection thread, at most max_bridges) and short requests never wait for one. */
#ifndef PDB_FRONT_H
#define PDB_FRONT_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_front_policy.h"
#include "pdb_status.h"

typedef struct pdb_front pdb_front;

typedef struct pdb_front_opts {
    const char *decoder_url;     /* http://host:port of decode-server */
    const char *prefill_url;     /* http://host:port of prefill-server */
    const char *decoder_model;   /* DEC_DIR: config, tokenizer and identity the decoder serves */
    const char *cache_dir;       /* the decoder's store directory (shared filesystem) */
    int64_t block_size;          /* must match the decoder's store; 0 = 2048 */
    pdb_front_policy policy;
    long prefill_connect_ms;
    long prefill_timeout_ms, decoder_timeout_ms; /* 0 = derived from the window (pdb_limits) */
    int64_t max_context;         /* the served window; 0 = the decoder checkpoint's max_position_embeddings */
    int max_bridges;             /* concurrent bridges; 0 = 4 */
    const char *host;
    int port;
    size_t max_body;             /* request body bound; 0 = derived from the window (pdb_limits) */
    const char *api_key;         /* required from clients when set */
    const char *upstream_api_key;/* sent to decoder and prefill (NULL = api_key) */
} pdb_front_opts;

/* Fill defaults; then apply a JSON config file (keys = long option names with '_', e.g.
 * "min_bridge_tokens") and the environment (PDB_FRONT_<KEY>); command-line values set after
 * this call win. */
pdb_status pdb_front_opts_defaults(pdb_front_opts *o, const char *config_file);

pdb_status pdb_front_start(const pdb_front_opts *o, pdb_front **out);
int pdb_front_port(const pdb_front *f);
void pdb_front_stop(pdb_front *f);

#endif
