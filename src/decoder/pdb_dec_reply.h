/* pdb_dec_reply: one choice's answer composed from its generated text, for the answers that are
 * more than text: a chat completion with tools (content and tool_calls, streamed as tool_call
 * deltas; with n > 1 one composer per choice, the server joining their bodies) and an Anthropic
 * message (text and tool_use blocks, the Messages event sequence). The decoder server feeds it
 * the text it has decided is final (after stop strings and UTF-8 completion) and sends what it
 * produces. Invariants: every fed byte ends up in exactly one
 * place of the answer (content, a call's name or arguments) except the tool-call markers and
 * fences; stream output is the same answer as the non-stream body, cut into events; a stream's
 * first event goes out on the first feed (it carries the usage the front's verdict reads); the
 * finish reason says "tool_calls"/"tool_use" only when a call was made and not cut by max_tokens. */
#ifndef PDB_DEC_REPLY_H
#define PDB_DEC_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_openai.h"
#include "pdb_status.h"

typedef enum pdb_dec_reply_api { PDB_DEC_REPLY_OPENAI = 1, PDB_DEC_REPLY_ANTHROPIC = 2 } pdb_dec_reply_api;

typedef struct pdb_dec_reply_opts {
    pdb_dec_reply_api api;
    int stream;
    pdb_openai_meta meta;        /* id (also the stem of the call ids), created, model: copied */
    int parse_tools;             /* the text is parsed for DeepSeek tool calls (pdb_tools) */
    const char *forced_name;     /* a forced call: generation starts inside its arguments */
    int forced_any;              /* a call forced among several tools: generation starts at its name */
    int single_call;             /* the answer ends after its first call */
    int include_usage, continuous_usage, return_token_ids; /* OpenAI: as in the request */
    int logprobs;                /* OpenAI: choices carry the tokens' log-probabilities (fed beside the ids) */
    int index;                   /* OpenAI: the choice this composer answers (n > 1: one composer per choice) */
} pdb_dec_reply_opts;

typedef struct pdb_dec_reply pdb_dec_reply;

pdb_status pdb_dec_reply_new(const pdb_dec_reply_opts *o, pdb_dec_reply **out);
void pdb_dec_reply_free(pdb_dec_reply *r);

/* Final text, the ids generated since the last feed (and their log-probabilities, [n_ids] or
 * NULL), the usage so far. Returns 1 when the answer is complete (the calls block ended, or the
 * first call with single_call: stop generating), -1 when out of memory, else 0. */
int pdb_dec_reply_feed(pdb_dec_reply *r, const char *text, size_t len, const int32_t *ids, const pdb_openai_logprob *lps,
                       int64_t n_ids, const pdb_openai_usage *u);

typedef struct pdb_dec_reply_end {
    int length;                  /* max_tokens (or the forced-call bound) was reached */
    int bound;                   /* ...and it was the server's bound on a forced call's arguments */
    const char *stop_sequence;   /* the stop string that ended the generation, NULL */
    pdb_openai_usage usage;
    const int32_t *all_ids;      /* non-stream return_token_ids: every generated id */
    const pdb_openai_logprob *all_logprobs; /* non-stream logprobs: [n_all_ids] (NULL: none) */
    int64_t n_all_ids;
    int not_last;                /* OpenAI stream: other choices still run (no usage, no [DONE] after this one) */
    int no_body;                 /* OpenAI non-stream: keep the choice (pdb_dec_reply_result), build no body */
} pdb_dec_reply_end;

/* The end: a stream's final events, or the whole body. */
pdb_status pdb_dec_reply_finish(pdb_dec_reply *r, const pdb_dec_reply_end *e);
/* OpenAI non-stream, after finish: the choice (its content, tool_calls, finish reason, ids and
 * log-probabilities), for a body of several choices; valid until the composer is freed. */
const pdb_openai_result *pdb_dec_reply_result(const pdb_dec_reply *r);
/* The bytes produced since the last take (NULL when none); the caller frees them. */
char *pdb_dec_reply_take(pdb_dec_reply *r, size_t *len);
/* The finish reason in the API's words (after finish). */
const char *pdb_dec_reply_reason(const pdb_dec_reply *r);

#endif
