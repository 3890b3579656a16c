/* pdb_dec_server: HTTP endpoints over the decode service (see pdb_dec_server.h).
 * State: one dec_req per generation request, shared by the HTTP side (the handler thread that
 * waits for a non-stream answer, or the SSE stream) and the engine (whose scheduler thread calls
 * dec_on_event); it is reference-counted (engine + HTTP side) and its fields after submit are
 * guarded by its mutex. Invariants: every service call happens inside srv_enter/srv_leave so
 * that stop can close the service only when no handler is using it; no engine callback blocks
 * (stream writes never wait: a client that does not read several MiB is dropped); the scheduler
 * thread never takes a lock held while calling into the service. */
#include "pdb_dec_server.h"
#include "pdb_hash.h"

#include <jansson.h>
#include <libgen.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "pdb_anthropic.h"
#include "pdb_arch.h"
#include "pdb_buf.h"
#include "pdb_clock.h"
#include "pdb_dec_reply.h"
#include "pdb_dec_model.h"
#include "pdb_http.h"
#include "pdb_limits.h"
#include "pdb_proc.h"
#include "pdb_json_mask.h"
#include "pdb_tool_mask.h"
#include "pdb_prompt.h"

#define DEC_MAX_TEXT_BYTES ((size_t)256 << 20) /* generated text of one request */
#define DEC_MAX_STATUS_ROWS 64
/* A forced tool call is generated under pdb_tool_mask (its name among the tools, then its
 * arguments as one JSON object), within this many tokens: the mask closes the object by then
 * (docs/api.md "Forced calls"). */
#define DEC_FORCED_ARG_TOKENS 256
#define DEC_MESSAGES_PATH "/v1/messages"

typedef struct dec_status_row { const char *endpoint; int status; uint64_t n; } dec_status_row;

struct pdb_dec_server {
    pdb_dec_service *svc;
    pdb_tokenizer *tok;      /* NULL = token-id mode */
    pdb_http_server *http;
    char model_id[256];
    char fingerprint[65];
    char tokenizer_sha256[65];  /* of model_dir/tokenizer.json, "" in token-id mode */
    char cache_dir[4096];       /* realpath of the store directory */
    int64_t vocab, context, block_size;
    pdb_limits lim;          /* every limit, from the served window and the block size */
    size_t max_body;         /* the body bound in force (--max-body or lim.max_body_bytes) */
    uint64_t cache_max_bytes;/* the store cap in force (0 = unlimited) */
    int max_batch;           /* the service's: n may not exceed it */
    pdb_json_vocab *json_vocab; /* the tokens' bytes for JSON mode (NULL in token-id mode) */
    int64_t started;
    pthread_mutex_t mu;      /* closing, users */
    pthread_cond_t cv;
    int closing, users;
    pthread_mutex_t mmu;     /* metrics */
    dec_status_row rows[DEC_MAX_STATUS_ROWS];
    int n_rows;
    uint64_t m_prompt, m_cached, m_generated, m_cancelled, m_errors;
    atomic_uint_fast64_t next_req, seed_counter;
};

/* One choice's output, under its request's mu. */
typedef struct dec_choice {
    int32_t *ids;            /* [cap_ids] generated ids */
    pdb_openai_logprob *lp;  /* [cap_ids] their log-probabilities (logprobs requests) */
    int64_t n_ids, cap_ids, ids_sent;
    size_t off_sent;         /* completions: text offset of ids[ids_sent] in the choice's text (echo included) */
    char *text; size_t text_len, text_cap;   /* emitted text (non-stream) */
    char *pend; size_t pend_len, pend_cap;   /* held back bytes */
    int sent_first, stop_matched;
    int stop_index;          /* the stop string that matched (stop_matched) */
    int replied;             /* reply mode: its composer has its end */
    pdb_finish finish;       /* NONE until its final event */
} dec_choice;

typedef struct dec_req {
    pdb_dec_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    uint64_t id;
    pdb_openai_request q;
    pdb_openai_meta meta;
    char id_str[48];
    const char *endpoint;
    double t0; /* pdb_clock_now() at arrival */
    char *echo; size_t echo_len;  /* completions with echo: the prompt's text */
    /* after submit, under mu */
    pdb_http_stream *hs;
    int stream, done, gone;
    dec_choice *ch;          /* [n_ch] */
    int n_ch;
    pdb_finish finish;       /* the request's: an error or cancel of any choice wins */
    char error[256];
    int64_t prompt_tokens, cached_tokens;
    /* answers composed by pdb_dec_reply (chat with tools, /v1/messages), one per choice [n_ch];
     * NULL = plain OpenAI */
    pdb_dec_reply **reply;
    int anthropic;           /* the request came to /v1/messages */
    int forced_bound;        /* max_tokens was lowered to DEC_FORCED_ARG_TOKENS for a forced call */
    pdb_tool_mask *tool_mask;/* a forced call's constraint (the engine reads it until the final event) */
} dec_req;

/* ---- small helpers -------------------------------------------------------------------------- */

static int srv_enter(pdb_dec_server *s) {
    pthread_mutex_lock(&s->mu);
    int ok = !s->closing;
    if (ok) s->users++;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void srv_leave(pdb_dec_server *s) {
    pthread_mutex_lock(&s->mu);
    if (--s->users == 0) pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void dec_count_status(pdb_dec_server *s, const char *endpoint, int status) {
    pthread_mutex_lock(&s->mmu);
    int i = 0;
    for (; i < s->n_rows; i++)
        if (s->rows[i].status == status && !strcmp(s->rows[i].endpoint, endpoint)) break;
    if (i == s->n_rows && s->n_rows < DEC_MAX_STATUS_ROWS) s->rows[s->n_rows++] = (dec_status_row){endpoint, status, 0};
    if (i < s->n_rows) s->rows[i].n++;
    pthread_mutex_unlock(&s->mmu);
}

static void dec_respond_err(pdb_dec_server *s, pdb_http_request *hr, const char *endpoint, const pdb_openai_error *e) {
    char *body = !strcmp(endpoint, DEC_MESSAGES_PATH) ? pdb_anthropic_error_json(e) : pdb_openai_error_json(e);
    if (body) pdb_http_respond(hr, e->status, "application/json", body, strlen(body), NULL, 0);
    else pdb_http_respond_error(hr, e->status, e->type, e->param[0] ? e->param : NULL, NULL, e->message);
    free(body);
    dec_count_status(s, endpoint, e->status);
    PDB_INFO("http %s %s -> %d %s", pdb_http_request_method(hr), endpoint, e->status, e->message);
}

static void dec_respond_json(pdb_dec_server *s, pdb_http_request *hr, const char *endpoint, int status, json_t *j) {
    char *body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!body) {
        pdb_http_respond_error(hr, 500, "server_error", NULL, NULL, "cannot build the response");
        dec_count_status(s, endpoint, 500);
        return;
    }
    pdb_http_respond(hr, status, "application/json", body, strlen(body), NULL, 0);
    free(body);
    dec_count_status(s, endpoint, status);
}

static const char *dec_token_bytes(void *user, int32_t id, size_t *len) {
    const char *b = pdb_tokenizer_token_bytes(user, id, len);
    if (!b) *len = 0;
    return b;
}

/* ---- generation state ----------------------------------------------------------------------- */

static void dec_req_release(dec_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    pdb_openai_request_free(&r->q);
    for (int i = 0; r->reply && i < r->n_ch; i++) pdb_dec_reply_free(r->reply[i]);
    free(r->reply);
    pdb_tool_mask_free(r->tool_mask);
    for (int i = 0; i < r->n_ch; i++) {
        free(r->ch[i].ids);
        free(r->ch[i].lp);
        free(r->ch[i].text);
        free(r->ch[i].pend);
    }
    free(r->ch);
    free(r->echo);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static int dec_grow(char **buf, size_t *cap, size_t need) { return pdb_buf_grow(buf, cap, need, DEC_MAX_TEXT_BYTES); }

static const int32_t dec_no_ids[1] = {0};

/* Tokens generated so far by all of r's choices. mu held. */
static int64_t dec_generated(const dec_req *r) {
    int64_t gen = 0;
    for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_ids;
    return gen;
}

/* Reply mode: feed choice k's final text to its composer and send what it produced. Nonzero to
 * cancel that choice (its answer is complete, the client is gone, no memory). mu held. */
static int dec_emit_reply(dec_req *r, int k, const char *text, size_t len) {
    dec_choice *c = &r->ch[k];
    int64_t new_ids = c->n_ids - c->ids_sent;
    pdb_openai_usage u = {r->prompt_tokens, dec_generated(r), r->cached_tokens};
    int rc = pdb_dec_reply_feed(r->reply[k], text, len, new_ids ? c->ids + c->ids_sent : NULL,
                                new_ids && r->q.logprobs ? c->lp + c->ids_sent : NULL, new_ids, &u);
    c->ids_sent = c->n_ids;
    if (rc < 0) snprintf(r->error, sizeof r->error, "out of memory composing the answer");
    size_t n = 0;
    char *out = pdb_dec_reply_take(r->reply[k], &n);
    if (out && r->stream && r->hs && !r->gone && pdb_http_stream_write(r->hs, out, n, 0) != PDB_OK) r->gone = 1;
    free(out);
    if (r->stream && (!r->hs || r->gone)) return 1;
    return rc != 0;
}

/* Bytes of ids[from, to) of c (text offsets of completions' logprobs). */
static size_t dec_ids_bytes(const dec_req *r, const dec_choice *c, int64_t from, int64_t to) {
    size_t n = 0, l = 0;
    for (int64_t i = from; r->srv->tok && i < to; i++)
        if (pdb_tokenizer_token_bytes(r->srv->tok, c->ids[i], &l)) n += l;
    return n;
}

/* One SSE chunk of choice k; nonzero when the client is gone. mu held. */
static int dec_send_chunk(dec_req *r, int k, const pdb_openai_result *res, const pdb_openai_usage *u) {
    char *chunk = NULL;
    size_t n = 0;
    if (pdb_openai_build_chunk(&r->meta, res, !r->ch[k].sent_first, u, NULL, &chunk, &n) != PDB_OK) return 1;
    pdb_status st = pdb_http_stream_write(r->hs, chunk, n, 0);
    free(chunk);
    r->ch[k].sent_first = 1;
    if (st != PDB_OK) { r->gone = 1; return 1; }
    return 0;
}

/* Send (stream) or keep (non-stream) text of choice k that is final; the chunk also carries the
 * ids (and log-probabilities) generated since the last one. done: the request's last chunk
 * ([DONE] follows). Returns nonzero to cancel. mu held. */
static int dec_emit(dec_req *r, int k, const char *text, size_t len, const char *finish, const pdb_openai_usage *u, int done) {
    if (r->reply) return dec_emit_reply(r, k, text, len);
    dec_choice *c = &r->ch[k];
    if (!r->stream) {
        if (!dec_grow(&c->text, &c->text_cap, c->text_len + len + 1)) {
            snprintf(r->error, sizeof r->error, "generated text exceeds %zu bytes", DEC_MAX_TEXT_BYTES);
            return 1;
        }
        if (len) memcpy(c->text + c->text_len, text, len);
        c->text_len += len;
        return 0;
    }
    if (!r->hs || r->gone) return 1;
    if (!c->sent_first && r->echo_len) { /* echo: the prompt's text is the choice's first chunk */
        pdb_openai_result er = {.index = k, .text = r->echo, .text_len = r->echo_len};
        if (dec_send_chunk(r, k, &er, NULL)) return 1;
    }
    int64_t new_ids = c->n_ids - c->ids_sent;
    int want_ids = r->q.return_token_ids && new_ids > 0;
    int want_lp = r->q.logprobs && new_ids > 0;
    if (!len && !want_ids && !want_lp && !finish && c->sent_first) return 0;
    pdb_openai_result res = {.index = k, .text = text, .text_len = len, .finish_reason = finish,
                             .token_ids = want_ids ? c->ids + c->ids_sent : finish && r->q.return_token_ids ? dec_no_ids : NULL,
                             .n_token_ids = want_ids ? new_ids : 0,
                             .logprobs = want_lp ? c->lp + c->ids_sent : NULL, .n_logprobs = want_lp ? new_ids : 0,
                             .text_offset = c->off_sent};
    int64_t gen = 0;
    for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_ids;
    pdb_openai_usage cu = {r->prompt_tokens, gen, r->cached_tokens};
    if (!u && r->q.continuous_usage) u = &cu; /* vLLM's continuous_usage_stats: usage on every chunk */
    if (dec_send_chunk(r, k, &res, u)) return 1;
    c->off_sent += dec_ids_bytes(r, c, c->ids_sent, c->n_ids);
    c->ids_sent = c->n_ids;
    if (done && pdb_http_stream_write(r->hs, PDB_OPENAI_SSE_DONE, strlen(PDB_OPENAI_SSE_DONE), 0) != PDB_OK) { r->gone = 1; return 1; }
    return 0;
}

/* Earliest occurrence of any stop string in pend, or -1. */
static int64_t dec_find_stop(const dec_req *r, dec_choice *c) {
    int64_t best = -1;
    for (int i = 0; i < r->q.n_stop; i++) {
        const char *p = memmem(c->pend, c->pend_len, r->q.stop[i], r->q.stop_len[i]);
        if (p && (best < 0 || p - c->pend < best)) { best = p - c->pend; c->stop_index = i; }
    }
    return best;
}

/* Bytes at the end of pend that could be the start of a stop string. */
static size_t dec_stop_holdback(const dec_req *r, const dec_choice *c) {
    size_t hold = 0;
    for (int i = 0; i < r->q.n_stop; i++) {
        size_t sl = r->q.stop_len[i];
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= c->pend_len && !memcmp(c->pend + c->pend_len - k, r->q.stop[i], k)) { hold = k; break; }
    }
    return hold;
}

static void dec_pend_shift(dec_choice *c, size_t n) {
    if (n) memmove(c->pend, c->pend + n, c->pend_len - n);
    c->pend_len -= n;
}

/* A generated token of choice ev->choice. mu held. Returns nonzero to cancel that choice (stop
 * string, client gone, limits). */
static int dec_on_token(dec_req *r, const pdb_dec_event *ev) {
    int k = ev->choice;
    dec_choice *c = &r->ch[k];
    int32_t tok = ev->token;
    if (c->n_ids == c->cap_ids) {
        int64_t nc = c->cap_ids ? c->cap_ids * 2 : 64;
        int32_t *ni = realloc(c->ids, sizeof(int32_t) * (size_t)nc);
        if (ni) c->ids = ni;
        pdb_openai_logprob *nl = r->q.logprobs ? realloc(c->lp, sizeof *nl * (size_t)nc) : NULL;
        if (nl) c->lp = nl;
        if (!ni || (r->q.logprobs && !nl)) { snprintf(r->error, sizeof r->error, "out of memory"); return 1; }
        c->cap_ids = nc;
    }
    if (r->q.logprobs) {
        pdb_openai_logprob *lp = &c->lp[c->n_ids];
        lp->id = tok;
        lp->logprob = ev->logprob;
        lp->n_top = ev->n_top < PDB_OPENAI_MAX_TOP_LOGPROBS ? ev->n_top : PDB_OPENAI_MAX_TOP_LOGPROBS;
        for (int i = 0; i < lp->n_top; i++) lp->top[i] = (pdb_openai_alt){ev->top_ids[i], ev->top_lp[i]};
    }
    c->ids[c->n_ids++] = tok;
    pdb_tokenizer *tk = r->srv->tok;
    if (!tk) return dec_emit(r, k, "", 0, NULL, NULL, 0);
    size_t bl = 0;
    const char *b = pdb_tokenizer_token_bytes(tk, tok, &bl);
    if (!b) bl = 0;
    if (!dec_grow(&c->pend, &c->pend_cap, c->pend_len + bl + 1)) { snprintf(r->error, sizeof r->error, "text too long"); return 1; }
    if (bl) memcpy(c->pend + c->pend_len, b, bl);
    c->pend_len += bl;
    int64_t at = dec_find_stop(r, c);
    if (at >= 0) {
        c->stop_matched = 1;
        c->pend_len = (size_t)at; /* the stop string and anything after it are dropped; the final
                                   * event flushes what is left (stream: with finish_reason) */
        return 1;
    }
    size_t safe = c->pend_len - dec_stop_holdback(r, c);
    safe = pdb_openai_utf8_complete_prefix(c->pend, safe);
    if (!safe && !(r->stream && (r->q.return_token_ids || r->q.logprobs || r->reply))) return r->stream && r->gone;
    int cancel = dec_emit(r, k, c->pend, safe, NULL, NULL, 0);
    dec_pend_shift(c, safe);
    return cancel;
}

static const char *dec_finish_str(pdb_finish f) {
    switch (f) {
    case PDB_FINISH_LENGTH: return "length";
    case PDB_FINISH_STOP: return "stop";
    case PDB_FINISH_ERROR: return "error";
    case PDB_FINISH_CANCELLED: return "cancelled";
    default: return "none";
    }
}

/* Reply mode, choice k's finished generation: the rest of its text and its end go to its composer
 * (a stream sends its final events, [DONE] after the request's last; a non-stream body, or the
 * choice of a body of several, waits in the composer for dec_gen_respond). last: the request's
 * last choice to end, every choice having ended well. */
static void dec_reply_end(dec_req *r, int k, int last) {
    dec_choice *c = &r->ch[k];
    if (c->pend_len) dec_emit_reply(r, k, c->pend, c->pend_len);
    pdb_dec_reply_end e = {.length = c->finish == PDB_FINISH_LENGTH, .bound = c->finish == PDB_FINISH_LENGTH && r->forced_bound,
                           .stop_sequence = c->stop_matched ? r->q.stop[c->stop_index] : NULL,
                           .usage = {r->prompt_tokens, dec_generated(r), r->cached_tokens}, .all_ids = c->ids,
                           .all_logprobs = r->q.logprobs ? c->lp : NULL, .n_all_ids = c->n_ids, .not_last = !last,
                           .no_body = r->n_ch > 1};
    if (pdb_dec_reply_finish(r->reply[k], &e) != PDB_OK) {
        r->finish = PDB_FINISH_ERROR;
        snprintf(r->error, sizeof r->error, "%s", pdb_err_msg());
    }
    if (!r->stream) return;
    size_t n = 0;
    char *out = pdb_dec_reply_take(r->reply[k], &n);
    if (out && r->hs && !r->gone) pdb_http_stream_write(r->hs, out, n, 0);
    free(out);
}

/* An error event inside a stream: the Messages API's `event: error` or OpenAI's error chunk. */
static void dec_stream_error(dec_req *r, const pdb_openai_error *e) {
    char *chunk = NULL;
    size_t n = 0;
    if (r->anthropic) {
        pdb_anthropic_sse b = {0};
        pdb_anthropic_sse_error(&b, e);
        if (!b.oom) pdb_http_stream_write(r->hs, b.p, b.len, 0);
        pdb_anthropic_sse_free(&b);
    } else if (pdb_openai_build_error_chunk(e, &chunk, &n) == PDB_OK) {
        pdb_http_stream_write(r->hs, chunk, n, 0);
    }
    free(chunk);
}

/* The final event of one choice; the request's last (ev->last) closes the stream and counts. */
static void dec_on_final(dec_req *r, const pdb_dec_event *ev) {
    pdb_dec_server *s = r->srv;
    int k = ev->choice;
    dec_choice *c = &r->ch[k];
    c->finish = ev->finish;
    if (r->error[0] && ev->finish != PDB_FINISH_ERROR) c->finish = PDB_FINISH_ERROR;
    if (ev->finish == PDB_FINISH_ERROR) snprintf(r->error, sizeof r->error, "%s", ev->error ? ev->error : "engine error");
    if (c->finish == PDB_FINISH_ERROR || (c->finish == PDB_FINISH_CANCELLED && r->finish != PDB_FINISH_ERROR)) r->finish = c->finish;
    else if (r->finish == PDB_FINISH_NONE && ev->last) r->finish = c->finish;
    r->prompt_tokens = ev->prompt_tokens;
    r->cached_tokens = ev->cached_tokens;
    if (ev->last) /* choices that never started (the first one ended before its prefill did) end as it did */
        for (int i = 0; i < r->n_ch; i++)
            if (r->ch[i].finish == PDB_FINISH_NONE) r->ch[i].finish = c->finish;
    if (r->reply) { /* each choice ends in its composer; the request's last event closes the stream */
        int c_ok = c->finish == PDB_FINISH_LENGTH || c->finish == PDB_FINISH_STOP;
        int r_ok = r->finish == PDB_FINISH_NONE || r->finish == PDB_FINISH_LENGTH || r->finish == PDB_FINISH_STOP;
        if (c_ok && r_ok && (!r->stream || r->hs)) {
            for (int i = 0; ev->last && i < r->n_ch; i++) /* choices that never started (max_tokens 0) end empty */
                if (i != k && !r->ch[i].replied) {
                    dec_reply_end(r, i, 0);
                    r->ch[i].replied = 1;
                    r->ch[i].pend_len = 0;
                }
            dec_reply_end(r, k, ev->last);
            c->replied = 1;
            c->pend_len = 0;
        }
        if (ev->last && r->stream && r->hs) {
            if (r->finish != PDB_FINISH_LENGTH && r->finish != PDB_FINISH_STOP && !r->gone) {
                pdb_openai_error e;
                if (r->finish == PDB_FINISH_ERROR) pdb_openai_set_error(&e, 500, NULL, "engine_error", "%s", r->error);
                else pdb_openai_set_error(&e, 503, NULL, "cancelled", "the request was cancelled (server shutting down)");
                dec_stream_error(r, &e);
            }
            pdb_http_stream_close(r->hs);
            r->hs = NULL;
        }
    }
    int ok = c->finish == PDB_FINISH_LENGTH || c->finish == PDB_FINISH_STOP;
    int all_ok = ev->last && (r->finish == PDB_FINISH_LENGTH || r->finish == PDB_FINISH_STOP);
    if (r->reply) {
        /* answered above */
    } else if (r->stream && r->hs) {
        int64_t gen = 0;
        for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_ids;
        pdb_openai_usage u = {r->prompt_tokens, gen, r->cached_tokens};
        if (ok) dec_emit(r, k, c->pend, c->pend_len, dec_finish_str(c->finish),
                         all_ok && (r->q.include_usage || r->q.continuous_usage) ? &u : NULL, all_ok);
        if (ev->last && !all_ok && !r->gone) { /* engine error, or cancelled by a server stop: say so in the stream */
            pdb_openai_error e;
            if (r->finish == PDB_FINISH_ERROR) pdb_openai_set_error(&e, 500, NULL, "engine_error", "%s", r->error);
            else pdb_openai_set_error(&e, 503, NULL, "cancelled", "the request was cancelled (server shutting down)");
            dec_stream_error(r, &e);
        }
        if (ev->last) {
            pdb_http_stream_close(r->hs);
            r->hs = NULL;
        }
    } else if (!r->stream) {
        dec_emit(r, k, c->pend, c->pend_len, NULL, NULL, 0);
    }
    c->pend_len = 0;
    if (!ev->last) return;
    int64_t gen = 0;
    for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_ids;
    pthread_mutex_lock(&s->mmu);
    s->m_prompt += (uint64_t)r->prompt_tokens;
    s->m_cached += (uint64_t)r->cached_tokens;
    s->m_generated += (uint64_t)gen;
    if (r->finish == PDB_FINISH_CANCELLED || r->gone) s->m_cancelled++;
    if (r->finish == PDB_FINISH_ERROR) s->m_errors++;
    pthread_mutex_unlock(&s->mmu);
    if (r->stream)
        PDB_INFO("req %s %s stream prompt=%lld cached=%lld generated=%lld n=%d finish=%s%s%s%s ms=%.1f", r->id_str, r->endpoint,
                 (long long)r->prompt_tokens, (long long)r->cached_tokens, (long long)gen, r->n_ch, dec_finish_str(r->finish),
                 r->gone ? " (client gone)" : "", r->q.user ? " user=" : "", r->q.user ? r->q.user : "", (pdb_clock_now() - r->t0) * 1e3);
}

static int dec_on_event(void *user, const pdb_dec_event *ev) {
    dec_req *r = user;
    pthread_mutex_lock(&r->mu);
    if (ev->finish == PDB_FINISH_NONE) {
        r->prompt_tokens = ev->prompt_tokens;
        r->cached_tokens = ev->cached_tokens;
        int c = dec_on_token(r, ev);
        pthread_mutex_unlock(&r->mu);
        return c;
    }
    dec_on_final(r, ev);
    if (!ev->last) {
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    dec_req_release(r); /* the engine's reference */
    return 0;
}

static void dec_stream_gone(void *user) {
    dec_req *r = user;
    pdb_dec_server *s = r->srv;
    pthread_mutex_lock(&r->mu);
    r->gone = 1;
    int done = r->done;
    uint64_t id = r->id;
    pthread_mutex_unlock(&r->mu);
    if (!done && srv_enter(s)) {
        pdb_dec_service_cancel(s->svc, id);
        srv_leave(s);
    }
}

static void dec_stream_release(void *user) { dec_req_release(user); }

/* ---- generation endpoints ------------------------------------------------------------------- */

/* A request record for endpoint, holding the handler's reference; NULL when out of memory. */
static dec_req *dec_req_new(pdb_dec_server *s, const char *endpoint) {
    dec_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->endpoint = endpoint;
    r->t0 = pdb_clock_now();
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    atomic_init(&r->refs, 1);
    return r;
}

/* Parse: the body into r->q (for this server's model) and the prompt's token ids; 0, or -1 with e set. */
static int dec_gen_parse(pdb_dec_server *s, pdb_http_request *hr, pdb_openai_kind kind, dec_req *r, int32_t **ids,
                         int64_t *n_ids, pdb_openai_error *e) {
    pdb_openai_limits lim = {.max_context = s->context};
    pdb_status ps = r->anthropic ? pdb_anthropic_parse_request(pdb_http_request_body(hr), pdb_http_request_body_len(hr), &lim, &r->q, e)
                                 : pdb_openai_parse_request(kind, pdb_http_request_body(hr), pdb_http_request_body_len(hr), &lim, &r->q, e);
    if (ps != PDB_OK ||
        pdb_openai_check_model(&r->q, s->model_id, e) != PDB_OK || pdb_prompt_encode_request(s->tok, &r->q, ids, n_ids, e) != PDB_OK)
        return -1;
    return 0;
}

/* Validate: what this server can run (stop strings and JSON mode need a tokenizer; ids and
 * logit_bias in the vocabulary; n within the batch; prompt and generation within the context)
 * and the tokens to generate (*mt); 0, or -1 with e set. */
static int dec_gen_check(const pdb_dec_server *s, const pdb_openai_request *q, pdb_openai_kind kind, const int32_t *ids,
                         int64_t n_ids, int64_t *mt, pdb_openai_error *e) {
    const char *pparam = kind == PDB_OPENAI_CHAT ? "messages" : "prompt";
    if (!s->tok && q->n_stop) {
        pdb_openai_set_error(e, 400, "stop", "no_tokenizer", "stop strings need a tokenizer; this model is served in token-id mode");
        return -1;
    }
    if (!s->tok && q->json_object) {
        pdb_openai_set_error(e, 400, "response_format", "no_tokenizer", "json_object needs a tokenizer (the tokens' bytes); this model is served in token-id mode");
        return -1;
    }
    if (q->json_object && q->n_stop) {
        pdb_openai_set_error(e, 400, "stop", "unsupported_value", "stop strings with json_object could cut the object short: send one or the other");
        return -1;
    }
    if (q->json_object && q->max_tokens >= 0 && q->max_tokens < 2) {
        pdb_openai_set_error(e, 400, "max_tokens", "invalid_value", "json_object needs max_tokens >= 2 (the shortest object, {}, may take two tokens)");
        return -1;
    }
    if (q->n > s->max_batch) {
        pdb_openai_set_error(e, 400, "n", "invalid_value", "'n' is %d; this decoder runs at most %d sequences at once (--max-batch)", q->n,
                             s->max_batch);
        return -1;
    }
    for (int i = 0; i < q->n_bias; i++)
        if (q->bias_ids[i] >= s->vocab) {
            pdb_openai_set_error(e, 400, "logit_bias", "invalid_token_id", "'logit_bias' token id %d is outside the vocabulary (0..%lld)",
                                 q->bias_ids[i], (long long)s->vocab - 1);
            return -1;
        }
    if (n_ids == 0) { pdb_openai_set_error(e, 400, pparam, "invalid_value", "the prompt has no tokens"); return -1; }
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= s->vocab) {
            pdb_openai_set_error(e, 400, pparam, "invalid_token_id", "prompt token id %d at index %lld is outside the vocabulary (0..%lld)",
                                 ids[i], (long long)i, (long long)s->vocab - 1);
            return -1;
        }
    /* the window, and max_tokens (absent: chat gets the rest of the window, completions 16 or a 400) */
    if (pdb_limits_check_request(&s->lim, q, kind, n_ids, mt, e)) return -1;
    return 0;
}

/* JSON mode through the service's mask hook (pdb_json_mask over the server's vocabulary). */
static int dec_json_mask(void *user, void *state, float *logits, int64_t n_vocab, int64_t budget) {
    return (int)pdb_json_mask_apply(user, state, logits, n_vocab, budget);
}
static void dec_json_advance(void *user, void *state, int32_t tok) { (void)pdb_json_mask_advance(user, state, tok); }
static void dec_json_init(void *user, void *state) { (void)user; pdb_json_state_init(state); }
static int dec_json_done(void *user, void *state) { (void)user; return pdb_json_state_complete(state); }
/* A forced tool call through the same hook (pdb_tool_mask: the name, then the arguments). */
static int dec_tool_mask(void *user, void *state, float *logits, int64_t n_vocab, int64_t budget) {
    return (int)pdb_tool_mask_apply(user, state, logits, n_vocab, budget);
}
static void dec_tool_advance(void *user, void *state, int32_t tok) { (void)pdb_tool_mask_advance(user, state, tok); }
static void dec_tool_init(void *user, void *state) { pdb_tool_mask_state_init(user, state); }
static int dec_tool_done(void *user, void *state) { (void)user; return pdb_tool_mask_done(state); }

/* The engine request for r (its id string, response metadata and choices set here; the seed
 * drawn when the request has none). 0, or -1 when out of memory. */
static int dec_gen_request(pdb_dec_server *s, dec_req *r, pdb_openai_kind kind, const int32_t *ids, int64_t n_ids, int64_t mt,
                           pdb_dec_request *dq) {
    r->stream = r->q.stream;
    r->n_ch = r->q.n > 0 ? r->q.n : 1;
    r->ch = calloc((size_t)r->n_ch, sizeof *r->ch);
    if (!r->ch) return -1;
    if (r->q.echo) {
        if (!r->q.prompt_is_ids) {
            r->echo = malloc(r->q.prompt_len + 1);
            if (!r->echo) return -1;
            memcpy(r->echo, r->q.prompt_text, r->q.prompt_len);
            r->echo_len = r->q.prompt_len;
        } else if (s->tok && pdb_tokenizer_decode(s->tok, ids, n_ids, &r->echo, &r->echo_len) != PDB_OK) {
            return -1;
        }
        for (int k = 0; k < r->n_ch; k++) {
            r->ch[k].off_sent = r->echo_len;
            if (!r->stream && r->echo_len) { /* the choice's text starts with the prompt */
                if (!dec_grow(&r->ch[k].text, &r->ch[k].text_cap, r->echo_len + 1)) return -1;
                memcpy(r->ch[k].text, r->echo, r->echo_len);
                r->ch[k].text_len = r->echo_len;
            }
        }
    }
    uint64_t num = atomic_fetch_add(&s->next_req, 1) + 1;
    snprintf(r->id_str, sizeof r->id_str, "%s%llx%06llx", r->anthropic ? "msg_" : kind == PDB_OPENAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)s->started, (unsigned long long)num);
    r->meta = (pdb_openai_meta){kind, r->id_str, (int64_t)time(NULL), s->model_id, s->tok ? dec_token_bytes : NULL, s->tok};
    const char *forced = pdb_toolcall_active(&r->q.tools) ? pdb_toolcall_forced_name(&r->q.tools) : NULL;
    int forced_any = pdb_toolcall_active(&r->q.tools) && pdb_toolcall_forced_any(&r->q.tools);
    if ((forced || forced_any) && mt > DEC_FORCED_ARG_TOKENS) {
        mt = DEC_FORCED_ARG_TOKENS;
        r->forced_bound = 1;
    }
    if (r->anthropic || (kind == PDB_OPENAI_CHAT && pdb_toolcall_active(&r->q.tools))) {
        pdb_dec_reply_opts ro = {.api = r->anthropic ? PDB_DEC_REPLY_ANTHROPIC : PDB_DEC_REPLY_OPENAI, .stream = r->stream,
                                 .meta = r->meta, .parse_tools = pdb_toolcall_active(&r->q.tools), .forced_name = forced,
                                 .forced_any = forced_any,
                                 .single_call = r->q.tools.single_call, .include_usage = r->q.include_usage,
                                 .continuous_usage = r->q.continuous_usage, .return_token_ids = r->q.return_token_ids,
                                 .logprobs = r->q.logprobs};
        r->reply = calloc((size_t)r->n_ch, sizeof *r->reply);
        if (!r->reply) return -1;
        for (int k = 0; k < r->n_ch; k++) {
            ro.index = k;
            if (pdb_dec_reply_new(&ro, &r->reply[k]) != PDB_OK) return -1;
        }
    }
    *dq = (pdb_dec_request){
        .ids = ids, .n_ids = n_ids, .max_tokens = mt, .ignore_eos = r->q.ignore_eos, .on_event = dec_on_event, .user = r,
        .sample = {.temperature = (float)r->q.temperature, .top_p = (float)r->q.top_p, .top_k = r->q.top_k,
                   .seed = r->q.has_seed ? r->q.seed
                                         : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ atomic_fetch_add(&s->seed_counter, 1)},
        .n_choices = r->n_ch, .logprobs = r->q.logprobs, .top_logprobs = r->q.top_logprobs,
        .frequency_penalty = (float)r->q.frequency_penalty, .presence_penalty = (float)r->q.presence_penalty,
        .bias_ids = r->q.bias_ids, .bias_vals = r->q.bias_vals, .n_bias = r->q.n_bias,
    };
    if (r->q.json_object && s->json_vocab) {
        dq->mask = dec_json_mask;
        dq->mask_advance = dec_json_advance;
        dq->mask_init = dec_json_init;
        dq->mask_done = dec_json_done;
        dq->mask_user = s->json_vocab;
        dq->mask_state_bytes = sizeof(pdb_json_state);
    }
    if ((forced || forced_any) && s->json_vocab) { /* JSON mode and tools are exclusive (the parser refuses both) */
        const char *names[PDB_TOOL_MASK_MAX_NAMES];
        size_t n_names = 0;
        for (size_t i = 0; forced_any && i < r->q.tools.n_tools && i < PDB_TOOL_MASK_MAX_NAMES; i++) names[n_names++] = r->q.tools.tools[i].name;
        if (pdb_tool_mask_new(s->json_vocab, names, n_names, &r->tool_mask) != PDB_OK) return -1;
        dq->mask = dec_tool_mask;
        dq->mask_advance = dec_tool_advance;
        dq->mask_init = dec_tool_init;
        dq->mask_done = dec_tool_done;
        dq->mask_user = r->tool_mask;
        dq->mask_state_bytes = sizeof(pdb_tool_mask_state);
    }
    return 0;
}

/* Submit dq to the service (the engine's reference on r) and, for a stream, answer hr with the
 * event stream before any event reaches r (the stream's reference; a stream that cannot be opened
 * cancels the request). 0, or -1 with e set (pparam: the prompt's parameter) and no reference taken. */
static int dec_gen_submit(pdb_dec_server *s, pdb_http_request *hr, dec_req *r, const pdb_dec_request *dq, const char *pparam,
                          pdb_openai_error *e) {
    if (!srv_enter(s)) {
        pdb_openai_set_error(e, 503, NULL, "shutting_down", "the server is shutting down");
        return -1;
    }
    atomic_fetch_add(&r->refs, 1); /* the engine's */
    pthread_mutex_lock(&r->mu);    /* events wait until the stream is attached */
    pdb_status st = pdb_dec_service_submit(s->svc, dq, &r->id);
    if (st != PDB_OK) {
        pthread_mutex_unlock(&r->mu);
        srv_leave(s);
        atomic_fetch_sub(&r->refs, 1);
        pdb_openai_set_error(e, st == PDB_NOMEM ? 503 : 400, pparam, st == PDB_TOO_LARGE ? "context_length_exceeded" : NULL, "%s",
                             pdb_err_msg());
        return -1;
    }
    if (r->stream) {
        pdb_http_stream_hooks hooks = {dec_stream_gone, dec_stream_release, r};
        atomic_fetch_add(&r->refs, 1); /* the stream's */
        st = pdb_http_respond_stream(hr, 200, "text/event-stream", NULL, 0, 0, &hooks, &r->hs);
        if (st != PDB_OK) {
            atomic_fetch_sub(&r->refs, 1);
            r->gone = 1;
        }
        pthread_mutex_unlock(&r->mu);
        dec_count_status(s, r->endpoint, st == PDB_OK ? 200 : 500);
        if (st != PDB_OK) pdb_dec_service_cancel(s->svc, r->id);
        srv_leave(s);
        return 0;
    }
    pthread_mutex_unlock(&r->mu);
    srv_leave(s);
    return 0;
}

/* Non-stream: wait for the final event, cancelling if the client leaves (a server stop cancels
 * everything itself). */
static void dec_gen_wait(pdb_dec_server *s, pdb_http_request *hr, dec_req *r) {
    int cancelled = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!r->done && !cancelled && pdb_http_request_client_gone(hr)) {
            cancelled = 1;
            r->gone = 1;
            uint64_t id = r->id;
            pthread_mutex_unlock(&r->mu);
            if (srv_enter(s)) {
                pdb_dec_service_cancel(s->svc, id);
                srv_leave(s);
            }
            pthread_mutex_lock(&r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

/* A built completion body: 200 with it; NULL (building failed): 500 "cannot build the response".
 * Counts and returns the status sent. */
static int dec_respond_body(pdb_dec_server *s, pdb_http_request *hr, const char *endpoint, const char *body, size_t n,
                            pdb_openai_error *e) {
    if (!body) {
        pdb_openai_set_error(e, 500, NULL, NULL, "cannot build the response");
        dec_respond_err(s, hr, endpoint, e);
        return 500;
    }
    pdb_http_respond(hr, 200, "application/json", body, n, NULL, 0);
    dec_count_status(s, endpoint, 200);
    return 200;
}

/* Non-stream: answer hr from the finished r (the completion, or the error its finish means) and log it. */
static void dec_gen_respond(pdb_dec_server *s, pdb_http_request *hr, dec_req *r) {
    const char *endpoint = r->endpoint;
    pdb_openai_error e;
    int status = 200;
    int64_t gen = 0;
    for (int i = 0; i < r->n_ch; i++) gen += r->ch[i].n_ids;
    if (r->reply && (r->finish == PDB_FINISH_LENGTH || r->finish == PDB_FINISH_STOP)) {
        size_t n = 0;
        char *body = NULL;
        if (r->n_ch == 1) {
            body = pdb_dec_reply_take(r->reply[0], &n);
        } else { /* one body of the choices' composers */
            pdb_openai_result res[PDB_OPENAI_MAX_N];
            for (int k = 0; k < r->n_ch && k < PDB_OPENAI_MAX_N; k++) res[k] = *pdb_dec_reply_result(r->reply[k]);
            pdb_openai_usage u = {r->prompt_tokens, gen, r->cached_tokens};
            if (pdb_openai_build_response(&r->meta, res, r->n_ch, &u, NULL, &body, &n) != PDB_OK) body = NULL;
        }
        status = dec_respond_body(s, hr, endpoint, body, n, &e);
        free(body);
    } else if (r->finish == PDB_FINISH_LENGTH || r->finish == PDB_FINISH_STOP) {
        pdb_openai_result res[PDB_OPENAI_MAX_N];
        for (int k = 0; k < r->n_ch && k < PDB_OPENAI_MAX_N; k++) {
            dec_choice *c = &r->ch[k];
            res[k] = (pdb_openai_result){.index = k, .text = c->text, .text_len = c->text_len, .finish_reason = dec_finish_str(c->finish),
                                         .token_ids = r->q.return_token_ids ? (c->ids ? c->ids : dec_no_ids) : NULL,
                                         .n_token_ids = c->n_ids, .logprobs = r->q.logprobs ? c->lp : NULL, .n_logprobs = c->n_ids,
                                         .text_offset = r->echo_len};
            if (r->q.logprobs && !c->lp) res[k].logprobs = (const pdb_openai_logprob *)dec_no_ids, res[k].n_logprobs = 0;
        }
        pdb_openai_usage u = {r->prompt_tokens, gen, r->cached_tokens};
        char *body = NULL;
        size_t n = 0;
        if (pdb_openai_build_response(&r->meta, res, r->n_ch, &u, NULL, &body, &n) != PDB_OK) body = NULL;
        status = dec_respond_body(s, hr, endpoint, body, n, &e);
        free(body);
    } else if (r->finish == PDB_FINISH_CANCELLED) {
        status = 503;
        pdb_openai_set_error(&e, 503, NULL, "cancelled", "the request was cancelled (client gone or server shutting down)");
        dec_respond_err(s, hr, endpoint, &e);
    } else {
        status = 500;
        pdb_openai_set_error(&e, 500, NULL, "engine_error", "%s", r->error[0] ? r->error : "engine error");
        dec_respond_err(s, hr, endpoint, &e);
    }
    PDB_INFO("req %s %s status=%d prompt=%lld cached=%lld generated=%lld n=%d finish=%s%s%s ms=%.1f", r->id_str, endpoint, status,
             (long long)r->prompt_tokens, (long long)r->cached_tokens, (long long)gen, r->n_ch,
             r->reply && status == 200 ? pdb_dec_reply_reason(r->reply[0]) : dec_finish_str(r->finish),
             r->q.user ? " user=" : "", r->q.user ? r->q.user : "", (pdb_clock_now() - r->t0) * 1e3);
}

/* POST /v1/completions and /v1/chat/completions: parse, validate, submit, then (non-stream) wait
 * and respond; a stream is answered by the engine's events. */
static void dec_handle_generate(pdb_dec_server *s, pdb_http_request *hr, pdb_openai_kind kind, const char *endpoint) {
    dec_req *r = dec_req_new(s, endpoint);
    if (!r) { pdb_http_respond_error(hr, 500, "server_error", NULL, NULL, "out of memory"); return; }
    r->anthropic = !strcmp(endpoint, DEC_MESSAGES_PATH);
    pdb_openai_error e;
    int32_t *ids = NULL;
    int64_t n_ids = 0, mt = 0;
    if (dec_gen_parse(s, hr, kind, r, &ids, &n_ids, &e) || dec_gen_check(s, &r->q, kind, ids, n_ids, &mt, &e)) goto bad;
    pdb_dec_request dq;
    if (dec_gen_request(s, r, kind, ids, n_ids, mt, &dq)) {
        pdb_openai_set_error(&e, 503, NULL, NULL, "out of memory");
        goto bad;
    }
    if (dec_gen_submit(s, hr, r, &dq, kind == PDB_OPENAI_CHAT ? "messages" : "prompt", &e)) goto bad;
    free(ids);
    if (!r->stream) {
        dec_gen_wait(s, hr, r);
        dec_gen_respond(s, hr, r);
    }
    dec_req_release(r); /* the handler's */
    return;
bad:
    free(ids);
    dec_respond_err(s, hr, endpoint, &e);
    dec_req_release(r);
}

/* ---- other endpoints ------------------------------------------------------------------------ */

static void dec_handle_models(pdb_dec_server *s, pdb_http_request *hr) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:I, s:{s:s, s:I}}", "id", s->model_id, "object", "model", "created",
                          (json_int_t)s->started, "owned_by", "pdbridge", "max_model_len", (json_int_t)s->context, "pdbridge",
                          "fingerprint", s->fingerprint, "block_size", (json_int_t)s->block_size);
    dec_respond_json(s, hr, "/v1/models", 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

static void dec_handle_health(pdb_dec_server *s, pdb_http_request *hr) {
    json_t *lim = pdb_limits_json(&s->lim);
    pdb_dec_stats st;
    memset(&st, 0, sizeof st);
    if (srv_enter(s)) {
        pdb_dec_service_stats(s->svc, &st);
        srv_leave(s);
    }
    /* what is in force beside the derived numbers (doctor compares them) */
    json_object_set_new(lim, "max_body", json_integer((json_int_t)s->max_body));
    json_object_set_new(lim, "cache_max_bytes", json_integer((json_int_t)s->cache_max_bytes));
    if (st.store_disk_free_bytes != UINT64_MAX)
        json_object_set_new(lim, "store_disk_bytes", json_integer((json_int_t)(st.store_bytes + st.store_disk_free_bytes)));
    dec_respond_json(s, hr, "/health", 200,
                     json_pack("{s:s, s:s, s:s, s:s, s:b, s:s, s:s, s:I, s:o}", "status", "ok", "role", "decoder", "fingerprint",
                               s->fingerprint, "model", s->model_id, "tokenizer", s->tok != NULL, "tokenizer_sha256",
                               s->tokenizer_sha256, "cache_dir", s->cache_dir, "block_size", (json_int_t)s->block_size, "limits",
                               lim));
}

static void dec_metric(char **buf, size_t *len, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void dec_metric(char **buf, size_t *len, size_t cap, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap;
}

static void dec_handle_metrics(pdb_dec_server *s, pdb_http_request *hr) {
    pdb_dec_stats st;
    memset(&st, 0, sizeof st);
    if (srv_enter(s)) {
        pdb_dec_service_stats(s->svc, &st);
        srv_leave(s);
    }
    enum { CAP = 16384 };
    char *b = malloc(CAP);
    if (!b) { pdb_http_respond_error(hr, 500, "server_error", NULL, NULL, "out of memory"); return; }
    size_t n = 0;
    dec_count_status(s, "/metrics", 200); /* this request counts itself */
    pthread_mutex_lock(&s->mmu);
    dec_metric(&b, &n, CAP, "# HELP pdb_dec_http_requests_total HTTP requests answered, by endpoint and status.\n"
                            "# TYPE pdb_dec_http_requests_total counter\n");
    for (int i = 0; i < s->n_rows; i++)
        dec_metric(&b, &n, CAP, "pdb_dec_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", s->rows[i].endpoint,
                   s->rows[i].status, (unsigned long long)s->rows[i].n);
    const struct { const char *name, *help; uint64_t v; } ctr[] = {
        {"pdb_dec_prompt_tokens_total", "Prompt tokens of finished requests.", s->m_prompt},
        {"pdb_dec_cached_tokens_total", "Prompt tokens served from the prefix-cache store.", s->m_cached},
        {"pdb_dec_prefill_tokens_total", "Prompt tokens run through the model (neither mounted nor copied).", st.prefill_tokens},
        {"pdb_dec_generated_tokens_total", "Tokens generated for finished requests.", s->m_generated},
        {"pdb_dec_requests_cancelled_total", "Requests cancelled (client gone or shutdown).", s->m_cancelled},
        {"pdb_dec_requests_failed_total", "Requests that ended with an engine error.", s->m_errors},
        {"pdb_dec_engine_requests_total", "Requests accepted by the engine.", st.requests},
        {"pdb_dec_store_blocks_written_total", "Blocks written to the store.", st.store_blocks_written},
        {"pdb_dec_store_hits_total", "Store block lookups that hit.", st.store_hits},
        {"pdb_dec_store_misses_total", "Store block lookups that missed.", st.store_misses},
        {"pdb_dec_store_corrupt_total", "Store blocks found corrupt and removed.", st.store_corrupt},
    };
    pthread_mutex_unlock(&s->mmu);
    for (size_t i = 0; i < sizeof ctr / sizeof ctr[0]; i++)
        dec_metric(&b, &n, CAP, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", ctr[i].name, ctr[i].help, ctr[i].name, ctr[i].name,
                   (unsigned long long)ctr[i].v);
    dec_metric(&b, &n, CAP, "# HELP pdb_dec_requests_running Sequences in the running batch.\n# TYPE pdb_dec_requests_running gauge\n"
                            "pdb_dec_requests_running %llu\n", (unsigned long long)st.running);
    dec_metric(&b, &n, CAP, "# HELP pdb_dec_requests_queued Requests waiting to start.\n# TYPE pdb_dec_requests_queued gauge\n"
                            "pdb_dec_requests_queued %llu\n", (unsigned long long)st.queued);
    if (n < CAP) n += pdb_proc_metrics_text(b + n, CAP - n);
    pdb_http_respond(hr, 200, "text/plain; version=0.0.4", b, n, NULL, 0);
    free(b);
}

static void dec_handle(void *user, pdb_http_request *hr) {
    pdb_dec_server *s = user;
    const char *path = pdb_http_request_path(hr), *method = pdb_http_request_method(hr);
    static const struct { const char *path, *method; } routes[] = {
        {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"}, {"/health", "GET"}, {"/metrics", "GET"},
        {DEC_MESSAGES_PATH, "POST"},
    };
    size_t i = 0, nr = sizeof routes / sizeof routes[0];
    for (; i < nr; i++)
        if (!strcmp(path, routes[i].path)) break;
    pdb_openai_error e;
    if (i == nr) {
        pdb_openai_set_error(&e, 404, NULL, "not_found", "no endpoint %.200s (see docs/api.md)", path);
        dec_respond_err(s, hr, "other", &e);
        return;
    }
    if (strcmp(method, routes[i].method) && !(i >= 2 && i <= 4 && !strcmp(method, "HEAD"))) {
        pdb_openai_set_error(&e, 405, NULL, "method_not_allowed", "%.200s takes %s, not %.20s", path, routes[i].method, method);
        dec_respond_err(s, hr, routes[i].path, &e);
        return;
    }
    switch (i) {
    case 0: dec_handle_generate(s, hr, PDB_OPENAI_COMPLETION, routes[0].path); break;
    case 1: dec_handle_generate(s, hr, PDB_OPENAI_CHAT, routes[1].path); break;
    case 2: dec_handle_models(s, hr); break;
    case 3: dec_handle_health(s, hr); break;
    case 4: dec_handle_metrics(s, hr); break;
    default: dec_handle_generate(s, hr, PDB_OPENAI_CHAT, routes[5].path); break;
    }
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

/* What start allocated besides the service and the HTTP server (closed by the caller first). */
static void dec_server_free(pdb_dec_server *s) {
    pdb_json_vocab_free(s->json_vocab);
    pdb_tokenizer_free(s->tok);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mmu);
    free(s);
}

pdb_status pdb_dec_server_start(const pdb_dec_server_opts *o, pdb_dec_server **out) {
    *out = NULL;
    if (!o->svc.model_dir) return pdb_err_set(PDB_INVALID, "decode-server: no model directory");
    pdb_dec_server *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "decode-server");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->mmu, NULL);
    s->started = (int64_t)time(NULL);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", o->svc.model_dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dir[--dl] = 0;
    snprintf(s->model_id, sizeof s->model_id, "%s", basename(dir));
    char tpath[4200];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", o->svc.model_dir);
    struct stat sb;
    pdb_status st = PDB_OK;
    if (stat(tpath, &sb) == 0) {
        st = pdb_tokenizer_load(tpath, &s->tok);
        if (st != PDB_OK) { pdb_err_wrap(st, "decode-server: tokenizer"); goto fail; }
    } else {
        PDB_INFO("decode-server: %s has no tokenizer.json: token-id mode (text prompts are refused)", o->svc.model_dir);
    }
    pdb_dec_service_opts so = o->svc;
    if (!so.block_size) so.block_size = 2048;
    st = pdb_dec_service_open(&so, &s->svc);
    if (st != PDB_OK) goto fail;
    const pdb_config *c = pdb_dec_service_config(s->svc);
    s->vocab = c->vocab_size;
    /* every limit from the window (refused: --max-context above the model's window, a --max-body or
     * --cache-max-bytes that cannot serve a full window; each message names both numbers) */
    pdb_arch_layout lay;
    int sem = 0;
    if ((st = pdb_dec_model_semantics_of(o->svc.model_dir, c, &sem)) || (st = pdb_arch_layout_of(c, sem, &lay))) goto fail;
    pdb_limits_in li = {.model_window = c->max_position_embeddings, .max_context = o->svc.max_context, .block_size = so.block_size,
                        .vocab_size = c->vocab_size, .block_bytes = pdb_store_layout_block_bytes(&lay.layout, so.block_size)};
    if ((st = pdb_limits_derive(&li, &s->lim)) || (o->max_body && (st = pdb_limits_check_body(&s->lim, "--max-body", o->max_body))) ||
        (st = pdb_limits_check_store_cap(&s->lim, "--cache-max-bytes", so.cache_max_bytes))) {
        pdb_err_wrap(st, "decode-server");
        goto fail;
    }
    s->context = s->lim.window;
    s->max_body = o->max_body ? o->max_body : (size_t)s->lim.max_body_bytes;
    s->cache_max_bytes = so.cache_max_bytes;
    {
        pdb_dec_stats ds;
        pdb_dec_service_stats(s->svc, &ds);
        uint64_t disk = ds.store_bytes + ds.store_disk_free_bytes;
        if (so.cache_dir && ds.store_disk_free_bytes != UINT64_MAX && disk < s->lim.window_store_bytes)
            PDB_WARN("decode-server: the disk of %s can hold %llu bytes of blocks (present + free), less than a full window's %llu "
                     "(%lld blocks of %llu bytes): the least recently used blocks will be evicted to make room",
                     so.cache_dir, (unsigned long long)disk, (unsigned long long)s->lim.window_store_bytes,
                     (long long)s->lim.window_blocks, (unsigned long long)s->lim.block_file_bytes);
    }
    s->block_size = so.block_size;
    s->max_batch = so.max_batch > 0 ? so.max_batch : 16; /* the service's default */
    if (s->tok && (st = pdb_json_vocab_from_tokenizer(s->tok, s->vocab, &s->json_vocab)) != PDB_OK) goto fail;
    snprintf(s->fingerprint, sizeof s->fingerprint, "%s", pdb_dec_service_fingerprint_hex(s->svc));
    if (s->tok && pdb_hash_file_sha256(pdb_tokenizer_path(s->tok), s->tokenizer_sha256)) s->tokenizer_sha256[0] = 0;
    if (!realpath(so.cache_dir, s->cache_dir)) snprintf(s->cache_dir, sizeof s->cache_dir, "%s", so.cache_dir);
    pdb_http_opts ho = {.host = o->host, .port = o->port, .max_body = s->max_body, .api_key = o->api_key, .handler = dec_handle, .user = s,
                        .idle_timeout_s = (unsigned)s->lim.http_idle_timeout_s};
    st = pdb_http_server_start(&ho, &s->http);
    if (st != PDB_OK) goto fail;
    *out = s;
    return PDB_OK;
fail:
    if (s->svc) pdb_dec_service_close(s->svc);
    dec_server_free(s);
    return st;
}

int pdb_dec_server_port(const pdb_dec_server *s) { return pdb_http_server_port(s->http); }
const char *pdb_dec_server_model_id(const pdb_dec_server *s) { return s->model_id; }

void pdb_dec_server_stop(pdb_dec_server *s) {
    if (!s) return;
    pdb_http_server_quiesce(s->http);
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    while (s->users > 0) pthread_cond_wait(&s->cv, &s->mu); /* short sections: submit, cancel, stats */
    pthread_mutex_unlock(&s->mu);
    pdb_dec_service_close(s->svc); /* streams still open end as CANCELLED */
    pdb_http_server_stop(s->http);
    dec_server_free(s);
}
