/* pdb_front: routes, the per-request flow (parse -> ids -> store lookup -> plan -> bridge ->
 * forward -> verdict -> relay), config/env loading and metrics. State: the tokenizer, store and
 * config (read-only after start), a bridge counter and verdict counters under mu. */
#include "pdb_front.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pdb_clock.h"
#include "pdb_config.h"
#include "pdb_anthropic.h"
#include "pdb_buf.h"
#include "pdb_arch.h"
#include "pdb_dec_model.h"
#include "pdb_front_bridge.h"
#include "pdb_hash.h"
#include "pdb_http.h"
#include "pdb_http_client.h"
#include "pdb_limits.h"
#include "pdb_openai.h"
#include "pdb_proc.h"
#include "pdb_prompt.h"
#include "pdb_store.h"
#include "pdb_tokenizer.h"

enum { FR_MAX_UPSTREAM_BODY = 64 << 20 };

struct pdb_front {
    pdb_front_opts o;
    char decoder_url[512], prefill_url[512], cache_dir[1024], upstream_key[256];
    pdb_config cfg;
    pdb_tokenizer *tok;
    pdb_store *store;
    pdb_arch_layout layout; /* the decoder's store layout (pools of one block) */
    uint8_t fp[32];
    char fp_hex[65], scheme[32];
    pdb_limits lim;                 /* every limit, from the served window and the block size */
    char model_id[256];             /* the decoder's model id (GET /v1/models), "" until known */
    int64_t decoder_window;         /* the decoder's max_model_len (same answer), 0 until known */
    char tokenizer_sha256[65], cache_real[4096];
    pdb_http_server *http;
    pthread_mutex_t mu;
    int bridges_running;
    uint64_t v_complete, v_partial, v_declined, v_skipped, requests, errors, bridge_bytes, bridge_blocks;
};

/* ======================================= options ============================================ */

static pdb_status opt_apply(pdb_front_opts *o, const char *key, const char *val, const char *origin) {
    long long v = 0;
    char *end = NULL;
    v = strtoll(val, &end, 10);
    int num = end && end != val && !*end && v >= 0;
    struct { const char *k; int64_t *p; } ints[] = {
        {"min_bridge_tokens", &o->policy.min_bridge_tokens}, {"min_tail", &o->policy.min_tail},
        {"max_bridge_tokens", &o->policy.max_bridge_tokens}, {"block_size", &o->block_size},
        {"max_context", &o->max_context},
    };
    struct { const char *k; long *p; } longs[] = {
        {"prefill_connect_ms", &o->prefill_connect_ms}, {"prefill_timeout_ms", &o->prefill_timeout_ms},
        {"decoder_timeout_ms", &o->decoder_timeout_ms},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i].k)) {
            if (!num) return pdb_err_set(PDB_INVALID, "%s: '%s' must be a non-negative integer", origin, key);
            *ints[i].p = v;
            return PDB_OK;
        }
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++)
        if (!strcmp(key, longs[i].k)) {
            if (!num) return pdb_err_set(PDB_INVALID, "%s: '%s' must be a non-negative integer", origin, key);
            *longs[i].p = (long)v;
            return PDB_OK;
        }
    if (!strcmp(key, "max_body")) {
        if (!num) return pdb_err_set(PDB_INVALID, "%s: 'max_body' must be a non-negative integer", origin);
        o->max_body = (size_t)v;
        return PDB_OK;
    }
    if (!strcmp(key, "max_bridges")) {
        if (!num || v > 1024) return pdb_err_set(PDB_INVALID, "%s: 'max_bridges' must be 0..1024", origin);
        o->max_bridges = (int)v;
        return PDB_OK;
    }
    return pdb_err_set(PDB_INVALID, "%s: unknown setting '%s'", origin, key);
}

static const char *const env_keys[] = {"min_bridge_tokens", "min_tail", "max_bridge_tokens", "block_size",
                                       "prefill_connect_ms", "prefill_timeout_ms", "decoder_timeout_ms", "max_bridges",
                                       "max_context", "max_body"};

pdb_status pdb_front_opts_defaults(pdb_front_opts *o, const char *config_file) {
    memset(o, 0, sizeof *o);
    o->block_size = 2048;
    o->policy.min_bridge_tokens = 1024;
    o->policy.min_tail = 512;
    o->prefill_connect_ms = 2000;
    o->max_bridges = 4;
    if (config_file) {
        json_error_t e;
        json_t *j = json_load_file(config_file, 0, &e);
        if (!j || !json_is_object(j)) {
            json_decref(j);
            return pdb_err_set(PDB_INVALID, "%s: not a JSON object (line %d column %d: %s)", config_file, e.line, e.column, e.text);
        }
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            char buf[64];
            if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
            else snprintf(buf, sizeof buf, "%s", json_is_string(v) ? json_string_value(v) : "?");
            pdb_status s = opt_apply(o, k, buf, config_file);
            if (s) { json_decref(j); return s; }
        }
        json_decref(j);
    }
    for (size_t i = 0; i < sizeof env_keys / sizeof env_keys[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "PDB_FRONT_");
        for (size_t k = 0; env_keys[i][k] && k < 50; k++) name[10 + k] = (char)(env_keys[i][k] >= 'a' ? env_keys[i][k] - 32 : env_keys[i][k]);
        name[10 + strlen(env_keys[i])] = 0;
        const char *v = getenv(name);
        if (v) PDB_TRY(opt_apply(o, env_keys[i], v, name));
    }
    return PDB_OK;
}

/* ======================================= upstream HTTP ====================================== */

/* One forwarded request. The decoder is called from a worker thread (libmicrohttpd sends
 * nothing for a connection until its handler returns); every answer to the client is made by
 * the handler thread through a handoff: phase 0 working -> 1 "open the stream" -> 2 opened, or
 * 0 -> 3 "send this response" -> 4 sent. Both threads hold a reference; the last frees. */
typedef struct {
    pdb_front *f;
    pdb_http_request *req;        /* handler side only */
    pdb_front_verdict vd, *v;
    char path[64], *fwd_body;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase, refs;
    int resp_status;
    const char *resp_body;
    size_t resp_len;
    char hv[512];
    int attempted, stream;
    int anthropic;                /* /v1/messages: Anthropic events and errors */
    int client_usage;             /* the client asked for stream usage */
    int status;                   /* decoder HTTP status */
    char *buf;                    /* non-stream body / SSE line assembly */
    size_t len, cap;
    char *held;                   /* stream: the last data event, held back one event */
    size_t held_len;
    pdb_http_stream *hs;          /* opened at the first event */
    int failed;
    double t_start;
} relay;

static int buf_add(relay *r, const char *p, size_t n) {
    if (!pdb_buf_grow(&r->buf, &r->cap, r->len + n + 1, FR_MAX_UPSTREAM_BODY)) return 0;
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    r->buf[r->len] = 0;
    return 1;
}

/* The decoder's cached prompt tokens in a body or chunk: OpenAI's usage.prompt_tokens_details.
 * cached_tokens, or the Messages API's usage.cache_read_input_tokens (message_start carries it
 * in message.usage). */
static int64_t usage_cached(json_t *j) {
    json_t *u = json_object_get(j, "usage");
    if (!u) u = json_object_get(json_object_get(j, "message"), "usage");
    json_t *d = json_object_get(u, "prompt_tokens_details");
    return d ? json_integer_value(json_object_get(d, "cached_tokens")) : json_integer_value(json_object_get(u, "cache_read_input_tokens"));
}

static json_t *verdict_json(const pdb_front_verdict *v) {
    char hdr[512];
    pdb_front_verdict_header(v, hdr, sizeof hdr);
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I, s:f, s:f, s:f, s:f}", "verdict", hdr, "kind",
                     v->kind, "reason", v->reason, "prompt_tokens", (json_int_t)v->prompt_tokens, "mounted_tokens",
                     (json_int_t)v->mounted_tokens, "blocks_requested", (json_int_t)v->blocks_requested, "blocks_written",
                     (json_int_t)v->blocks_written, "cached_blocks_before", (json_int_t)v->blocks_cached_before, "bytes",
                     (json_int_t)v->bytes, "resumes", v->resumes, "spool_blocks", (json_int_t)v->spool_blocks, "engine_ms",
                     v->engine_ms, "transfer_ms", v->transfer_ms,
                     "write_ms", v->write_ms, "total_ms", v->total_ms);
}

static void count_verdict(pdb_front *f, const pdb_front_verdict *v) {
    pthread_mutex_lock(&f->mu);
    if (!strcmp(v->kind, "complete")) f->v_complete++;
    else if (!strcmp(v->kind, "partial")) f->v_partial++;
    else if (!strcmp(v->kind, "declined")) f->v_declined++;
    else f->v_skipped++;
    f->bridge_bytes += v->bytes;
    f->bridge_blocks += (uint64_t)v->blocks_written;
    pthread_mutex_unlock(&f->mu);
}

static void finish_verdict(relay *r, int64_t decoder_cached) {
    pdb_front_verdict_finish(r->v, r->attempted, decoder_cached);
    r->v->total_ms = (pdb_clock_now() - r->t_start) * 1e3;
    count_verdict(r->f, r->v);
}

/* Send one SSE data event to the client, rewritten: usage dropped unless wanted, pd_bridge
 * added on the last one. */
static int send_event(relay *r, const char *json, size_t len, int last) {
    json_t *j = json_loadb(json, len, 0, NULL);
    char *out = NULL;
    if (j) {
        if (!(last && r->client_usage)) json_object_del(j, "usage");
        if (last) json_object_set_new(j, "pd_bridge", verdict_json(r->v));
        out = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    }
    const char *pre = "data: ";
    int ok = pdb_http_stream_write(r->hs, pre, strlen(pre), -1) == PDB_OK;
    if (ok) ok = pdb_http_stream_write(r->hs, out ? out : json, out ? strlen(out) : len, -1) == PDB_OK;
    if (ok) ok = pdb_http_stream_write(r->hs, "\n\n", 2, -1) == PDB_OK;
    free(out);
    return ok;
}

/* Worker side of the handoff: ask the handler to answer, wait until it has. */
static void handoff(relay *r, int phase, int wait_for) {
    pthread_mutex_lock(&r->mu);
    r->phase = phase;
    pthread_cond_broadcast(&r->cv);
    while (r->phase != wait_for) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static void relay_respond(relay *r, int status, const char *body, size_t len) {
    pdb_front_verdict_header(r->v, r->hv, sizeof r->hv);
    r->resp_status = status;
    r->resp_body = body;
    r->resp_len = len;
    handoff(r, 3, 4);
}

static int open_client_stream(relay *r, int64_t decoder_cached) {
    finish_verdict(r, decoder_cached);
    pdb_front_verdict_header(r->v, r->hv, sizeof r->hv);
    handoff(r, 1, 2);
    return r->hs != NULL;
}

/* One complete Messages API event ("event: TYPE\ndata: JSON"): message_start (the first) carries
 * the decoder's cache_read_input_tokens, which decide the verdict before our headers go out;
 * message_stop (the last) gets the pd_bridge object; the others pass unchanged. */
static int on_anthropic_event(relay *r, const char *ev, size_t n) {
    const char *d = memmem(ev, n, "\ndata: ", 7);
    if (strncmp(ev, "event: ", 7) || !d) return 1; /* comments, pings without data: drop */
    d += 7;
    size_t dl = n - (size_t)(d - ev);
    json_t *j = json_loadb(d, dl, 0, NULL);
    if (!r->hs && !open_client_stream(r, j ? usage_cached(j) : 0)) { json_decref(j); return 0; }
    const char *type = json_string_value(json_object_get(j, "type"));
    int ok;
    if (type && !strcmp(type, "message_stop")) {
        json_object_set_new(j, "pd_bridge", verdict_json(r->v));
        char *out = json_dumps(j, JSON_COMPACT);
        const char *pre = "event: message_stop\ndata: ";
        ok = out && pdb_http_stream_write(r->hs, pre, strlen(pre), -1) == PDB_OK &&
             pdb_http_stream_write(r->hs, out, strlen(out), -1) == PDB_OK && pdb_http_stream_write(r->hs, "\n\n", 2, -1) == PDB_OK;
        free(out);
    } else {
        ok = pdb_http_stream_write(r->hs, ev, n, -1) == PDB_OK && pdb_http_stream_write(r->hs, "\n\n", 2, -1) == PDB_OK;
    }
    json_decref(j);
    return ok;
}

/* One complete SSE event (without the trailing blank line). */
static int on_sse_event(relay *r, const char *ev, size_t n) {
    if (r->anthropic) return on_anthropic_event(r, ev, n);
    if (n < 6 || strncmp(ev, "data: ", 6)) return 1; /* comments, other fields: drop */
    const char *d = ev + 6;
    size_t dl = n - 6;
    if (dl == 6 && !strncmp(d, "[DONE]", 6)) {
        if (!r->hs && !open_client_stream(r, 0)) return 0;
        if (r->held && !send_event(r, r->held, r->held_len, 1)) return 0;
        free(r->held);
        r->held = NULL;
        return pdb_http_stream_write(r->hs, PDB_OPENAI_SSE_DONE, strlen(PDB_OPENAI_SSE_DONE), -1) == PDB_OK;
    }
    if (!r->hs) { /* first event: the decoder's cached_tokens decide the verdict, then headers go out */
        json_t *j = json_loadb(d, dl, 0, NULL);
        int64_t cached = j ? usage_cached(j) : 0;
        json_decref(j);
        if (!open_client_stream(r, cached)) return 0;
    }
    if (r->held && !send_event(r, r->held, r->held_len, 0)) return 0;
    free(r->held);
    r->held = malloc(dl);
    if (!r->held) return 0;
    memcpy(r->held, d, dl);
    r->held_len = dl;
    return 1;
}

static int fr_body(void *u, int status, const char *p, size_t n) {
    relay *r = u;
    r->status = status;
    if (!r->stream || r->status != 200) return buf_add(r, p, n);
    if (!buf_add(r, p, n)) return 0;
    char *s;
    while ((s = strstr(r->buf, "\n\n"))) {
        size_t ev = (size_t)(s - r->buf);
        if (!on_sse_event(r, r->buf, ev)) { r->failed = 1; return 0; }
        memmove(r->buf, s + 2, r->len - ev - 2 + 1);
        r->len -= ev + 2;
    }
    return 1;
}

/* Forward the (rewritten) body to the decoder and answer the client. */
/* POST body (or GET when body is NULL) to decoder_url + path, answer into r (status, body or the
 * relayed stream) with the upstream key; why (may be NULL) gets the reason of a failure. */
static pdb_status decoder_call(pdb_front *f, const char *path, const char *body, long timeout_ms, relay *r, char *why,
                               size_t why_len) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", f->decoder_url, path);
    pdb_http_call call = {.url = url, .body = body, .json = body != NULL, .bearer = f->upstream_key,
                          .connect_timeout_ms = 5000L, .timeout_ms = timeout_ms, .on_body = fr_body, .user = r};
    pdb_http_reply rp;
    pdb_status st = pdb_http_client_call(&call, &rp);
    r->status = rp.status;
    if (why) snprintf(why, why_len, "%s", rp.error);
    return st;
}

static void forward(relay *r, const char *path, const char *body) {
    pdb_front *f = r->f;
    char why[256] = "", url[1024];
    snprintf(url, sizeof url, "%s%s", f->decoder_url, path);
    pdb_status cs = decoder_call(f, path, body, f->o.decoder_timeout_ms, r, why, sizeof why);
    if (r->hs) { /* a stream was open: finish it */
        if (cs != PDB_OK && !r->failed) {
            const char *e = "data: {\"error\":{\"message\":\"decoder connection lost\",\"type\":\"server_error\"}}\n\n";
            pdb_http_stream_write(r->hs, e, strlen(e), 1000);
        }
        pdb_http_stream_close(r->hs);
        return;
    }
    if (cs != PDB_OK) {
        finish_verdict(r, 0);
        PDB_WARN("front: decoder %s: %s", url, why);
        pdb_openai_error e = {.status = 502, .type = "server_error"};
        snprintf(e.message, sizeof e.message, "the decoder at %.200s did not answer: %.200s", f->decoder_url, why);
        char *ej = r->anthropic ? pdb_anthropic_error_json(&e) : pdb_openai_error_json(&e);
        relay_respond(r, 502, ej ? ej : "{}", ej ? strlen(ej) : 2);
        free(ej);
        pthread_mutex_lock(&f->mu);
        f->errors++;
        pthread_mutex_unlock(&f->mu);
        return;
    }
    /* non-stream answer (or an error status before any stream) */
    json_t *j = r->buf ? json_loadb(r->buf, r->len, 0, NULL) : NULL;
    finish_verdict(r, j && r->status == 200 ? usage_cached(j) : 0);
    if (j && r->status == 200) {
        json_object_set_new(j, "pd_bridge", verdict_json(r->v));
        char *out = json_dumps(j, JSON_COMPACT);
        relay_respond(r, 200, out ? out : "{}", out ? strlen(out) : 2);
        free(out);
    } else {
        relay_respond(r, r->status ? r->status : 502, r->buf ? r->buf : "{}", r->buf ? r->len : 2);
    }
    json_decref(j);
}

static void relay_unref(relay *r) {
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last) return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->fwd_body);
    free(r->buf);
    free(r->held);
    free(r);
}

static void *relay_worker(void *arg) {
    relay *r = arg;
    forward(r, r->path, r->fwd_body);
    char hv[512];
    pdb_front_verdict_header(r->v, hv, sizeof hv);
    PDB_INFO("front: %s %lld tokens -> %s", r->path, (long long)r->v->prompt_tokens, hv);
    if (r->phase == 0) handoff(r, 3, 4); /* never answered (cannot happen): let the handler send 500 */
    relay_unref(r);
    return NULL;
}

/* Handler side: run the worker, answer what it hands over, return once the client's answer is
 * queued (a stream keeps flowing from the worker). */
static void relay_run(relay *r) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, relay_worker, r)) {
        pthread_attr_destroy(&at);
        pdb_http_respond_error(r->req, 503, "server_error", NULL, NULL, "front: cannot start a worker thread");
        r->refs = 1;
        relay_unref(r);
        return;
    }
    pthread_attr_destroy(&at);
    pthread_mutex_lock(&r->mu);
    while (r->phase != 1 && r->phase != 3) pthread_cond_wait(&r->cv, &r->mu);
    pdb_http_header h[1] = {{"X-PD-Bridge", r->hv}};
    if (r->phase == 1) {
        if (pdb_http_respond_stream(r->req, 200, "text/event-stream", h, 1, 0, NULL, &r->hs)) r->hs = NULL;
        r->phase = 2;
    } else {
        if (r->resp_status) pdb_http_respond(r->req, r->resp_status, "application/json", r->resp_body, r->resp_len, h, 1);
        else pdb_http_respond_error(r->req, 500, "server_error", NULL, NULL, "front: no answer from the worker");
        r->phase = 4;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    relay_unref(r);
}

/* ======================================= requests =========================================== */

static void respond_err(pdb_http_request *req, const pdb_openai_error *e, const char *verdict) {
    char *ej = !strcmp(pdb_http_request_path(req), "/v1/messages") ? pdb_anthropic_error_json(e) : pdb_openai_error_json(e);
    pdb_http_header h[1] = {{"X-PD-Bridge", verdict}};
    pdb_http_respond(req, e->status, "application/json", ej ? ej : "{}", ej ? strlen(ej) : 2, h, 1);
    free(ej);
}

static const char *decoder_model_id(pdb_front *f);

static void handle_completion(pdb_front *f, pdb_http_request *req, pdb_openai_kind kind, const char *path) {
    double t0 = pdb_clock_now();
    pdb_openai_request q;
    pdb_openai_error err;
    memset(&err, 0, sizeof err);
    const char *mid = decoder_model_id(f); /* also learns the decoder's window (max_model_len) */
    pthread_mutex_lock(&f->mu);
    f->requests++;
    pdb_limits L = f->lim; /* the served window: ours, or the decoder's max_model_len when smaller */
    if (f->decoder_window > 0 && f->decoder_window < L.window) L.window = f->decoder_window;
    pthread_mutex_unlock(&f->mu);
    pdb_openai_limits lim = {.max_context = L.window};
    int anthropic = !strcmp(path, "/v1/messages"); /* the Messages API: converted like the decoder converts it */
    if (anthropic ? pdb_anthropic_parse_request(pdb_http_request_body(req), pdb_http_request_body_len(req), &lim, &q, &err)
                  : pdb_openai_parse_request(kind, pdb_http_request_body(req), pdb_http_request_body_len(req), &lim, &q, &err)) {
        respond_err(req, &err, "skipped invalid_request");
        return;
    }
    int mode = pdb_front_parse_mode(pdb_http_request_header(req, "X-PD-Bridge-Mode"));
    int32_t *ids = NULL;
    int64_t n = 0;
    if (mid && pdb_openai_check_model(&q, mid, &err)) { /* unknown model: the decoder's 404, before any bridge */
        respond_err(req, &err, "skipped invalid_request");
        goto out;
    }
    if (mode < 0) {
        pdb_openai_set_error(&err, 400, NULL, "invalid_header", "X-PD-Bridge-Mode must be auto, off or force");
        respond_err(req, &err, "skipped invalid_request");
        goto out;
    }
    if (pdb_prompt_encode_request(f->tok, &q, &ids, &n, &err)) {
        respond_err(req, &err, "skipped invalid_request");
        goto out;
    }
    /* past the served window (or an absent max_tokens whose default does not fit): refused here,
     * before any block is bridged, by the decoder's own rule (it would refuse it after) */
    int64_t max_tokens = 0;
    if (pdb_limits_check_request(&L, &q, kind, n, &max_tokens, &err)) {
        respond_err(req, &err, "skipped invalid_request");
        goto out;
    }
    pdb_front_verdict v = {0};
    v.prompt_tokens = n;
    v.block_size = f->o.block_size;
    v.blocks_bridgeable = n > 0 ? (n - 1) / f->o.block_size : 0;
    int64_t cached = 0;
    if (v.blocks_bridgeable > 0) {
        uint8_t(*hs)[32] = malloc(sizeof(*hs) * (size_t)v.blocks_bridgeable);
        if (hs && !pdb_store_hash_chain(f->fp, ids, v.blocks_bridgeable * f->o.block_size, f->o.block_size, hs))
            pdb_store_longest_prefix(f->store, (const uint8_t(*)[32])hs, v.blocks_bridgeable, &cached);
        free(hs);
    }
    v.blocks_cached_before = cached;
    pdb_front_plan plan = pdb_front_policy_decide(&f->o.policy, (pdb_bridge_mode)mode, n, f->o.block_size, cached);
    relay rr = {.f = f, .stream = q.stream, .anthropic = anthropic, .client_usage = q.include_usage, .t_start = t0}, *r = &rr;
    if (plan.kind == PDB_PLAN_SKIP) {
        snprintf(v.kind, sizeof v.kind, "skipped");
        snprintf(v.reason, sizeof v.reason, "%s", plan.skip_reason);
    } else {
        pthread_mutex_lock(&f->mu);
        int ok = f->bridges_running < f->o.max_bridges;
        if (ok) f->bridges_running++;
        pthread_mutex_unlock(&f->mu);
        if (!ok) {
            snprintf(v.kind, sizeof v.kind, "skipped");
            snprintf(v.reason, sizeof v.reason, "busy");
        } else {
            r->attempted = 1;
            v.blocks_requested = plan.end_block - plan.first_block;
            pdb_front_bridge_opts bo = {.prefill_url = f->prefill_url, .api_key = f->upstream_key, .layout = &f->layout.layout,
                                        .connect_timeout_ms = f->o.prefill_connect_ms, .total_timeout_ms = f->o.prefill_timeout_ms};
            pdb_front_bridge_result br;
            pdb_front_bridge_run(&bo, f->store, f->fp_hex, ids, f->o.block_size, plan.first_block, plan.end_block, &br);
            pthread_mutex_lock(&f->mu);
            f->bridges_running--;
            pthread_mutex_unlock(&f->mu);
            v.blocks_written = br.blocks_written;
            v.bytes = br.bytes;
            v.engine_ms = br.engine_ms;
            v.transfer_ms = br.transfer_ms;
            v.write_ms = br.write_ms;
            v.resumes = br.resumes;
            v.spool_blocks = br.spool_blocks;
            snprintf(v.reason, sizeof v.reason, "%s", br.reason);
        }
    }
    /* forward the original request; streams ask the decoder for usage on every chunk so the
     * verdict can use its cached_tokens before our headers go out */
    json_t *body = json_loadb(pdb_http_request_body(req), pdb_http_request_body_len(req), 0, NULL);
    if (q.stream && !anthropic) {
        json_t *so = json_object();
        json_object_set_new(so, "include_usage", json_true());
        json_object_set_new(so, "continuous_usage_stats", json_true());
        json_object_set_new(body, "stream_options", so);
    }
    char *fwd = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    relay *hr = calloc(1, sizeof *hr);
    if (!fwd || !hr) {
        free(fwd);
        free(hr);
        pdb_http_respond_error(req, 503, "server_error", NULL, NULL, "front: out of memory");
        goto out;
    }
    *hr = rr;
    hr->req = req;
    hr->vd = v;
    hr->v = &hr->vd;
    hr->fwd_body = fwd;
    hr->refs = 2;
    snprintf(hr->path, sizeof hr->path, "%s", path);
    pthread_mutex_init(&hr->mu, NULL);
    pthread_cond_init(&hr->cv, NULL);
    relay_run(hr);
out:
    free(ids);
    pdb_openai_request_free(&q);
}


static void proxy_get(pdb_front *f, pdb_http_request *req, const char *path) {
    relay r = {.f = f};
    if (decoder_call(f, path, NULL, 10000L, &r, NULL, 0) != PDB_OK)
        pdb_http_respond_error(req, 502, "server_error", NULL, NULL, "the decoder did not answer");
    else pdb_http_respond(req, r.status, "application/json", r.buf ? r.buf : "", r.len, NULL, 0);
    free(r.buf);
}

/* The decoder's served model id, asked once (GET /v1/models) and kept. */
static const char *decoder_model_id(pdb_front *f) {
    pthread_mutex_lock(&f->mu);
    int known = f->model_id[0] != 0;
    pthread_mutex_unlock(&f->mu);
    if (known) return f->model_id;
    relay r = {.f = f};
    pdb_status cs = decoder_call(f, "/v1/models", NULL, 5000L, &r, NULL, 0);
    json_t *j = cs == PDB_OK && r.status == 200 && r.buf ? json_loadb(r.buf, r.len, 0, NULL) : NULL;
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    const char *id = json_string_value(json_object_get(m0, "id"));
    json_int_t dw = json_integer_value(json_object_get(m0, "max_model_len"));
    pthread_mutex_lock(&f->mu);
    if (id) snprintf(f->model_id, sizeof f->model_id, "%s", id);
    if (id && dw > 0) f->decoder_window = dw;
    pthread_mutex_unlock(&f->mu);
    json_decref(j);
    free(r.buf);
    return f->model_id[0] ? f->model_id : NULL;
}

static void handle_metrics(pdb_front *f, pdb_http_request *req) {
    char b[2048];
    pdb_store_stats ss;
    pdb_store_get_stats(f->store, &ss);
    pthread_mutex_lock(&f->mu);
    int n = snprintf(b, sizeof b,
                     "# TYPE pdbridge_front_requests_total counter\npdbridge_front_requests_total %llu\n"
                     "# TYPE pdbridge_front_verdicts_total counter\n"
                     "pdbridge_front_verdicts_total{verdict=\"complete\"} %llu\n"
                     "pdbridge_front_verdicts_total{verdict=\"partial\"} %llu\n"
                     "pdbridge_front_verdicts_total{verdict=\"declined\"} %llu\n"
                     "pdbridge_front_verdicts_total{verdict=\"skipped\"} %llu\n"
                     "# TYPE pdbridge_front_upstream_errors_total counter\npdbridge_front_upstream_errors_total %llu\n"
                     "# TYPE pdbridge_front_bridges_running gauge\npdbridge_front_bridges_running %d\n"
                     "# TYPE pdbridge_front_bridge_blocks_total counter\npdbridge_front_bridge_blocks_total %llu\n"
                     "# TYPE pdbridge_front_bridge_bytes_total counter\npdbridge_front_bridge_bytes_total %llu\n"
                     "# TYPE pdbridge_front_store_blocks gauge\npdbridge_front_store_blocks %llu\n",
                     (unsigned long long)f->requests, (unsigned long long)f->v_complete, (unsigned long long)f->v_partial,
                     (unsigned long long)f->v_declined, (unsigned long long)f->v_skipped, (unsigned long long)f->errors,
                     f->bridges_running, (unsigned long long)f->bridge_blocks, (unsigned long long)f->bridge_bytes,
                     (unsigned long long)ss.n_blocks);
    pthread_mutex_unlock(&f->mu);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof b ? (size_t)n : sizeof b - 1;
    len += pdb_proc_metrics_text(b + len, sizeof b - len);
    pdb_http_respond(req, 200, "text/plain; version=0.0.4", b, len, NULL, 0);
}

static void handler(void *user, pdb_http_request *req) {
    pdb_front *f = user;
    const char *m = pdb_http_request_method(req), *p = pdb_http_request_path(req);
    int post = !strcmp(m, "POST"), get = !strcmp(m, "GET");
    if (!strcmp(p, "/v1/completions") && post) handle_completion(f, req, PDB_OPENAI_COMPLETION, p);
    else if (!strcmp(p, "/v1/chat/completions") && post) handle_completion(f, req, PDB_OPENAI_CHAT, p);
    else if (!strcmp(p, "/v1/messages") && post) handle_completion(f, req, PDB_OPENAI_CHAT, p);
    else if (!strcmp(p, "/v1/models") && get) proxy_get(f, req, p);
    else if (!strcmp(p, "/metrics") && get) handle_metrics(f, req);
    else if (!strcmp(p, "/health") && get) {
        json_t *lim = pdb_limits_json(&f->lim);
        json_object_set_new(lim, "max_body", json_integer((json_int_t)f->o.max_body));
        json_object_set_new(lim, "prefill_timeout_ms_set", json_integer((json_int_t)f->o.prefill_timeout_ms));
        json_object_set_new(lim, "decoder_timeout_ms_set", json_integer((json_int_t)f->o.decoder_timeout_ms));
        json_object_set_new(lim, "max_bridge_tokens", json_integer((json_int_t)f->o.policy.max_bridge_tokens));
        json_t *j = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s, s:s, s:s, s:o}", "status", "ok", "role", "front", "fingerprint",
                              f->fp_hex, "block_size", (json_int_t)f->o.block_size, "tokenizer_sha256", f->tokenizer_sha256,
                              "cache_dir", f->cache_real, "decoder", f->decoder_url, "prefill", f->prefill_url, "limits", lim);
        char *b = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        pdb_http_respond(req, 200, "application/json", b ? b : "{}", b ? strlen(b) : 2, NULL, 0);
        free(b);
    } else {
        char b[600];
        snprintf(b, sizeof b, "no route %s %s", m, p);
        pdb_http_respond_error(req, 404, "invalid_request_error", NULL, NULL, b);
    }
}

/* ======================================= lifecycle ========================================== */

/* Every limit from the window (pdb_limits); refused when --max-context is above the model's
 * window or --max-body cannot hold a full window; timeouts and max_bridge_tokens below what a
 * full window needs are the operator's choice and are warned about, naming both numbers. */
static pdb_status front_limits(pdb_front *f) {
    pdb_limits_in li = {.model_window = f->cfg.max_position_embeddings, .max_context = f->o.max_context,
                        .block_size = f->o.block_size, .vocab_size = f->cfg.vocab_size,
                        .block_bytes = pdb_store_layout_block_bytes(&f->layout.layout, f->o.block_size)};
    pdb_status s = pdb_limits_derive(&li, &f->lim);
    if (!s && f->o.max_body) s = pdb_limits_check_body(&f->lim, "--max-body", f->o.max_body);
    if (s) return pdb_err_wrap(s, "front");
    if (!f->o.max_body) f->o.max_body = (size_t)f->lim.max_body_bytes;
    struct { long *v; int64_t need; const char *flag; } t[] = {
        {&f->o.prefill_timeout_ms, f->lim.prefill_timeout_ms, "--prefill-timeout-ms"},
        {&f->o.decoder_timeout_ms, f->lim.decoder_timeout_ms, "--decoder-timeout-ms"},
    };
    for (int i = 0; i < 2; i++) {
        if (!*t[i].v) *t[i].v = (long)t[i].need;
        else if (*t[i].v < t[i].need)
            PDB_WARN("front: %s %ld is below what a full window of %lld tokens needs at %d tokens/s (%lld ms): long prompts may "
                     "end as partial (prefill) or be cut (decoder)", t[i].flag, *t[i].v, (long long)f->lim.window,
                     PDB_LIMITS_MIN_TOKENS_PER_S, (long long)t[i].need);
    }
    int64_t bridgeable = f->lim.window_blocks * f->o.block_size;
    if (f->o.policy.max_bridge_tokens && f->o.policy.max_bridge_tokens < bridgeable)
        PDB_WARN("front: --max-bridge-tokens %lld is below a full window's %lld bridgeable tokens: longer prompts are bridged in "
                 "part (verdict partial, reason=max_bridge_tokens)", (long long)f->o.policy.max_bridge_tokens, (long long)bridgeable);
    return PDB_OK;
}

pdb_status pdb_front_start(const pdb_front_opts *o, pdb_front **out) {
    if (!o->decoder_url || !o->prefill_url || !o->decoder_model || !o->cache_dir)
        return pdb_err_set(PDB_INVALID, "front: --decoder, --prefill, --decoder-model and --cache-dir are required");
    pdb_front *f = calloc(1, sizeof *f);
    if (!f) return pdb_err_set(PDB_NOMEM, "front");
    f->o = *o;
    if (!f->o.block_size) f->o.block_size = 2048;
    if (!f->o.max_bridges) f->o.max_bridges = 4;
    snprintf(f->decoder_url, sizeof f->decoder_url, "%s", o->decoder_url);
    snprintf(f->prefill_url, sizeof f->prefill_url, "%s", o->prefill_url);
    snprintf(f->cache_dir, sizeof f->cache_dir, "%s", o->cache_dir);
    const char *uk = o->upstream_api_key ? o->upstream_api_key : o->api_key;
    snprintf(f->upstream_key, sizeof f->upstream_key, "%s", uk ? uk : "");
    pthread_mutex_init(&f->mu, NULL);
    pdb_st *st = NULL;
    pdb_status s = pdb_config_load(o->decoder_model, &f->cfg);
    if (!s) s = pdb_st_open(o->decoder_model, &st);
    if (!s) s = pdb_dec_model_identity(o->decoder_model, &f->cfg, st, f->scheme, f->fp);
    pdb_st_close(st);
    if (s) goto fail;
    pdb_store_hash_hex(f->fp, f->fp_hex);
    char tj[1100];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", o->decoder_model);
    FILE *tf = fopen(tj, "rb");
    if (tf) {
        fclose(tf);
        if ((s = pdb_tokenizer_load(tj, &f->tok))) goto fail;
        if (pdb_hash_file_sha256(tj, f->tokenizer_sha256)) f->tokenizer_sha256[0] = 0;
    }
    int sem = 0;
    if ((s = pdb_dec_model_semantics_of(o->decoder_model, &f->cfg, &sem))) goto fail;
    if ((s = pdb_arch_layout_of(&f->cfg, sem, &f->layout))) goto fail;
    if ((s = pdb_arch_check_block_size(&f->cfg, f->o.block_size))) goto fail;
    if ((s = front_limits(f))) goto fail;
    if ((s = pdb_store_open(o->cache_dir, &f->layout.layout, f->fp, f->o.block_size, 0, &f->store))) goto fail;
    if (!realpath(o->cache_dir, f->cache_real)) snprintf(f->cache_real, sizeof f->cache_real, "%s", o->cache_dir);
    if ((s = pdb_http_client_init())) goto fail;
    pdb_http_opts ho = {.host = o->host, .port = o->port, .api_key = o->api_key, .max_body = f->o.max_body,
                        .idle_timeout_s = (unsigned)f->lim.http_idle_timeout_s,
                        .handler = handler, .user = f};
    if ((s = pdb_http_server_start(&ho, &f->http))) goto fail;
    PDB_INFO("front: port %d, decoder %s, prefill %s, store %s (block %lld, fingerprint %.16s...), policy min_bridge_tokens=%lld "
             "min_tail=%lld max_bridge_tokens=%lld",
             pdb_http_server_port(f->http), f->decoder_url, f->prefill_url, f->cache_dir, (long long)f->o.block_size, f->fp_hex,
             (long long)f->o.policy.min_bridge_tokens, (long long)f->o.policy.min_tail, (long long)f->o.policy.max_bridge_tokens);
    *out = f;
    return PDB_OK;
fail:
    pdb_front_stop(f);
    return s;
}

int pdb_front_port(const pdb_front *f) { return pdb_http_server_port(f->http); }

void pdb_front_stop(pdb_front *f) {
    if (!f) return;
    if (f->http) pdb_http_server_stop(f->http);
    if (f->store) pdb_store_close(f->store);
    pdb_tokenizer_free(f->tok);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
