/* pdb_prefill_server: request validation, engine checkout (a pool of `parallel` backends under a
 * mutex + condition variable), and the segment stream writer. State: engines[] with busy flags;
 * counters for /metrics under mu. */
#include "pdb_prefill_server.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pdb_config.h"
#include "pdb_dec_model.h"
#include "pdb_http.h"
#include "pdb_prefill_engine.h"
#include "pdb_segment.h"
#include "pdb_store.h"

enum { PS_MAX_ENGINES = 64, PS_WRITE_PIECE = 1 << 20 };

struct pdb_prefill_server {
    pdb_prefill_server_opts o;
    pdb_config cfg;
    pdb_st *est, *dst;
    char fp_hex[65], scheme[32], backend[16];
    pdb_dec_layout layout; /* the decoder's store layout: what one segment holds */
    pdb_prefill_backend *engines[PS_MAX_ENGINES];
    int busy[PS_MAX_ENGINES], n_engines;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pdb_http_server *http;
    uint64_t requests, ok, failed, refused, tokens, blocks, bytes;
};

/* ---- engine checkout ---------------------------------------------------------------------- */

static int engine_take(pdb_prefill_server *s, int wait_s) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += wait_s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        for (int i = 0; i < s->n_engines; i++)
            if (!s->busy[i]) {
                s->busy[i] = 1;
                pthread_mutex_unlock(&s->mu);
                return i;
            }
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&s->mu);
    return -1;
}

static void engine_give(pdb_prefill_server *s, int i) {
    pthread_mutex_lock(&s->mu);
    s->busy[i] = 0;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- stream writing ----------------------------------------------------------------------- */

typedef struct {
    pdb_prefill_server *s;
    pdb_http_stream *hs;
    uint64_t bytes;
} ps_stream;

static pdb_status write_all(ps_stream *w, const void *data, uint64_t len) {
    const char *p = data;
    while (len > 0) {
        size_t n = len < PS_WRITE_PIECE ? (size_t)len : PS_WRITE_PIECE;
        pdb_status st = pdb_http_stream_write(w->hs, p, n, -1); /* blocks while the consumer lags */
        if (st) return pdb_err_set(st, "prefill stream: consumer gone");
        p += n;
        len -= n;
        w->bytes += n;
    }
    return PDB_OK;
}

static pdb_status on_segment(void *user, int64_t block, const float *data, uint64_t bytes) {
    ps_stream *w = user;
    uint8_t prefix[16], head[40];
    pdb_segment_frame_prefix(PDB_SEG_SEGMENT, 40 + bytes, prefix);
    pdb_segment_payload_head(block, data, bytes, head);
    PDB_TRY(write_all(w, prefix, 16));
    PDB_TRY(write_all(w, head, 40));
    return write_all(w, data, bytes);
}

static void write_end(ps_stream *w, int32_t status, const char *msg) {
    uint8_t buf[16 + 8 + PDB_SEG_MAX_MESSAGE];
    size_t ml0 = strlen(msg);
    uint32_t ml = (uint32_t)(ml0 < PDB_SEG_MAX_MESSAGE ? ml0 : PDB_SEG_MAX_MESSAGE);
    pdb_segment_frame_prefix(PDB_SEG_END, 8 + ml, buf);
    for (int i = 0; i < 4; i++) buf[16 + i] = (uint8_t)((uint32_t)status >> (8 * i));
    for (int i = 0; i < 4; i++) buf[20 + i] = (uint8_t)(ml >> (8 * i));
    memcpy(buf + 24, msg, ml);
    write_all(w, buf, 24 + ml);
}

/* ---- the prefill job: runs on its own thread (libmicrohttpd sends nothing for a connection
 * until its handler returns), writing frames as segments complete ---------------------------- */

typedef struct {
    pdb_prefill_server *s;
    int eng;
    int32_t *ids;
    int64_t n, bs, fb;
    ps_stream w;
} ps_job;

static void *prefill_job(void *arg) {
    ps_job *job = arg;
    pdb_prefill_server *s = job->s;
    ps_stream *w = &job->w;
    int64_t n = job->n, bs = job->bs, fb = job->fb;
    char hj[512], msg[600];
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
    uint64_t block_bytes = 0;
    for (int p = 0; p < s->layout.layout.n_pools; p++) block_bytes += pdb_store_pool_bytes(&s->layout.layout.pools[p], bs);
    int hl = snprintf(hj, sizeof hj,
                      "{\"version\":1,\"fingerprint\":\"%s\",\"block_size\":%lld,\"first_block\":%lld,\"n_blocks\":%lld,"
                      "\"block_bytes\":%llu}",
                      s->fp_hex, (long long)bs, (long long)fb, (long long)(n / bs),
                      (unsigned long long)block_bytes);
    uint8_t prefix[16];
    pdb_segment_frame_prefix(PDB_SEG_HEADER, (uint64_t)hl, prefix);
    pdb_prefill_stats ps = {0};
    pdb_status st = write_all(w, prefix, 16);
    if (!st) st = write_all(w, hj, (uint64_t)hl);
    if (!st) st = pdb_prefill_run(s->engines[job->eng], &s->cfg, job->ids, n, bs, fb, s->o.chunk, on_segment, w, &ps);
    engine_give(s, job->eng);
    if (st) snprintf(msg, sizeof msg, "%s", pdb_err_msg());
    else snprintf(msg, sizeof msg, "{\"engine_s\":%.6f,\"tokens\":%lld,\"blocks\":%lld}", ps.engine_s,
                  (long long)ps.tokens_run, (long long)ps.blocks_sent);
    write_end(w, st ? (int32_t)st : 0, msg);
    pdb_http_stream_close(w->hs);
    PDB_INFO("prefill: %lld tokens, blocks %lld..%lld sent %lld, %.1f MB, engine %.2fs, stream wait %.2fs%s%s", (long long)n,
             (long long)fb, (long long)(n / bs) - 1, (long long)ps.blocks_sent, w->bytes / 1e6, ps.engine_s, ps.callback_s,
             st ? ": " : "", st ? msg : "");
    pthread_mutex_lock(&s->mu);
    if (st) s->failed++;
    else s->ok++;
    s->tokens += (uint64_t)ps.tokens_run;
    s->blocks += (uint64_t)ps.blocks_sent;
    s->bytes += w->bytes;
    pthread_mutex_unlock(&s->mu);
    free(job->ids);
    free(job);
    return NULL;
}

/* ---- handlers ----------------------------------------------------------------------------- */

static void handle_prefill(pdb_prefill_server *s, pdb_http_request *r) {
    json_error_t e;
    const char *body = pdb_http_request_body(r);
    json_t *j = json_loadb(body, pdb_http_request_body_len(r), 0, &e);
    char msg[600];
    int32_t *ids = NULL;
    if (!j || !json_is_object(j)) {
        snprintf(msg, sizeof msg, "request body is not a JSON object (line %d column %d: %s)", j ? 0 : e.line, j ? 0 : e.column,
                 j ? "not an object" : e.text);
        pdb_http_respond_error(r, 400, "invalid_request_error", NULL, NULL, msg);
        goto out;
    }
    json_t *arr = json_object_get(j, "token_ids");
    json_t *jbs = json_object_get(j, "block_size"), *jfb = json_object_get(j, "first_block");
    const char *fp = json_string_value(json_object_get(j, "fingerprint"));
    int64_t bs = json_integer_value(jbs), fb = jfb ? json_integer_value(jfb) : 0, n = (int64_t)json_array_size(arr);
    if (!json_is_array(arr) || n == 0) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", NULL, "token_ids must be a non-empty array");
        goto out;
    }
    if (!json_is_integer(jbs) || pdb_dec_check_block_size(&s->cfg, bs)) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "block_size", NULL,
                               s->cfg.arch == PDB_ARCH_DEEPSEEK_V4
                                   ? "block_size must be a positive multiple of 128 and of every compression rate"
                                   : "block_size must be a positive multiple of 128");
        goto out;
    }
    if (!fp) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "fingerprint", NULL, "fingerprint (64 hex) is required");
        goto out;
    }
    if (strcmp(fp, s->fp_hex)) {
        snprintf(msg, sizeof msg, "decoder fingerprint mismatch: this prefill server computes for %s (scheme %s), the request is for %.64s",
                 s->fp_hex, s->scheme, fp);
        pthread_mutex_lock(&s->mu);
        s->refused++;
        pthread_mutex_unlock(&s->mu);
        pdb_http_respond_error(r, 409, "invalid_request_error", "fingerprint", "fingerprint_mismatch", msg);
        goto out;
    }
    int64_t maxt = s->o.max_tokens ? s->o.max_tokens : s->cfg.max_position_embeddings;
    if (n > maxt) {
        snprintf(msg, sizeof msg, "%lld tokens exceed this server's limit of %lld", (long long)n, (long long)maxt);
        pdb_http_respond_error(r, 413, "invalid_request_error", "token_ids", NULL, msg);
        goto out;
    }
    if (fb < 0 || fb > n / bs) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "first_block", NULL, "first_block outside 0..full blocks of the prompt");
        goto out;
    }
    ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!ids) { pdb_http_respond_error(r, 503, "server_error", NULL, NULL, "out of memory"); goto out; }
    for (int64_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        int64_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= s->cfg.vocab_size) {
            snprintf(msg, sizeof msg, "token_ids[%lld] is not a token id of this model (0..%lld)", (long long)i,
                     (long long)s->cfg.vocab_size - 1);
            pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", NULL, msg);
            goto out;
        }
        ids[i] = (int32_t)id;
    }
    int eng = engine_take(s, s->o.wait_s > 0 ? s->o.wait_s : 120);
    if (eng < 0) {
        pdb_http_respond_error(r, 503, "server_error", NULL, "busy", "all prefill engines are busy; try again");
        goto out;
    }
    ps_job *job = calloc(1, sizeof *job);
    if (!job) {
        engine_give(s, eng);
        pdb_http_respond_error(r, 503, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    *job = (ps_job){.s = s, .eng = eng, .ids = ids, .n = n, .bs = bs, .fb = fb};
    if (pdb_http_respond_stream(r, 200, "application/x-pdbridge-segments", NULL, 0, 0, NULL, &job->w.hs)) {
        engine_give(s, eng);
        free(job);
        goto out;
    }
    job->w.s = s;
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, prefill_job, job)) {
        write_end(&job->w, PDB_NOMEM, "prefill server: cannot start a worker thread");
        pdb_http_stream_close(job->w.hs);
        engine_give(s, eng);
        free(job);
    } else {
        ids = NULL; /* owned by the job */
    }
    pthread_attr_destroy(&at);
out:
    free(ids);
    json_decref(j);
}

static void handler(void *user, pdb_http_request *r) {
    pdb_prefill_server *s = user;
    const char *m = pdb_http_request_method(r), *p = pdb_http_request_path(r);
    char buf[1024];
    if (!strcmp(p, "/health") && !strcmp(m, "GET")) {
        int n = snprintf(buf, sizeof buf,
                         "{\"status\":\"ok\",\"role\":\"prefill\",\"fingerprint\":\"%s\",\"scheme\":\"%s\",\"backend\":\"%s\","
                         "\"engines\":%d,\"model_type\":\"%s\"}",
                         s->fp_hex, s->scheme, s->backend, s->n_engines, s->cfg.model_type);
        pdb_http_respond(r, 200, "application/json", buf, (size_t)n, NULL, 0);
    } else if (!strcmp(p, "/metrics") && !strcmp(m, "GET")) {
        pthread_mutex_lock(&s->mu);
        int busy = 0;
        for (int i = 0; i < s->n_engines; i++) busy += s->busy[i];
        int n = snprintf(buf, sizeof buf,
                         "# TYPE pdbridge_prefill_requests_total counter\n"
                         "pdbridge_prefill_requests_total{result=\"ok\"} %llu\n"
                         "pdbridge_prefill_requests_total{result=\"failed\"} %llu\n"
                         "pdbridge_prefill_requests_total{result=\"fingerprint_mismatch\"} %llu\n"
                         "# TYPE pdbridge_prefill_tokens_total counter\npdbridge_prefill_tokens_total %llu\n"
                         "# TYPE pdbridge_prefill_blocks_total counter\npdbridge_prefill_blocks_total %llu\n"
                         "# TYPE pdbridge_prefill_bytes_total counter\npdbridge_prefill_bytes_total %llu\n"
                         "# TYPE pdbridge_prefill_engines_busy gauge\npdbridge_prefill_engines_busy %d\n",
                         (unsigned long long)s->ok, (unsigned long long)s->failed, (unsigned long long)s->refused,
                         (unsigned long long)s->tokens, (unsigned long long)s->blocks, (unsigned long long)s->bytes, busy);
        pthread_mutex_unlock(&s->mu);
        pdb_http_respond(r, 200, "text/plain; version=0.0.4", buf, (size_t)n, NULL, 0);
    } else if (!strcmp(p, "/v1/prefill")) {
        if (strcmp(m, "POST")) pdb_http_respond_error(r, 405, "invalid_request_error", NULL, NULL, "use POST /v1/prefill");
        else handle_prefill(s, r);
    } else {
        snprintf(buf, sizeof buf, "no route %s %s (prefill server: POST /v1/prefill, GET /health, GET /metrics)", m, p);
        pdb_http_respond_error(r, 404, "invalid_request_error", NULL, NULL, buf);
    }
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int same_shape(const pdb_config *a, const pdb_config *b) {
    if (a->arch == PDB_ARCH_DEEPSEEK_V4 || b->arch == PDB_ARCH_DEEPSEEK_V4) { /* every field matters to the pools */
        char *ja = NULL, *jb = NULL;
        int same = a->arch == b->arch && !pdb_config_to_json(a, &ja) && !pdb_config_to_json(b, &jb) && !strcmp(ja, jb);
        free(ja);
        free(jb);
        return same;
    }
    return a->arch == b->arch && a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads && a->kv_lora_rank == b->kv_lora_rank &&
           a->qk_rope_head_dim == b->qk_rope_head_dim && a->qk_nope_head_dim == b->qk_nope_head_dim &&
           a->v_head_dim == b->v_head_dim && a->rope.type == b->rope.type && a->rope.theta == b->rope.theta &&
           a->rope.factor == b->rope.factor && a->rms_norm_eps == b->rms_norm_eps;
}

pdb_status pdb_prefill_server_start(const pdb_prefill_server_opts *o, pdb_prefill_server **out) {
    pdb_prefill_server *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "prefill server");
    s->o = *o;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pdb_config dcfg;
    uint8_t fp[32];
    pdb_status st = pdb_config_load(o->model_dir, &s->cfg);
    if (!st) st = pdb_config_load(o->decoder_dir, &dcfg);
    if (!st && s->cfg.arch != PDB_ARCH_DEEPSEEK_V2 && s->cfg.arch != PDB_ARCH_DEEPSEEK_V4)
        st = pdb_err_set(PDB_UNSUPPORTED, "%s: prefill supports deepseek_v2 and deepseek_v4", o->model_dir);
    int v4_sem = 0;
    if (!st && s->cfg.arch == PDB_ARCH_DEEPSEEK_V4) st = pdb_dec_model_v4_semantics(o->decoder_dir, &v4_sem);
    if (!st) st = pdb_dec_layout_of(&s->cfg, &s->layout);
    if (!st && !same_shape(&s->cfg, &dcfg))
        st = pdb_err_set(PDB_MISMATCH, "%s and %s are not the same model architecture (config.json differs)", o->model_dir,
                         o->decoder_dir);
    if (!st) st = pdb_st_open(o->model_dir, &s->est);
    if (!st) st = pdb_st_open(o->decoder_dir, &s->dst);
    if (!st) st = pdb_dec_model_identity(o->decoder_dir, &dcfg, s->dst, s->scheme, fp);
    if (st) goto fail;
    pdb_store_hash_hex(fp, s->fp_hex);
    s->n_engines = o->parallel > 0 ? (o->parallel < PS_MAX_ENGINES ? o->parallel : PS_MAX_ENGINES) : 1;
    const char *want = o->backend ? o->backend : "auto";
    for (int i = 0; i < s->n_engines && !st; i++) {
        pdb_prefill_backend_opts bo = {.cfg = &s->cfg, .engine = s->est, .decoder = s->dst, .device = o->device,
                                       .threads = o->threads ? o->threads : 0, .v4_sem = v4_sem};
        if (!o->threads && s->n_engines > 1) {
            long nc = sysconf(_SC_NPROCESSORS_ONLN) / s->n_engines;
            bo.threads = nc > 0 ? (int)nc : 1;
        }
        if (s->cfg.arch == PDB_ARCH_DEEPSEEK_V4 && !strcmp(want, "cuda")) {
            st = pdb_err_set(PDB_UNSUPPORTED, "prefill: the CUDA backend does not run deepseek_v4 yet; use --backend cpu");
            break;
        }
        if (strcmp(want, "cpu") && s->cfg.arch == PDB_ARCH_DEEPSEEK_V2) {
            st = pdb_prefill_backend_cuda_create(&bo, &s->engines[i]);
            if (st && !strcmp(want, "cuda")) break;
            if (st) PDB_INFO("prefill: no CUDA backend (%s); using the CPU", pdb_err_msg());
        }
        if (!s->engines[i]) st = pdb_prefill_backend_cpu_create(&bo, &s->engines[i]);
    }
    if (st) goto fail;
    snprintf(s->backend, sizeof s->backend, "%s", s->engines[0]->name);
    pdb_http_opts ho = {.host = o->host, .port = o->port, .api_key = o->api_key, .handler = handler, .user = s};
    if ((st = pdb_http_server_start(&ho, &s->http))) goto fail;
    PDB_INFO("prefill-server: %s on port %d, backend %s x%d, decoder %s (fingerprint %.16s..., scheme %s)", o->model_dir,
             pdb_http_server_port(s->http), s->backend, s->n_engines, o->decoder_dir, s->fp_hex, s->scheme);
    *out = s;
    return PDB_OK;
fail:
    pdb_prefill_server_stop(s);
    return st;
}

int pdb_prefill_server_port(const pdb_prefill_server *s) { return pdb_http_server_port(s->http); }
const char *pdb_prefill_server_backend(const pdb_prefill_server *s) { return s->backend; }

void pdb_prefill_server_stop(pdb_prefill_server *s) {
    if (!s) return;
    if (s->http) pdb_http_server_stop(s->http);
    for (int i = 0; i < s->n_engines; i++)
        if (s->engines[i]) s->engines[i]->destroy(s->engines[i]);
    pdb_st_close(s->est);
    pdb_st_close(s->dst);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
