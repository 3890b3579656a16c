/* pdb_dec_server: the decode engine's OpenAI-compatible HTTP server (pdbridge decode-server):
 * /v1/completions, /v1/chat/completions (stream and not), /v1/models, /health, /metrics over one
 * pdb_dec_service. Invariants: every bad request is answered 4xx with an OpenAI error object and
 * never reaches the engine; each accepted request gets exactly one answer (or one complete
 * stream) and is cancelled in the engine when its client goes away; generated text never
 * contains a stop string nor a split UTF-8 character (held back until complete). It knows
 * nothing about who wrote the blocks in the store. */
#ifndef PDB_DEC_SERVER_H
#define PDB_DEC_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_dec_service.h"
#include "pdb_openai.h"
#include "pdb_status.h"
#include "pdb_tokenizer.h"

typedef struct pdb_dec_server pdb_dec_server;

typedef struct pdb_dec_server_opts {
    pdb_dec_service_opts svc;  /* model_dir, cache_dir, block_size, threads, max_batch ... */
    const char *host;          /* NULL = 127.0.0.1 */
    int port;                  /* 0 = ephemeral */
    size_t max_body;           /* 0 = PDB_HTTP_DEFAULT_MAX_BODY */
    const char *api_key;       /* NULL = none */
} pdb_dec_server_opts;

/* Loads the tokenizer (model_dir/tokenizer.json when present, else token-id mode), opens the
 * service and starts listening. */
pdb_status pdb_dec_server_start(const pdb_dec_server_opts *o, pdb_dec_server **out);
int pdb_dec_server_port(const pdb_dec_server *s);
/* The model id served (basename of the model directory). */
const char *pdb_dec_server_model_id(const pdb_dec_server *s);
/* Stop accepting, cancel everything in flight (clients see their stream end), join, free. */
void pdb_dec_server_stop(pdb_dec_server *s);

#endif
