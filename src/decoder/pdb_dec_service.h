/* pdb_dec_service: the decode engine as a service: one model, one prefix-cache store, and a
 * scheduler thread that runs continuous batching over all active requests (each decode step
 * is one batched forward over every running sequence; new requests are prefilled between
 * steps, in chunks, so short requests are never blocked behind a long prompt).
 * A request of n choices prefills its prompt once; at the prompt's end each further choice gets
 * a copy of the sequence (an engine without a copy: the choice mounts the blocks the first one
 * wrote and prefills only the tail) and its own sampling stream.
 * Invariants: callbacks for one request are called from the scheduler thread, in order; each
 * started choice gets exactly one final event (finish != NONE), and exactly one event of the
 * request has `last` set, the final event of its last choice; after it the request handle is
 * invalid. The service knows nothing about who wrote the blocks it finds in its store. */
#ifndef PDB_DEC_SERVICE_H
#define PDB_DEC_SERVICE_H

#include <stdint.h>

#include "pdb_config.h"
#include "pdb_sample.h"
#include "pdb_status.h"

typedef struct pdb_dec_service pdb_dec_service;

typedef struct pdb_dec_service_opts {
    const char *model_dir;   /* decoder checkpoint (pdbridge quantize output, or an HF dir) */
    const char *cache_dir;   /* prefix-cache store directory (NULL = no store) */
    int64_t block_size;      /* multiple of 128; default 2048 */
    uint64_t cache_max_bytes;/* 0 = unlimited */
    int threads;             /* 0 = all cores */
    int max_batch;           /* max concurrently running sequences (default 16) */
    int64_t max_context;     /* 0 = config max_position_embeddings */
    int weights_mmap;        /* 1: map the checkpoint; 0 (default): read it into huge-page memory */
} pdb_dec_service_opts;

typedef enum pdb_finish {
    PDB_FINISH_NONE = 0,   /* not finished (a token event) */
    PDB_FINISH_LENGTH,     /* max_tokens reached */
    PDB_FINISH_STOP,       /* EOS token, or cancelled by the caller because a stop string matched */
    PDB_FINISH_ERROR,      /* engine error: message in the event */
    PDB_FINISH_CANCELLED,  /* client went away */
} pdb_finish;

#define PDB_DEC_MAX_TOP 20     /* alternatives per position a request may ask for */

typedef struct pdb_dec_event {
    int choice;             /* 0 .. n_choices-1 */
    int last;               /* the request's last event (with finish != NONE) */
    int32_t token;          /* valid when finish == NONE */
    /* log-probabilities of token (requests with logprobs; pdb_sample_logprobs of the raw logits) */
    double logprob;
    int n_top;
    int32_t top_ids[PDB_DEC_MAX_TOP];
    double top_lp[PDB_DEC_MAX_TOP];
    pdb_finish finish;      /* != NONE on the last event */
    int64_t prompt_tokens;  /* set on every event */
    int64_t cached_tokens;  /* prompt tokens served from the prefix-cache store */
    const char *error;      /* finish == ERROR */
} pdb_dec_event;

/* Return nonzero from the callback to cancel the request (e.g. a stop string matched); the
 * service then sends the final event with PDB_FINISH_STOP. */
typedef int (*pdb_dec_event_fn)(void *user, const pdb_dec_event *ev);

typedef struct pdb_dec_request {
    const int32_t *ids;     /* prompt (copied at submit) */
    int64_t n_ids;
    int64_t max_tokens;     /* >= 0 */
    pdb_sample_params sample;
    int ignore_eos;
    int n_choices;          /* 0 or 1: one; at most the service's max_batch. Choice k samples with seed + k * 0x9E3779B97F4A7C15 */
    int logprobs;           /* events carry the token's log-probability ... */
    int top_logprobs;       /* ... and this many alternatives (0..PDB_DEC_MAX_TOP) */
    float frequency_penalty, presence_penalty; /* OpenAI's, over each choice's generated tokens */
    const int32_t *bias_ids;/* [n_bias] logit_bias (copied at submit) */
    const float *bias_vals; /* [n_bias] */
    int n_bias;
    /* Constrained decoding (e.g. pdb_json_mask): before each sampling step mask(mask_user, state,
     * logits, budget) sets the logits of tokens that may not come next to -inf and returns how
     * many may (0: the choice ends, finish STOP); advance feeds the sampled token. state_bytes of
     * per-choice state, initialised by init. NULL mask: none. budget: tokens left after this one.
     * done (may be NULL): the constraint is met; a choice that reaches max_tokens with it met ends
     * as STOP (the last token completed it), not LENGTH. */
    int (*mask)(void *mask_user, void *state, float *logits, int64_t n_vocab, int64_t budget);
    void (*mask_advance)(void *mask_user, void *state, int32_t token);
    void (*mask_init)(void *mask_user, void *state);
    int (*mask_done)(void *mask_user, void *state);
    void *mask_user;
    size_t mask_state_bytes;
    pdb_dec_event_fn on_event;
    void *user;
} pdb_dec_request;

pdb_status pdb_dec_service_open(const pdb_dec_service_opts *o, pdb_dec_service **out);
void pdb_dec_service_close(pdb_dec_service *s); /* finishes pending requests as CANCELLED */

/* Queue a request. Validation errors (ids outside the vocabulary, prompt + max_tokens past the
 * context, n_choices over max_batch, a logit_bias id outside the vocabulary) return PDB_INVALID / PDB_TOO_LARGE with a message and no callback is made. */
pdb_status pdb_dec_service_submit(pdb_dec_service *s, const pdb_dec_request *r, uint64_t *request_id);
/* Ask the scheduler to stop a request; its final event follows (CANCELLED). */
void pdb_dec_service_cancel(pdb_dec_service *s, uint64_t request_id);

const pdb_config *pdb_dec_service_config(const pdb_dec_service *s);
const char *pdb_dec_service_fingerprint_hex(const pdb_dec_service *s); /* 64 hex chars */

typedef struct pdb_dec_stats {
    uint64_t requests, prompt_tokens, cached_tokens, generated_tokens;
    uint64_t prefill_tokens;   /* prompt tokens run through the model (not mounted, not copied) */
    uint64_t running, queued;
    uint64_t store_blocks_written, store_hits, store_misses, store_corrupt;
    uint64_t store_bytes, store_evictions; /* block bytes in the store, blocks evicted */
    uint64_t store_disk_free_bytes;        /* free bytes of the store's disk; UINT64_MAX = no store / unknown */
} pdb_dec_stats;
void pdb_dec_service_stats(const pdb_dec_service *s, pdb_dec_stats *st);

#endif
