/* pdb_limits: the limits of the three servers from the window and the block size (see
 * pdb_limits.h). Every product is checked for overflow: a window too large for 64-bit byte
 * counts is refused, never wrapped. */
#include "pdb_limits.h"

#include <inttypes.h>
#include <string.h>

static uint64_t digits_of(int64_t v) {
    uint64_t d = 1;
    while (v >= 10) { v /= 10; d++; }
    return d;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

pdb_status pdb_limits_derive(const pdb_limits_in *in, pdb_limits *l) {
    memset(l, 0, sizeof *l);
    if (in->model_window < 2) return pdb_err_set(PDB_INVALID, "limits: max_position_embeddings %" PRId64 " is below 2", in->model_window);
    if (in->max_context < 0 || in->max_context == 1)
        return pdb_err_set(PDB_INVALID, "limits: --max-context %" PRId64 " must be 0 (the model's window) or at least 2", in->max_context);
    if (in->max_context > in->model_window)
        return pdb_err_set(PDB_INVALID,
                           "--max-context %" PRId64 " is above the model's window (max_position_embeddings %" PRId64
                           "): the model cannot attend past it; give at most %" PRId64,
                           in->max_context, in->model_window, in->model_window);
    if (in->block_size < 1) return pdb_err_set(PDB_INVALID, "limits: block size %" PRId64 " is below 1", in->block_size);
    if (in->vocab_size < 1) return pdb_err_set(PDB_INVALID, "limits: vocab_size %" PRId64 " is below 1", in->vocab_size);
    if (in->block_bytes < 1) return pdb_err_set(PDB_INVALID, "limits: a block of the layout has no bytes");
    l->model_window = in->model_window;
    l->window = in->max_context ? in->max_context : in->model_window;
    l->block_size = in->block_size;
    l->vocab_size = in->vocab_size;
    l->max_prompt_tokens = l->window - 1;
    l->prefill_max_tokens = l->window;
    l->id_json_bytes = digits_of(in->vocab_size - 1) + 2;
    l->window_blocks = (l->window - 1) / l->block_size;
    uint64_t w = (uint64_t)l->window, ids, text, nb = (uint64_t)l->window_blocks;
    int ovf = __builtin_mul_overflow(w, l->id_json_bytes, &ids) | __builtin_mul_overflow(w, (uint64_t)PDB_LIMITS_TEXT_BYTES_PER_TOKEN, &text);
    l->min_body_bytes = ids + PDB_LIMITS_BODY_FIELDS;
    l->max_body_bytes = max_u64(max_u64(ids, text) + PDB_LIMITS_BODY_OVERHEAD, PDB_LIMITS_MIN_BODY);
    ovf |= __builtin_add_overflow(in->block_bytes, (uint64_t)in->block_size * 4 + PDB_LIMITS_BLOCK_HEADER_BYTES, &l->block_file_bytes);
    ovf |= __builtin_mul_overflow(nb, l->block_file_bytes, &l->window_store_bytes);
    ovf |= __builtin_add_overflow(in->block_bytes, (uint64_t)PDB_LIMITS_SEGMENT_OVERHEAD, &l->segment_bytes);
    ovf |= __builtin_mul_overflow(nb, l->segment_bytes, &l->window_spill_bytes);
    if (ovf || w > (uint64_t)INT64_MAX / 4000)
        return pdb_err_set(PDB_INVALID, "limits: a window of %" PRId64 " tokens overflows 64-bit byte counts", l->window);
    int64_t t = l->window * 1000 / PDB_LIMITS_MIN_TOKENS_PER_S;
    l->prefill_timeout_ms = t > PDB_LIMITS_MIN_TIMEOUT_MS ? t : PDB_LIMITS_MIN_TIMEOUT_MS;
    l->decoder_timeout_ms = 2 * t > PDB_LIMITS_MIN_TIMEOUT_MS ? 2 * t : PDB_LIMITS_MIN_TIMEOUT_MS;
    /* MHD closes a connection silent for its idle timeout, also a stream whose headers went out and
     * whose first byte waits for a long prefill (measured: a 903K-token native prefill cut at 300 s) */
    l->http_idle_timeout_s = (l->decoder_timeout_ms + 999) / 1000;
    return PDB_OK;
}

pdb_status pdb_limits_check_body(const pdb_limits *l, const char *flag, uint64_t value) {
    if (value >= l->min_body_bytes) return PDB_OK;
    return pdb_err_set(PDB_INVALID,
                       "%s %" PRIu64 " cannot hold a full window: %" PRId64 " token ids of up to %" PRIu64
                       " bytes each plus %" PRIu64 " bytes of other fields need %" PRIu64 " bytes (give at least that, or omit it)",
                       flag, value, l->window, l->id_json_bytes, (uint64_t)PDB_LIMITS_BODY_FIELDS, l->min_body_bytes);
}

pdb_status pdb_limits_check_store_cap(const pdb_limits *l, const char *flag, uint64_t value) {
    if (value == 0 || value >= l->window_store_bytes) return PDB_OK;
    return pdb_err_set(PDB_INVALID,
                       "%s %" PRIu64 " cannot hold a full window's blocks: %" PRId64 " blocks of %" PRIu64
                       " bytes (window %" PRId64 ", block size %" PRId64 ") need %" PRIu64
                       " bytes; a smaller cap evicts a prompt's first blocks while its last ones are written",
                       flag, value, l->window_blocks, l->block_file_bytes, l->window, l->block_size, l->window_store_bytes);
}

pdb_status pdb_limits_check_tokens(const pdb_limits *l, const char *flag, int64_t value) {
    if (value == 0 || value >= l->window) return PDB_OK;
    return pdb_err_set(PDB_INVALID, "%s %" PRId64 " is below the served window of %" PRId64
                       " tokens: a full-window prompt would be refused; give at least %" PRId64 " (or --max-context %" PRId64 ")",
                       flag, value, l->window, l->window, value);
}

pdb_status pdb_limits_check_request(const pdb_limits *l, const pdb_openai_request *q, pdb_openai_kind kind, int64_t n_prompt,
                                    int64_t *max_tokens, pdb_openai_error *err) {
    PDB_TRY(pdb_openai_check_context(q, kind, n_prompt, l->window, err));
    if (q->max_tokens >= 0) {
        *max_tokens = q->max_tokens;
        return PDB_OK;
    }
    if (kind == PDB_OPENAI_CHAT) {
        *max_tokens = l->window - n_prompt; /* OpenAI: the rest of the context */
        return PDB_OK;
    }
    *max_tokens = PDB_LIMITS_COMPLETION_DEFAULT_TOKENS;
    if (n_prompt + *max_tokens <= l->window) return PDB_OK;
    return pdb_openai_set_error(err, 400, "max_tokens", "context_length_exceeded",
                                "this model's maximum context length is %lld tokens, but %lld were requested (%lld in the prompt, "
                                "%d to generate: max_tokens was not given and its default is %d); give max_tokens <= %lld",
                                (long long)l->window, (long long)(n_prompt + *max_tokens), (long long)n_prompt,
                                PDB_LIMITS_COMPLETION_DEFAULT_TOKENS, PDB_LIMITS_COMPLETION_DEFAULT_TOKENS,
                                (long long)(l->window - n_prompt));
}

json_t *pdb_limits_json(const pdb_limits *l) {
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "model_window",
                     (json_int_t)l->model_window, "window", (json_int_t)l->window, "block_size", (json_int_t)l->block_size,
                     "max_prompt_tokens", (json_int_t)l->max_prompt_tokens, "prefill_max_tokens", (json_int_t)l->prefill_max_tokens,
                     "min_body_bytes", (json_int_t)l->min_body_bytes, "max_body_bytes", (json_int_t)l->max_body_bytes,
                     "window_blocks", (json_int_t)l->window_blocks, "block_file_bytes", (json_int_t)l->block_file_bytes,
                     "window_store_bytes", (json_int_t)l->window_store_bytes, "segment_bytes", (json_int_t)l->segment_bytes,
                     "window_spill_bytes", (json_int_t)l->window_spill_bytes, "prefill_timeout_ms",
                     (json_int_t)l->prefill_timeout_ms, "decoder_timeout_ms", (json_int_t)l->decoder_timeout_ms,
                     "http_idle_timeout_s", (json_int_t)l->http_idle_timeout_s, "vocab_size", (json_int_t)l->vocab_size);
}
