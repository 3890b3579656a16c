/* pdb_prefill_server: `pdbridge prefill-server`, the compute box. POST /v1/prefill streams the
 * decoder's finished cache for a prompt as PDBF frames (pdb_segment.h, docs/protocol.md);
 * GET /health answers the decoder fingerprint it computes for; GET /metrics counts requests,
 * tokens, blocks and bytes. Invariants: a request whose fingerprint differs from the decoder
 * checkpoint it was started with is refused (409) before any compute; at most `parallel`
 * prefills run at once (others wait, then 503); every response names its transfer (header
 * X-PD-Transfer): its segments are kept by the spool (pdb_spool.h) until POST /v1/prefill/ack
 * releases them, so a resume ("transfer" + first_block) is served without recomputation while
 * they are all still held, else recomputed; a stream's memory is bounded by the transfer's
 * memory queue, the spill bound and the HTTP queue: when both are full the engine pauses. */
#ifndef PDB_PREFILL_SERVER_H
#define PDB_PREFILL_SERVER_H

#include <stdint.h>

#include "pdb_prefill_backend.h"
#include "pdb_status.h"

typedef struct pdb_prefill_server pdb_prefill_server;

typedef struct pdb_prefill_server_opts {
    const char *model_dir;     /* the engine's weights (HF checkpoint) */
    const char *decoder_dir;   /* the decoder's checkpoint (hook weights, fingerprint) */
    const char *backend;       /* "auto" (CUDA when a GPU is usable, else CPU), "cuda", "cpu" */
    int device;                /* CUDA device */
    pdb_cuda_prec precision;   /* CUDA DeepSeek-V2 engine: bf16 (default), f32, exact (the decoder's math) */
    int threads;               /* CPU threads per engine; 0 = all cores / parallel */
    int parallel;              /* engines (concurrent prefills); 0 = 1 */
    int64_t chunk;             /* prefill chunk; 0 = 512 */
    int64_t max_context;       /* the served window; 0 = the config's max_position_embeddings (above it: refused) */
    int64_t max_tokens;        /* longest prompt accepted; 0 = the window; below the window: refused at start */
    int64_t block_size;        /* the only block size served; 0 = any the architecture allows (limits reported at 2048) */
    const char *host;          /* NULL = 127.0.0.1 */
    int port;                  /* 0 = ephemeral */
    const char *api_key;
    int wait_s;                /* how long a request waits for a free engine; 0 = 120 */
    const char *spill_dir;     /* parent of the per-server spill directory; NULL = $TMPDIR or /tmp */
    int64_t spill_max_bytes;   /* bound on spill files of all transfers; 0 = 1 GiB, < 0 = no spill */
    int64_t spool_mem_bytes;   /* memory queue per transfer (one segment always fits); 0 = 4 MiB */
    int spool_ttl_s;           /* unacknowledged segments of an idle transfer are kept this long; 0 = 120 */
} pdb_prefill_server_opts;

pdb_status pdb_prefill_server_start(const pdb_prefill_server_opts *o, pdb_prefill_server **out);
int pdb_prefill_server_port(const pdb_prefill_server *s);
const char *pdb_prefill_server_backend(const pdb_prefill_server *s);
void pdb_prefill_server_stop(pdb_prefill_server *s);

#endif
