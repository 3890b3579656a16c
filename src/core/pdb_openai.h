/* pdb_openai: the OpenAI HTTP API as data: request bodies of /v1/completions and
 * /v1/chat/completions parsed and validated into plain structs, and the response bodies, stream
 * chunks and error objects built back. Engine-agnostic (no tokenizer, no model): the decoder
 * server and the front both use it. Invariants: a parse either succeeds with every field in
 * range or fails with an error naming the HTTP status and the offending param; all strings in
 * a parsed request are valid UTF-8 copies; every builder emits valid JSON (invalid UTF-8 in
 * generated text is replaced by U+FFFD, never passed through). */
#ifndef PDB_OPENAI_H
#define PDB_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"
#include "pdb_toolcall.h"

#define PDB_OPENAI_MAX_STOP 4
#define PDB_OPENAI_MAX_STOP_BYTES 256        /* per stop string */
#define PDB_OPENAI_MAX_MESSAGES 4096
#define PDB_OPENAI_MAX_PROMPT_IDS ((int64_t)1 << 24)
#define PDB_OPENAI_MAX_N 16                  /* choices per request (n) */
#define PDB_OPENAI_MAX_TOP_LOGPROBS 20       /* alternatives per position (top_logprobs, legacy logprobs) */
#define PDB_OPENAI_MAX_LOGIT_BIAS 1024       /* entries of logit_bias */

typedef enum pdb_openai_kind { PDB_OPENAI_COMPLETION = 1, PDB_OPENAI_CHAT = 2 } pdb_openai_kind;

typedef struct pdb_openai_error {
    int status;          /* 400, 404, 413, 500 ... */
    const char *type;    /* "invalid_request_error" | "not_found_error" | "server_error" */
    char param[64];      /* "" = null */
    char code[48];       /* "" = null */
    char message[512];
} pdb_openai_error;

typedef struct pdb_openai_message {
    char *role;
    char *content;       /* text parts joined with "\n"; "" when null */
    int content_null;    /* content was null or absent (an assistant message that only calls tools) */
    pdb_tool_call *tool_calls; /* assistant: [n_tool_calls] calls it made (pdb_toolcall) */
    size_t n_tool_calls;
    char *tool_call_id;  /* role "tool": the call it answers, NULL when not given */
} pdb_openai_message;

typedef struct pdb_openai_request {
    pdb_openai_kind kind;
    char *model;                 /* NULL when absent */
    /* completions: exactly one of text / ids */
    int prompt_is_ids;
    char *prompt_text;           /* [prompt_len] UTF-8, NUL-terminated */
    size_t prompt_len;
    int32_t *prompt_ids;         /* [n_prompt_ids], each >= 0 (vocabulary checked by the server) */
    int64_t n_prompt_ids;
    /* chat */
    pdb_openai_message *messages;/* [n_messages] */
    size_t n_messages;
    /* sampling and limits */
    int64_t max_tokens;          /* -1 = not given */
    double temperature;          /* default 1.0 */
    double top_p;                /* default 1.0, in (0, 1] */
    int32_t top_k;               /* 0 = off (-1 accepted as off) */
    int has_seed;
    uint64_t seed;
    char *stop[PDB_OPENAI_MAX_STOP];
    size_t stop_len[PDB_OPENAI_MAX_STOP];
    int n_stop;
    int stream, include_usage, return_token_ids, ignore_eos;
    int continuous_usage;        /* stream_options.continuous_usage_stats (vLLM): usage on every chunk */
    pdb_tool_set tools;          /* chat: tools, tool_choice, parallel_tool_calls (pdb_toolcall) */
    int n;                       /* choices, 1..PDB_OPENAI_MAX_N (default 1) */
    int logprobs;                /* chat: logprobs true; completions: logprobs given (an integer) */
    int top_logprobs;            /* 0..PDB_OPENAI_MAX_TOP_LOGPROBS alternatives per position */
    int echo;                    /* completions: the prompt's text precedes each choice's text */
    double frequency_penalty;    /* [-2, 2], default 0 */
    double presence_penalty;     /* [-2, 2], default 0 */
    int32_t *bias_ids;           /* [n_bias] logit_bias token ids (>= 0; vocabulary checked by the server) */
    float *bias_vals;            /* [n_bias] in [-100, 100] */
    int n_bias;
    int json_object;             /* response_format {"type": "json_object"} */
    char *user;                  /* user / safety_identifier (logged), NULL when absent */
} pdb_openai_request;

/* The request fields the parser knows, one row each (the one list: the parser dispatches on it,
 * docs/api.md's table lists the same names and tests/core/test_openai checks that it does).
 * rule: "honoured" (the answer follows it), "refused" (any non-null value is a 400 naming it),
 * "accepted" (type-checked, no effect on the answer, docs/api.md says why). endpoints: bit 1
 * completions, bit 2 chat (pdb_openai_kind values); a known field sent to the other endpoint is
 * an unknown one there. */
typedef struct pdb_openai_field_info {
    const char *name;
    int endpoints;
    const char *rule;
} pdb_openai_field_info;
/* Row i of the table (NULL past its end). */
const pdb_openai_field_info *pdb_openai_field_at(size_t i);

/* The fields of a chat message (messages[i]), one row each, as the request fields above: rule
 * "honoured", "accepted" or "refused"; roles: the roles it belongs to (bits below; developer
 * counts as system). A key not in the table, or a non-null field on a role it does not belong to,
 * is a 400 naming its path ("messages[2].name"). */
enum { PDB_OPENAI_ROLE_SYSTEM = 1, PDB_OPENAI_ROLE_USER = 2, PDB_OPENAI_ROLE_ASSISTANT = 4, PDB_OPENAI_ROLE_TOOL = 8 };
typedef struct pdb_openai_message_field_info {
    const char *name;
    int roles;
    const char *rule;
} pdb_openai_message_field_info;
/* Row i of the message table (NULL past its end). */
const pdb_openai_message_field_info *pdb_openai_message_field_at(size_t i);

typedef struct pdb_openai_limits {
    int64_t max_context;         /* max_tokens above this is refused; 0 = no check */
} pdb_openai_limits;

/* Parse a request body. On failure returns PDB_INVALID (or PDB_NOMEM) with *err filled (status
 * 400 and param set for bad fields; JSON syntax errors carry line and column) and *req freed. */
pdb_status pdb_openai_parse_request(pdb_openai_kind kind, const char *body, size_t len, const pdb_openai_limits *lim,
                                    pdb_openai_request *req, pdb_openai_error *err);
void pdb_openai_request_free(pdb_openai_request *req);
/* A NUL-terminated malloc copy of s[0..n) (s may hold NULs), or NULL when out of memory: the
 * copy every request parser keeps of the strings it reads (it holds no jansson references). */
char *pdb_openai_dup(const char *s, size_t n);
/* What every request parser shares (OpenAI, Anthropic Messages): *req reset to the defaults with
 * kind, the body parsed as JSON (duplicate keys refused; a syntax error is 400 invalid_json with
 * line and column), fields(root) called on the parsed value (any JSON type: it checks the root's
 * type itself), and on failure *req freed (kind kept). */
typedef pdb_status (*pdb_openai_fields_fn)(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *req,
                                           pdb_openai_error *err);
pdb_status pdb_openai_parse_body(pdb_openai_kind kind, const char *body, size_t len, const pdb_openai_limits *lim,
                                 pdb_openai_fields_fn fields, pdb_openai_request *req, pdb_openai_error *err);

/* Fill *err (returns PDB_INVALID, or PDB_NOT_FOUND for 404, so handlers can `return`). */
/* The first key of object o that is not in allowed (NULL-terminated), or NULL when every key is:
 * the unknown-field check of every request parser (OpenAI tools, Anthropic Messages). */
const char *pdb_openai_unknown_key(json_t *o, const char *const *allowed);
pdb_status pdb_openai_set_error(pdb_openai_error *err, int status, const char *param, const char *code,
                                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The request's model is served? (absent = yes). Else 404 model_not_found naming it. */
pdb_status pdb_openai_check_model(const pdb_openai_request *req, const char *served_id, pdb_openai_error *err);
/* PDB_INVALID (err: 400 context_length_exceeded naming both numbers, param "messages"/"prompt"
 * or "max_tokens") unless a prompt of n_prompt tokens leaves room in a context of `context`
 * positions (at least one position to generate) and an explicit max_tokens fits beside it. The
 * one definition of the rule: the decoder applies it to its context, the front to the served
 * window before it bridges anything. */
pdb_status pdb_openai_check_context(const pdb_openai_request *req, pdb_openai_kind kind, int64_t n_prompt, int64_t context,
                                    pdb_openai_error *err);

/* {"error": {"message", "type", "param", "code"}} as a malloc'd compact JSON string. */
char *pdb_openai_error_json(const pdb_openai_error *err);

typedef struct pdb_openai_usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} pdb_openai_usage;

/* The log-probability of one generated token and its most likely alternatives (log-softmax of
 * the decoder's raw logits at that position, computed in double in index order: pdb_sample.h). */
typedef struct pdb_openai_alt { int32_t id; double logprob; } pdb_openai_alt;
typedef struct pdb_openai_logprob {
    int32_t id;
    double logprob;
    int n_top;                              /* <= PDB_OPENAI_MAX_TOP_LOGPROBS */
    pdb_openai_alt top[PDB_OPENAI_MAX_TOP_LOGPROBS]; /* descending, ties by lowest id */
} pdb_openai_logprob;

/* What one choice produced (text need not be valid UTF-8: it is repaired). */
typedef struct pdb_openai_result {
    int index;                   /* the choice's index (0 .. n-1) */
    const char *text;
    size_t text_len;
    const char *finish_reason;   /* "stop" | "length" | "tool_calls" | NULL (stream chunk before the end) */
    const int32_t *token_ids;    /* NULL = omit "token_ids" */
    int64_t n_token_ids;
    /* chat: the calls of a body (message.tool_calls; content is null when text_len is 0) or the
     * call deltas of a chunk (delta.tool_calls); n_tool_calls 0 = none */
    const pdb_toolcall_out *tool_calls;
    size_t n_tool_calls;
    const pdb_openai_logprob *logprobs; /* [n_logprobs], NULL = "logprobs": null */
    int64_t n_logprobs;
    size_t text_offset;          /* completions: offset in the choice's whole text of this result's text (echo, chunks) */
} pdb_openai_result;

/* The bytes of a token id (NULL = none); NULL function: token-id mode ("token_id:N", no bytes). */
typedef const char *(*pdb_openai_token_bytes_fn)(void *user, int32_t id, size_t *len);

/* Response identity shared by a body and all chunks of one stream. */
typedef struct pdb_openai_meta {
    pdb_openai_kind kind;
    const char *id;              /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;             /* unix seconds */
    const char *model;
    pdb_openai_token_bytes_fn token_bytes; /* names the tokens of logprobs */
    void *token_user;
} pdb_openai_meta;

/* Non-stream body: text_completion or chat.completion with n_res choices and usage. Each key of
 * extra (an object, may be NULL; borrowed) is merged into the top level (e.g. "pd_bridge"). */
pdb_status pdb_openai_build_response(const pdb_openai_meta *m, const pdb_openai_result *res, int n_res, const pdb_openai_usage *u,
                                     const json_t *extra, char **out, size_t *out_len);

/* One SSE event "data: {...}\n\n" with a text_completion / chat.completion.chunk holding one
 * choice (res->index). first: chat chunks carry delta.role = "assistant". usage (may be NULL)
 * and extra (may be NULL) go into this chunk: pass them on the final one. */
pdb_status pdb_openai_build_chunk(const pdb_openai_meta *m, const pdb_openai_result *res, int first,
                                  const pdb_openai_usage *u, const json_t *extra, char **out, size_t *out_len);
/* An error inside a stream: "data: {"error": {...}}\n\n". */
pdb_status pdb_openai_build_error_chunk(const pdb_openai_error *err, char **out, size_t *out_len);
#define PDB_OPENAI_SSE_DONE "data: [DONE]\n\n"

/* A JSON string from bytes that may hold invalid UTF-8 (each bad byte becomes U+FFFD). */
json_t *pdb_openai_json_text(const char *s, size_t len);
/* Length of the longest prefix of s[len] that does not end inside an incomplete but possibly
 * valid UTF-8 sequence (for streaming: hold the rest back until more bytes arrive). */
size_t pdb_openai_utf8_complete_prefix(const char *s, size_t len);

#endif
