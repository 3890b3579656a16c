/* pdb_limits: every size and time limit of the three servers (front, decode-server,
 * prefill-server), derived in one place from the served window and the block size, and the
 * checks that a configured value can serve a full window. Invariants: pdb_limits_derive is a
 * pure function of its inputs (no I/O), every derived limit is non-decreasing in the window; a
 * check that fails names the flag, its value and what a full window needs; the request rule
 * (pdb_limits_check_request) is the one used by the decoder and the front, so both refuse the
 * same prompts with the same 400. Rates and per-token byte budgets are the documented constants
 * below (docs/limits.md section 3, docs/decisions.md D27). */
#ifndef PDB_LIMITS_H
#define PDB_LIMITS_H

#include <jansson.h>
#include <stdint.h>

#include "pdb_openai.h"
#include "pdb_status.h"

/* Request body: text is budgeted at this many bytes per token of the window (measured: 4.06 B
 * per token for Python source with the DeepSeek-V3 tokenizer, 6 B per \uXXXX-escaped character,
 * 12 B per escaped astral character); token ids at their JSON size with a ", " separator. */
#define PDB_LIMITS_TEXT_BYTES_PER_TOKEN 16u
/* JSON fields besides the prompt: the least a body bound must leave (model name, sampling
 * fields, 4 stop strings of 256 B as \uXXXX escapes = 6 KiB, framing), and the default's
 * margin (chat roles and framing of many messages). */
#define PDB_LIMITS_BODY_FIELDS ((uint64_t)8 << 10)
#define PDB_LIMITS_BODY_OVERHEAD ((uint64_t)64 << 10)
/* The default body bound never goes below this (small windows keep a comfortable bound). */
#define PDB_LIMITS_MIN_BODY ((uint64_t)1 << 20)
/* Bound on a block file's JSON header plus its 8-byte length (measured: 1,2xx B for V4's 8
 * pools; 64 pools with 64-byte names stay under it). */
#define PDB_LIMITS_BLOCK_HEADER_BYTES 4096u
/* A prefill segment on the wire / in the spill: 40-byte frame prefix + the block's pool bytes;
 * a spill file adds a 72-byte head (pdb_spool.h PDB_SPOOL_FILE_HEAD). */
#define PDB_LIMITS_SEGMENT_OVERHEAD (40u + 72u)
/* Timeouts: the slowest end-to-end prefill rate a full window must still finish at (tokens/s),
 * and the floor every timeout keeps (the old constant). */
#define PDB_LIMITS_MIN_TOKENS_PER_S 250
#define PDB_LIMITS_MIN_TIMEOUT_MS 600000
/* /v1/completions' default max_tokens when the request has none (OpenAI's); chat's default is
 * the rest of the window. */
#define PDB_LIMITS_COMPLETION_DEFAULT_TOKENS 16

typedef struct pdb_limits_in {
    int64_t model_window;   /* the checkpoint's max_position_embeddings (>= 2) */
    int64_t max_context;    /* --max-context: 0 = the model's window; must be 2..model_window */
    int64_t block_size;     /* tokens per store block (>= 1) */
    int64_t vocab_size;     /* >= 1 */
    uint64_t block_bytes;   /* pool bytes of one block (pdb_store_layout_block_bytes), >= 1 */
} pdb_limits_in;

typedef struct pdb_limits {
    int64_t model_window;        /* as given */
    int64_t window;              /* the served window: positions of prompt + generation */
    int64_t block_size, vocab_size;
    int64_t max_prompt_tokens;   /* window - 1: one position must remain to generate */
    int64_t prefill_max_tokens;  /* the prefill server's longest token_ids (= window) */
    uint64_t id_json_bytes;      /* bytes of one token id in a JSON array, ", " included */
    uint64_t min_body_bytes;     /* a full window of token ids + BODY_FIELDS: the least a body bound may be */
    uint64_t max_body_bytes;     /* the default bound: max(window x text budget, ids) + overhead, >= MIN_BODY */
    int64_t window_blocks;       /* full blocks of a longest prompt: (window - 1) / block_size */
    uint64_t block_file_bytes;   /* one block file: pools + tokens + header bound */
    uint64_t window_store_bytes; /* window_blocks x block_file_bytes: the store must hold this */
    uint64_t segment_bytes;      /* one prefill segment (frame or spill file) */
    uint64_t window_spill_bytes; /* window_blocks x segment_bytes: a spill holding a whole transfer */
    int64_t prefill_timeout_ms;  /* front's bridge budget: max(floor, window / MIN_TOKENS_PER_S) */
    int64_t decoder_timeout_ms;  /* front's decoder call: a native prefill of the window + generating it */
    int64_t http_idle_timeout_s; /* every server's HTTP idle timeout: the longest silence on a connection
                                  * (a streamed answer's headers, then a native prefill of the window
                                  * before its first byte) = decoder_timeout_ms in seconds */
} pdb_limits;

/* Derive every limit. PDB_INVALID naming the field when an input is out of range (a
 * max_context above the model's window names both numbers). */
pdb_status pdb_limits_derive(const pdb_limits_in *in, pdb_limits *out);

/* Coherence at start: PDB_INVALID unless value (of the named flag) can serve a full window:
 * body bound >= min_body_bytes; store cap (0 = unlimited) >= window_store_bytes; a token bound
 * (prefill --max-tokens) >= window. The message names the flag, its value and the need. */
pdb_status pdb_limits_check_body(const pdb_limits *l, const char *flag, uint64_t value);
pdb_status pdb_limits_check_store_cap(const pdb_limits *l, const char *flag, uint64_t value);
pdb_status pdb_limits_check_tokens(const pdb_limits *l, const char *flag, int64_t value);

/* The request rule of decoder and front: the prompt (n_prompt tokens) and an explicit max_tokens
 * fit the window (pdb_openai_check_context), and the default when max_tokens is absent (chat:
 * the rest of the window; completions: PDB_LIMITS_COMPLETION_DEFAULT_TOKENS, refused with 400
 * context_length_exceeded when it does not fit, never clamped). *max_tokens = what to generate. */
pdb_status pdb_limits_check_request(const pdb_limits *l, const pdb_openai_request *q, pdb_openai_kind kind, int64_t n_prompt,
                                    int64_t *max_tokens, pdb_openai_error *err);

/* The limits as a JSON object (the servers' "limits" in /health, compared by doctor). */
json_t *pdb_limits_json(const pdb_limits *l);

#endif
