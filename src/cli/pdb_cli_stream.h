/* pdb_cli_stream: one streamed OpenAI request (completions or chat) at temperature 0, timed, for
 * the demo (`up`) and the benchmarks (`bench-cold`): time to the first text, total time, the
 * answer's text, the usage of the final chunk, the front's verdict from the X-PD-Bridge header
 * and from the final chunk's pd_bridge object. Invariants: the clock starts just before the
 * request is sent and the first-token time is taken when the first non-empty text of the first
 * choice arrives; a call returns PDB_OK exactly when the answer was HTTP 200 and complete (an
 * error event inside the stream is reported in stream_error, not as a failure, so each caller
 * decides); otherwise pdb_err_msg() is "request to URL failed: WHY (HTTP N)". */
#ifndef PDB_CLI_STREAM_H
#define PDB_CLI_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

typedef struct pdb_cli_stream_opts {
    const char *url;     /* the server's base URL (http://HOST:PORT) */
    int chat;            /* 1: /v1/chat/completions with one user message; 0: /v1/completions */
    const char *text;    /* the prompt (or the user message) */
    int max_tokens;
    const char *model;   /* NULL: no "model" field */
    const char *mode;    /* NULL: no X-PD-Bridge-Mode header (the front's auto); else its value */
    const char *bearer;  /* NULL: no Authorization header */
    int ignore_eos;      /* ask the server to generate max_tokens tokens */
    long timeout_ms;     /* the whole request; 0 = 30 minutes */
    /* Called once, when the first text arrives (may be NULL): progress for long prompts. */
    void (*on_first_text)(void *user, double ttft_s);
    void *user;
} pdb_cli_stream_opts;

typedef struct pdb_cli_stream_result {
    int http_status;
    double ttft_s;                 /* 0 when no text came */
    double total_s;
    char verdict[512];             /* the X-PD-Bridge header's value, leading blanks and CRLF removed; "" if none */
    char pd_verdict[512];          /* pd_bridge.verdict of the stream's chunks (the front's final chunk); "" if none */
    char stream_error[256];        /* the message of an error event in the stream; "" if none */
    char *text;                    /* the answer's text, NUL-terminated (never NULL after PDB_OK) */
    size_t len;
    int64_t prompt_tokens, cached_tokens, completion_tokens; /* usage of the last chunk that had one; -1 if none */
    /* private: the parser's state */
    size_t cap, ll;
    double t0;
    int no_memory;
    const pdb_cli_stream_opts *o;
    char line[1 << 16];
} pdb_cli_stream_result;

/* Send the request and wait for its end. *r is always filled; free it with pdb_cli_stream_free. */
pdb_status pdb_cli_stream_request(const pdb_cli_stream_opts *o, pdb_cli_stream_result *r);
void pdb_cli_stream_free(pdb_cli_stream_result *r);

#endif
