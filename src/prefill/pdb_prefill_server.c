/* pdb_prefill_server: request validation, engine checkout (a pool of `parallel` backends under a
 * mutex + condition variable), production runs (the engine on its own thread, segments into the
 * spool) and the segment stream writer (the request's thread, draining the spool in order).
 * State: engines[] with busy flags, the spool (transfers and their segments, pdb_spool.h), the
 * count of running jobs (stop waits for them); counters for /metrics under mu. */
#include "pdb_prefill_server.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pdb_arch.h"
#include "pdb_clock.h"
#include "pdb_config.h"
#include "pdb_dec_model.h"
#include "pdb_http.h"
#include "pdb_json_ids.h"
#include "pdb_prefill_engine.h"
#include "pdb_proc.h"
#include "pdb_limits.h"
#include "pdb_segment.h"
#include "pdb_spool.h"
#include "pdb_store.h"

/* PS_MAX_RUNS: production runs one request may start (its first, then one per missing or
 * corrupt block found while draining) before it gives up. */
enum { PS_MAX_ENGINES = 64, PS_WRITE_PIECE = 1 << 20, PS_HTTP_QUEUE = 2 << 20, PS_MAX_RUNS = 4 };

struct pdb_prefill_server {
    pdb_prefill_server_opts o;
    pdb_config cfg;
    pdb_st *est, *dst;
    char fp_hex[65], scheme[32], backend[16];
    const pdb_arch_def *arch; /* the model's architecture (the registry's) */
    pdb_arch_layout layout; /* the decoder's store layout: what one segment holds */
    pdb_limits lim;         /* every limit, from the served window (pdb_limits) */
    int64_t max_tokens;     /* longest token_ids accepted (>= lim.window) */
    pdb_prefill_backend *engines[PS_MAX_ENGINES];
    int busy[PS_MAX_ENGINES], n_engines;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pdb_http_server *http;
    pdb_spool *spool;
    uint64_t spool_spill_max;
    int jobs, stopping;
    uint64_t requests, ok, failed, refused, tokens, blocks, bytes, spool_blocks, resumes, resumes_recomputed, acks;
};

/* ---- engine checkout ---------------------------------------------------------------------- */

static int engine_take(pdb_prefill_server *s, int wait_s) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += wait_s;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
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
    if (i < 0) return;
    pthread_mutex_lock(&s->mu);
    s->busy[i] = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- stream writing ----------------------------------------------------------------------- */

typedef struct {
    pdb_prefill_server *s;
    pdb_http_stream *hs;
    pdb_spool_xfer *x;
    uint64_t gen, bytes;
} ps_stream;

/* Waits for room in the HTTP queue in steps of a second, so a writer superseded by a resume (or
 * a server stopping) notices it even when its client neither reads nor goes away. */
static pdb_status write_all(ps_stream *w, const void *data, uint64_t len) {
    const char *p = data;
    while (len > 0) {
        size_t n = len < PS_WRITE_PIECE ? (size_t)len : PS_WRITE_PIECE;
        pdb_status st = pdb_http_stream_write(w->hs, p, n, 1000);
        if (st == PDB_TIMEOUT) {
            if (w->x && !pdb_spool_writer_current(w->x, w->gen))
                return pdb_err_set(PDB_IO, "prefill stream: taken over by a resume or released");
            continue;
        }
        if (st) return pdb_err_set(st, "prefill stream: consumer gone");
        p += n;
        len -= n;
        w->bytes += n;
    }
    return PDB_OK;
}

static pdb_status write_segment(ps_stream *w, int64_t block, const void *data, uint64_t bytes) {
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
    pdb_put_le32(buf + 16, (uint32_t)status);
    pdb_put_le32(buf + 20, ml);
    memcpy(buf + 24, msg, ml);
    write_all(w, buf, 24 + ml);
}

/* ---- transfers: what a producer needs, kept with the spool's transfer ---------------------- */

typedef struct {
    int32_t *ids;
    int64_t n, bs;
    uint64_t block_bytes; /* one segment: the block's pools in the store layout */
} ps_xinfo;

static void xinfo_free(void *p) {
    ps_xinfo *xi = p;
    if (!xi) return;
    free(xi->ids);
    free(xi);
}

/* The identity a resume must match: fingerprint, block size and every token id. */
static void request_key(const char *fp, int64_t bs, const int32_t *ids, int64_t n, uint8_t out[32]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned dn = 32;
    int64_t hdr[2] = {bs, n};
    if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL) || !EVP_DigestUpdate(c, fp, strlen(fp)) ||
        !EVP_DigestUpdate(c, hdr, sizeof hdr) || !EVP_DigestUpdate(c, ids, sizeof(int32_t) * (size_t)n) ||
        !EVP_DigestFinal_ex(c, out, &dn))
        memset(out, 0xff, 32); /* no digest: a key no request matches by accident (resumes recompute) */
    EVP_MD_CTX_free(c);
}

/* ---- production runs: the engine on its own thread, segments into the spool ---------------- */

typedef struct {
    pdb_prefill_server *s;
    pdb_spool_xfer *x;
    int eng;
    int64_t from;
    pdb_status st;
    pdb_prefill_stats ps;
    pthread_t th;
    int enough; /* every later block is already held: the run stopped early */
} ps_run;

static pdb_status run_on_segment(void *user, int64_t block, const void *data, uint64_t bytes) {
    ps_run *r = user;
    PDB_TRY(pdb_spool_put_segment(r->x, block, data, bytes));
    if (block + 1 < pdb_spool_xfer_blocks(r->x) && pdb_spool_holds(r->x, block + 1)) { /* e.g. one corrupt file redone */
        r->enough = 1;
        return pdb_err_set(PDB_IO, "prefill: the remaining blocks are held");
    }
    return PDB_OK;
}

static void *run_main(void *arg) {
    ps_run *r = arg;
    ps_xinfo *xi = pdb_spool_xfer_user(r->x);
    r->st = pdb_prefill_run(r->s->engines[r->eng], &r->s->cfg, xi->ids, xi->n, xi->bs, r->from, r->s->o.chunk, run_on_segment, r,
                            &r->ps);
    if (r->enough) r->st = PDB_OK;
    engine_give(r->s, r->eng);
    pdb_spool_end_production(r->x, r->st, r->st ? pdb_err_msg() : NULL);
    return NULL;
}

/* Start a production run from block `from` on engine eng (given back on failure). */
static pdb_status run_start(pdb_prefill_server *s, pdb_spool_xfer *x, int eng, int64_t from, ps_run *r) {
    *r = (ps_run){.s = s, .x = x, .eng = eng, .from = from};
    pdb_status st = pdb_spool_begin_production(x, from, NULL);
    if (st) { engine_give(s, eng); return st; }
    if (pthread_create(&r->th, NULL, run_main, r)) {
        engine_give(s, eng);
        pdb_spool_end_production(x, PDB_NOMEM, "prefill server: cannot start an engine thread");
        return pdb_err_set(PDB_NOMEM, "prefill server: cannot start an engine thread");
    }
    return PDB_OK;
}

/* ---- the prefill job: runs on its own thread (libmicrohttpd sends nothing for a connection
 * until its handler returns); drains the transfer's spool in block order into the stream,
 * starting production runs when blocks are missing (a new transfer, a resume whose segments are
 * no longer all held, a spill file that failed its checksum) ---------------------------------- */

typedef struct {
    pdb_prefill_server *s;
    pdb_spool_xfer *x;
    int eng;      /* an engine taken by the handler, or -1 */
    int resumed;  /* the request named a retained transfer */
    int64_t fb;
    ps_stream w;
} ps_job;

static void job_done(pdb_prefill_server *s) {
    pthread_mutex_lock(&s->mu);
    s->jobs--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *prefill_job(void *arg) {
    ps_job *job = arg;
    pdb_prefill_server *s = job->s;
    pdb_spool_xfer *x = job->x;
    ps_xinfo *xi = pdb_spool_xfer_user(x);
    ps_stream *w = &job->w;
    int64_t n = xi->n, bs = xi->bs, fb = job->fb, nb = n / bs;
    char hj[512], msg[700];
    int base_gen;
    w->x = x;
    w->gen = pdb_spool_attach_writer(x, &base_gen);
    pthread_mutex_lock(&s->mu);
    s->requests++;
    pthread_mutex_unlock(&s->mu);
    int hl = snprintf(hj, sizeof hj,
                      "{\"version\":1,\"fingerprint\":\"%s\",\"block_size\":%lld,\"first_block\":%lld,\"n_blocks\":%lld,"
                      "\"block_bytes\":%llu}",
                      s->fp_hex, (long long)bs, (long long)fb, (long long)nb, (unsigned long long)xi->block_bytes);
    uint8_t prefix[16];
    pdb_segment_frame_prefix(PDB_SEG_HEADER, (uint64_t)hl, prefix);
    ps_run runs[PS_MAX_RUNS];
    int nr = 0, gone = 0;
    int64_t cur = fb, from_spool = 0, from_engine = 0;
    double t0 = pdb_clock_now();
    pdb_status st = write_all(w, prefix, 16);
    if (!st) st = write_all(w, hj, (uint64_t)hl);
    if (st) gone = 1;
    if (!st && !job->resumed && fb < nb) {
        int e = job->eng;
        job->eng = -1;
        if (!(st = run_start(s, x, e, fb, &runs[nr]))) nr++;
    }
    while (!st && cur < nb) {
        pdb_spool_seg seg;
        pdb_status ts = pdb_spool_take_segment(x, w->gen, cur, &seg);
        if (!ts) {
            st = write_segment(w, cur, seg.data, seg.bytes);
            pdb_spool_done_segment(x, &seg, !st);
            if (st) { gone = 1; break; }
            if (seg.prod_gen > base_gen) from_engine++;
            else from_spool++;
            cur++;
            continue;
        }
        if ((ts == PDB_NOT_FOUND || ts == PDB_CORRUPT) && nr < PS_MAX_RUNS) {
            PDB_INFO("prefill: transfer %s: block %lld %s; recomputing from it", pdb_spool_xfer_id(x), (long long)cur,
                     ts == PDB_CORRUPT ? "failed its spill checksum" : "is not held");
            pdb_spool_cancel_production(x); /* a run from a later block (or an old one) stops */
            int e = job->eng;
            job->eng = -1;
            if (e < 0) e = engine_take(s, s->o.wait_s > 0 ? s->o.wait_s : 120);
            if (e < 0) { st = pdb_err_set(PDB_TIMEOUT, "all prefill engines are busy"); break; }
            if (!(st = run_start(s, x, e, cur, &runs[nr]))) nr++;
            continue;
        }
        st = ts;
        if (st == PDB_IO) gone = 1; /* superseded or shutting down: nobody reads this stream */
    }
    if (job->eng >= 0) engine_give(s, job->eng);
    if (gone) pdb_spool_detach_writer(x, w->gen); /* a running engine keeps filling the spool (bounded) */
    pdb_prefill_stats tot = {0};
    for (int i = 0; i < nr; i++) {
        pthread_join(runs[i].th, NULL);
        tot.tokens_run += runs[i].ps.tokens_run;
        tot.engine_s += runs[i].ps.engine_s;
        tot.callback_s += runs[i].ps.callback_s;
    }
    if (st) snprintf(msg, sizeof msg, "%s", pdb_err_msg());
    else snprintf(msg, sizeof msg,
                  "{\"engine_s\":%.6f,\"tokens\":%lld,\"blocks\":%lld,\"spool_blocks\":%lld,\"engine_blocks\":%lld,"
                  "\"transfer\":\"%s\"}",
                  tot.engine_s, (long long)tot.tokens_run, (long long)(from_spool + from_engine), (long long)from_spool,
                  (long long)from_engine, pdb_spool_xfer_id(x));
    if (!gone) write_end(w, st ? (int32_t)st : 0, msg);
    pdb_http_stream_close(w->hs);
    if (!gone) pdb_spool_detach_writer(x, w->gen);
    PDB_INFO("prefill: transfer %s%s: %lld tokens, blocks %lld..%lld: %lld from the spool, %lld from the engine (%lld tokens run, "
             "%.2fs), %.1f MB in %.2fs%s%s",
             pdb_spool_xfer_id(x), job->resumed ? " (resume)" : "", (long long)n, (long long)fb, (long long)nb - 1,
             (long long)from_spool, (long long)from_engine, (long long)tot.tokens_run, tot.engine_s, w->bytes / 1e6,
             pdb_clock_now() - t0, st ? ": " : "", st ? msg : "");
    pthread_mutex_lock(&s->mu);
    if (st) s->failed++;
    else s->ok++;
    s->tokens += (uint64_t)tot.tokens_run;
    s->blocks += (uint64_t)(from_spool + from_engine);
    s->spool_blocks += (uint64_t)from_spool;
    s->bytes += w->bytes;
    if (job->resumed) s->resumes++;
    pthread_mutex_unlock(&s->mu);
    pdb_spool_unref_xfer(x);
    free(job);
    job_done(s);
    return NULL;
}

/* ---- handlers ----------------------------------------------------------------------------- */

static int is_transfer_id(const char *t) {
    if (!t || strlen(t) != 32) return 0;
    for (int i = 0; i < 32; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) return 0;
    return 1;
}

/* A /v1/prefill request after validation: the prompt (ids owned here until a transfer takes them). */
typedef struct pf_req {
    int32_t *ids;
    int64_t n, bs, fb;
    const char *tr; /* the transfer to resume, or NULL */
} pf_req;

/* Parse and validate the body j (token_ids, block_size, fingerprint, first_block, transfer); on
 * a bad request, answers it (400 / 409 / 413 / 503) and returns -1. */
static int pf_parse(pdb_prefill_server *s, pdb_http_request *r, json_t *j, pdb_json_ids *fast, pf_req *q) {
    char msg[600];
    json_t *arr = fast->found ? NULL : json_object_get(j, "token_ids");
    json_t *jbs = json_object_get(j, "block_size"), *jfb = json_object_get(j, "first_block");
    json_t *jtr = json_object_get(j, "transfer");
    const char *fp = json_string_value(json_object_get(j, "fingerprint")), *tr = json_string_value(jtr);
    int64_t bs = json_integer_value(jbs), fb = jfb ? json_integer_value(jfb) : 0;
    int64_t n = fast->found ? fast->n : (int64_t)json_array_size(arr);
    if (!fast->found && (!json_is_array(arr) || n == 0)) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", NULL, "token_ids must be a non-empty array");
        return -1;
    }
    if (!json_is_integer(jbs) || s->arch->check_block_size(&s->cfg, bs)) {
        snprintf(msg, sizeof msg, "block_size must be %s", s->arch->block_size_rule);
        pdb_http_respond_error(r, 400, "invalid_request_error", "block_size", NULL, msg);
        return -1;
    }
    if (s->o.block_size && bs != s->o.block_size) {
        snprintf(msg, sizeof msg, "block_size %lld: this prefill server serves block size %lld only (--block-size)", (long long)bs,
                 (long long)s->o.block_size);
        pdb_http_respond_error(r, 400, "invalid_request_error", "block_size", NULL, msg);
        return -1;
    }
    if (!fp) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "fingerprint", NULL, "fingerprint (64 hex) is required");
        return -1;
    }
    if (jfb && !json_is_integer(jfb)) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "first_block", NULL, "first_block must be an integer");
        return -1;
    }
    if (jtr && !json_is_null(jtr) && !is_transfer_id(tr)) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "transfer", NULL,
                               "transfer must be the 32 lowercase hex digits of an earlier answer's X-PD-Transfer");
        return -1;
    }
    if (strcmp(fp, s->fp_hex)) {
        snprintf(msg, sizeof msg, "decoder fingerprint mismatch: this prefill server computes for %s (scheme %s), the request is for %.64s",
                 s->fp_hex, s->scheme, fp);
        pthread_mutex_lock(&s->mu);
        s->refused++;
        pthread_mutex_unlock(&s->mu);
        pdb_http_respond_error(r, 409, "invalid_request_error", "fingerprint", "fingerprint_mismatch", msg);
        return -1;
    }
    if (n > s->lim.window) { /* past the served window: the window named, as the decoder does */
        snprintf(msg, sizeof msg, "the prompt has %lld tokens; this model's maximum context length is %lld tokens", (long long)n,
                 (long long)s->lim.window);
        pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", "context_length_exceeded", msg);
        return -1;
    }
    if (n > s->max_tokens) { /* cannot happen: max_tokens >= window (checked at start) */
        snprintf(msg, sizeof msg, "%lld tokens exceed this server's limit of %lld", (long long)n, (long long)s->max_tokens);
        pdb_http_respond_error(r, 413, "invalid_request_error", "token_ids", NULL, msg);
        return -1;
    }
    if (fb < 0 || fb > n / bs) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "first_block", NULL, "first_block outside 0..full blocks of the prompt");
        return -1;
    }
    if (fast->found) { /* read by pdb_json_ids_scan: the same checks, no JSON tree of the ids */
        if (fast->bad_index >= 0) {
            snprintf(msg, sizeof msg, "token_ids[%lld] is not a token id of this model (0..%lld)", (long long)fast->bad_index,
                     (long long)s->cfg.vocab_size - 1);
            pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", NULL, msg);
            return -1;
        }
        q->ids = fast->ids;
        fast->ids = NULL;
        q->n = n, q->bs = bs, q->fb = fb, q->tr = tr && is_transfer_id(tr) ? tr : NULL;
        return 0;
    }
    q->ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!q->ids) { pdb_http_respond_error(r, 503, "server_error", NULL, NULL, "out of memory"); return -1; }
    for (int64_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        int64_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= s->cfg.vocab_size) {
            snprintf(msg, sizeof msg, "token_ids[%lld] is not a token id of this model (0..%lld)", (long long)i,
                     (long long)s->cfg.vocab_size - 1);
            pdb_http_respond_error(r, 400, "invalid_request_error", "token_ids", NULL, msg);
            return -1;
        }
        q->ids[i] = (int32_t)id;
    }
    q->n = n, q->bs = bs, q->fb = fb, q->tr = tr && is_transfer_id(tr) ? tr : NULL;
    return 0;
}

/* The transfer a resume names, when the spool still holds it (*x, *resumed = 1); a transfer for
 * other ids is answered 409 (-1); one no longer held is recomputed (*x NULL). */
static int pf_find_resume(pdb_prefill_server *s, pdb_http_request *r, const pf_req *q, const uint8_t key[32],
                          pdb_spool_xfer **x, int *resumed) {
    char msg[600];
    *resumed = 0;
    if (!q->tr) return 0;
    if (!pdb_spool_find_xfer(s->spool, q->tr, x)) {
        if (memcmp(pdb_spool_xfer_key(*x), key, 32)) {
            snprintf(msg, sizeof msg, "transfer %s was for other token_ids, block_size or fingerprint; a resume repeats them", q->tr);
            pdb_http_respond_error(r, 409, "invalid_request_error", "transfer", "transfer_mismatch", msg);
            return -1;
        }
        *resumed = 1;
        return 0;
    }
    PDB_INFO("prefill: transfer %s is no longer retained; recomputing", q->tr);
    pthread_mutex_lock(&s->mu);
    s->resumes_recomputed++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Answer with the stream and start its job: an engine unless the spool covers the resume, the
 * transfer (taking q->ids) when there is none yet, the worker thread. On failure the request is
 * answered (503) and everything taken is given back. *x: the caller's reference, NULL once the
 * job holds it. */
static void pf_start(pdb_prefill_server *s, pdb_http_request *r, pf_req *q, const uint8_t key[32], pdb_spool_xfer **x,
                     int resumed) {
    int need_engine = !resumed || !pdb_spool_covers(*x, q->fb), eng = -1;
    if (need_engine && (eng = engine_take(s, s->o.wait_s > 0 ? s->o.wait_s : 120)) < 0) {
        pdb_http_respond_error(r, 503, "server_error", NULL, "busy", "all prefill engines are busy; try again");
        return;
    }
    if (!*x) {
        ps_xinfo *xi = calloc(1, sizeof *xi);
        uint64_t block_bytes = pdb_store_layout_block_bytes(&s->layout.layout, q->bs);
        if (!xi || pdb_spool_create_xfer(s->spool, key, q->n / q->bs, block_bytes, xi, xinfo_free, x)) {
            free(xi);
            engine_give(s, eng);
            pdb_http_respond_error(r, 503, "server_error", NULL, NULL, "out of memory (transfer)");
            return;
        }
        *xi = (ps_xinfo){.ids = q->ids, .n = q->n, .bs = q->bs, .block_bytes = block_bytes};
        q->ids = NULL; /* owned by the transfer */
    }
    ps_job *job = calloc(1, sizeof *job);
    if (!job) {
        if (eng >= 0) engine_give(s, eng);
        pdb_http_respond_error(r, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    *job = (ps_job){.s = s, .x = *x, .eng = eng, .resumed = resumed, .fb = q->fb};
    pdb_http_header hdr = {"X-PD-Transfer", pdb_spool_xfer_id(*x)};
    if (pdb_http_respond_stream(r, 200, "application/x-pdbridge-segments", &hdr, 1, PS_HTTP_QUEUE, NULL, &job->w.hs)) {
        if (eng >= 0) engine_give(s, eng);
        free(job);
        return;
    }
    job->w.s = s;
    pthread_mutex_lock(&s->mu);
    s->jobs++;
    pthread_mutex_unlock(&s->mu);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, prefill_job, job)) {
        write_end(&job->w, PDB_NOMEM, "prefill server: cannot start a worker thread");
        pdb_http_stream_close(job->w.hs);
        if (eng >= 0) engine_give(s, eng);
        free(job);
        job_done(s);
    } else {
        *x = NULL; /* the job's reference */
    }
    pthread_attr_destroy(&at);
}

/* The body of POST /v1/prefill streams into a pdb_json_ids reader (the route's sink): the server
 * never holds the body, only the ids (4 B each) and the other members as text. */
static pdb_status prefill_sink_feed(void *user, const char *data, size_t len) { return pdb_json_ids_reader_feed(user, data, len); }
static void prefill_sink_release(void *user) { pdb_json_ids_reader_free(user); }

static int body_route(void *user, pdb_http_request *r, pdb_http_body_sink *sink) {
    pdb_prefill_server *s = user;
    pdb_json_ids_reader *rd;
    if (strcmp(pdb_http_request_path(r), "/v1/prefill") || strcmp(pdb_http_request_method(r), "POST")) return 0;
    if (pdb_json_ids_reader_new("token_ids", s->cfg.vocab_size, &rd)) return 0; /* no memory: buffered whole, as before */
    *sink = (pdb_http_body_sink){.feed = prefill_sink_feed, .release = prefill_sink_release, .user = rd};
    return 1;
}

/* POST /v1/prefill: parse -> find a resumed transfer -> start the streamed job. The token_ids
 * array is read without a JSON tree when it is plain (pdb_json_ids; ~48 bytes per id otherwise),
 * the rest of the body by jansson; any other body is parsed whole, as before (from the reader's
 * stand-in when the body was streamed: the same values, errors at the same line and column). */
static void handle_prefill(pdb_prefill_server *s, pdb_http_request *r) {
    json_error_t e;
    pdb_json_ids fast;
    pdb_json_ids_reader *rd = pdb_http_request_sink(r);
    pdb_status rs = rd ? pdb_json_ids_reader_finish(rd, &fast)
                       : pdb_json_ids_scan(pdb_http_request_body(r), pdb_http_request_body_len(r), "token_ids", s->cfg.vocab_size, &fast);
    if (rs) {
        pdb_http_respond_error(r, 503, "server_error", NULL, NULL, pdb_err_msg());
        return;
    }
    json_t *j = fast.rest ? json_loadb(fast.rest, fast.rest_len, 0, &e)
                          : json_loadb(pdb_http_request_body(r), pdb_http_request_body_len(r), 0, &e);
    if (!j && fast.found) { /* the error at the body's own line and column (the rest lacks the array's lines) */
        char *t;
        size_t tl;
        if (!pdb_json_ids_stand_in(&fast, s->cfg.vocab_size, &t, &tl)) {
            json_t *k = json_loadb(t, tl, 0, &e);
            json_decref(k); /* NULL: jansson parses the stand-in iff it parses the rest */
            free(t);
        }
    }
    pdb_http_request_drop_body(r); /* read whole: a 1M-token prefill streams for minutes without it */
    pf_req q = {0};
    pdb_spool_xfer *x = NULL;
    if (!j || !json_is_object(j)) {
        char msg[600];
        snprintf(msg, sizeof msg, "request body is not a JSON object (line %d column %d: %s)", j ? 0 : e.line, j ? 0 : e.column,
                 j ? "not an object" : e.text);
        pdb_http_respond_error(r, 400, "invalid_request_error", NULL, NULL, msg);
    } else if (!pf_parse(s, r, j, &fast, &q)) {
        uint8_t key[32];
        int resumed;
        request_key(s->fp_hex, q.bs, q.ids, q.n, key);
        if (!pf_find_resume(s, r, &q, key, &x, &resumed)) pf_start(s, r, &q, key, &x, resumed);
    }
    pdb_spool_unref_xfer(x);
    free(q.ids);
    json_decref(j);
    pdb_json_ids_free(&fast);
}

/* POST /v1/prefill/ack {"transfer": id, "through_block": b}: blocks < b are no longer needed. */
static void handle_ack(pdb_prefill_server *s, pdb_http_request *r) {
    json_error_t e;
    json_t *j = json_loadb(pdb_http_request_body(r), pdb_http_request_body_len(r), 0, &e);
    char msg[400];
    pdb_spool_xfer *x = NULL;
    json_t *jtb = j ? json_object_get(j, "through_block") : NULL;
    const char *tr = j ? json_string_value(json_object_get(j, "transfer")) : NULL;
    if (!j || !json_is_object(j)) {
        snprintf(msg, sizeof msg, "request body is not a JSON object (line %d column %d: %s)", j ? 0 : e.line, j ? 0 : e.column,
                 j ? "not an object" : e.text);
        pdb_http_respond_error(r, 400, "invalid_request_error", NULL, NULL, msg);
    } else if (!is_transfer_id(tr)) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "transfer", NULL,
                               "transfer must be the 32 lowercase hex digits of an answer's X-PD-Transfer");
    } else if (!json_is_integer(jtb) || json_integer_value(jtb) < 0) {
        pdb_http_respond_error(r, 400, "invalid_request_error", "through_block", NULL,
                               "through_block must be an integer >= 0 (blocks below it are released)");
    } else if (pdb_spool_find_xfer(s->spool, tr, &x)) {
        pdb_http_respond_error(r, 404, "invalid_request_error", "transfer", "transfer_not_found", pdb_err_msg());
    } else {
        int64_t rel = 0, tb = json_integer_value(jtb);
        pdb_status st = pdb_spool_ack(x, tb, &rel);
        if (st) pdb_http_respond_error(r, 404, "invalid_request_error", "transfer", "transfer_not_found", pdb_err_msg());
        else {
            int n = snprintf(msg, sizeof msg, "{\"transfer\":\"%s\",\"released\":%lld,\"transfer_released\":%s}", tr,
                             (long long)rel, tb >= pdb_spool_xfer_blocks(x) ? "true" : "false");
            pthread_mutex_lock(&s->mu);
            s->acks++;
            pthread_mutex_unlock(&s->mu);
            pdb_http_respond(r, 200, "application/json", msg, (size_t)n, NULL, 0);
        }
    }
    pdb_spool_unref_xfer(x);
    json_decref(j);
}

static void handler(void *user, pdb_http_request *r) {
    pdb_prefill_server *s = user;
    const char *m = pdb_http_request_method(r), *p = pdb_http_request_path(r);
    char buf[4096];
    if (!strcmp(p, "/health") && !strcmp(m, "GET")) {
        json_t *lim = pdb_limits_json(&s->lim);
        json_object_set_new(lim, "max_body", json_integer((json_int_t)s->lim.max_body_bytes));
        json_object_set_new(lim, "max_tokens", json_integer((json_int_t)s->max_tokens));
        json_object_set_new(lim, "spill_max_bytes", json_integer((json_int_t)s->spool_spill_max));
        json_object_set_new(lim, "block_size_fixed", json_boolean(s->o.block_size != 0));
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:o}", "status", "ok", "role", "prefill", "fingerprint", s->fp_hex,
                              "scheme", s->scheme, "backend", s->backend, "engines", s->n_engines, "model_type", s->cfg.model_type,
                              "limits", lim);
        char *b = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        if (b) pdb_http_respond(r, 200, "application/json", b, strlen(b), NULL, 0);
        else pdb_http_respond_error(r, 500, "server_error", NULL, NULL, "out of memory");
        free(b);
    } else if (!strcmp(p, "/metrics") && !strcmp(m, "GET")) {
        pdb_spool_stats ss;
        pdb_spool_get_stats(s->spool, &ss);
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
                         "# TYPE pdbridge_prefill_engines_busy gauge\npdbridge_prefill_engines_busy %d\n"
                         "# TYPE pdbridge_prefill_spool_blocks_total counter\npdbridge_prefill_spool_blocks_total %llu\n"
                         "# TYPE pdbridge_prefill_resumes_total counter\n"
                         "pdbridge_prefill_resumes_total{from=\"spool\"} %llu\n"
                         "pdbridge_prefill_resumes_total{from=\"expired\"} %llu\n"
                         "# TYPE pdbridge_prefill_acks_total counter\npdbridge_prefill_acks_total %llu\n"
                         "# TYPE pdbridge_prefill_spill_bytes gauge\npdbridge_prefill_spill_bytes %llu\n"
                         "# TYPE pdbridge_prefill_spill_peak_bytes gauge\npdbridge_prefill_spill_peak_bytes %llu\n"
                         "# TYPE pdbridge_prefill_spill_max_bytes gauge\npdbridge_prefill_spill_max_bytes %llu\n"
                         "# TYPE pdbridge_prefill_spill_files gauge\npdbridge_prefill_spill_files %llu\n"
                         "# TYPE pdbridge_prefill_spool_memory_bytes gauge\npdbridge_prefill_spool_memory_bytes %llu\n"
                         "# TYPE pdbridge_prefill_spool_transfers gauge\npdbridge_prefill_spool_transfers %d\n"
                         "# TYPE pdbridge_prefill_engine_pauses_total counter\npdbridge_prefill_engine_pauses_total %llu\n"
                         "# TYPE pdbridge_prefill_spool_evicted_total counter\npdbridge_prefill_spool_evicted_total %llu\n"
                         "# TYPE pdbridge_prefill_spool_corrupt_total counter\npdbridge_prefill_spool_corrupt_total %llu\n"
                         "# TYPE pdbridge_prefill_spool_expired_total counter\npdbridge_prefill_spool_expired_total %llu\n",
                         (unsigned long long)s->ok, (unsigned long long)s->failed, (unsigned long long)s->refused,
                         (unsigned long long)s->tokens, (unsigned long long)s->blocks, (unsigned long long)s->bytes, busy,
                         (unsigned long long)s->spool_blocks, (unsigned long long)s->resumes,
                         (unsigned long long)s->resumes_recomputed, (unsigned long long)s->acks,
                         (unsigned long long)ss.spill_bytes, (unsigned long long)ss.spill_peak,
                         (unsigned long long)s->spool_spill_max, (unsigned long long)ss.spill_files,
                         (unsigned long long)ss.mem_bytes, ss.transfers, (unsigned long long)ss.pauses,
                         (unsigned long long)ss.evicted, (unsigned long long)ss.corrupt, (unsigned long long)ss.expired);
        pthread_mutex_unlock(&s->mu);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
        len += pdb_proc_metrics_text(buf + len, sizeof buf - len);
        pdb_http_respond(r, 200, "text/plain; version=0.0.4", buf, len, NULL, 0);
    } else if (!strcmp(p, "/v1/prefill/ack")) {
        if (strcmp(m, "POST")) pdb_http_respond_error(r, 405, "invalid_request_error", NULL, NULL, "use POST /v1/prefill/ack");
        else handle_ack(s, r);
    } else if (!strcmp(p, "/v1/prefill")) {
        if (strcmp(m, "POST")) pdb_http_respond_error(r, 405, "invalid_request_error", NULL, NULL, "use POST /v1/prefill");
        else handle_prefill(s, r);
    } else {
        snprintf(buf, sizeof buf, "no route %s %s (prefill server: POST /v1/prefill, POST /v1/prefill/ack, GET /health, GET /metrics)", m, p);
        pdb_http_respond_error(r, 404, "invalid_request_error", NULL, NULL, buf);
    }
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

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
    if (!st && (st = pdb_arch_of(&s->cfg, &s->arch))) st = pdb_err_wrap(st, "%s", o->model_dir);
    int sem = 0;
    if (!st) st = pdb_dec_model_semantics_of(o->decoder_dir, &dcfg, &sem);
    if (!st) st = s->arch->layout(&s->cfg, sem, &s->layout);
    if (!st && !s->arch->same_cache(&s->cfg, &dcfg))
        st = pdb_err_set(PDB_MISMATCH, "%s and %s are not the same model architecture (config.json differs)", o->model_dir,
                         o->decoder_dir);
    if (!st) st = pdb_st_open(o->model_dir, &s->est);
    if (!st) st = pdb_st_open(o->decoder_dir, &s->dst);
    if (!st) st = pdb_dec_model_identity(o->decoder_dir, &dcfg, s->dst, s->scheme, fp);
    if (!st && o->block_size && (st = s->arch->check_block_size(&s->cfg, o->block_size)))
        st = pdb_err_wrap(st, "prefill-server --block-size %lld", (long long)o->block_size);
    if (!st) { /* every limit from the window: refused when --max-context is above the model's or --max-tokens below the window */
        int64_t bs = o->block_size ? o->block_size : 2048;
        pdb_limits_in li = {.model_window = s->cfg.max_position_embeddings, .max_context = o->max_context, .block_size = bs,
                            .vocab_size = s->cfg.vocab_size, .block_bytes = pdb_store_layout_block_bytes(&s->layout.layout, bs)};
        st = pdb_limits_derive(&li, &s->lim);
        if (!st) st = pdb_limits_check_tokens(&s->lim, "--max-tokens", o->max_tokens);
        if (st) st = pdb_err_wrap(st, "prefill-server");
        s->max_tokens = o->max_tokens ? o->max_tokens : s->lim.window;
    }
    if (st) goto fail;
    pdb_store_hash_hex(fp, s->fp_hex);
    s->n_engines = o->parallel > 0 ? (o->parallel < PS_MAX_ENGINES ? o->parallel : PS_MAX_ENGINES) : 1;
    const char *want = o->backend ? o->backend : "auto";
    for (int i = 0; i < s->n_engines && !st; i++) {
        pdb_prefill_backend_opts bo = {.cfg = &s->cfg, .engine = s->est, .decoder = s->dst, .semantics = sem,
                                       .precision = o->precision,
                                       .exec = {.device = o->device, .threads = o->threads ? o->threads : 0}};
        if (!o->threads && s->n_engines > 1) {
            long nc = sysconf(_SC_NPROCESSORS_ONLN) / s->n_engines;
            bo.exec.threads = nc > 0 ? (int)nc : 1;
        }
        st = pdb_prefill_backend_create(&bo, want, &s->engines[i]);
    }
    if (st) goto fail;
    snprintf(s->backend, sizeof s->backend, "%s", s->engines[0]->name);
    s->spool_spill_max = o->spill_max_bytes < 0 ? 0 : o->spill_max_bytes ? (uint64_t)o->spill_max_bytes : (uint64_t)1 << 30;
    pdb_spool_opts so = {.dir = o->spill_dir, .spill_max_bytes = s->spool_spill_max,
                         .mem_max_bytes = o->spool_mem_bytes > 0 ? (uint64_t)o->spool_mem_bytes : (uint64_t)4 << 20,
                         .ttl_ms = (o->spool_ttl_s > 0 ? o->spool_ttl_s : 120) * 1000LL};
    if ((st = pdb_spool_open(&so, &s->spool))) goto fail;
    if (s->spool_spill_max < s->lim.window_spill_bytes)
        PDB_WARN("prefill-server: the spill (--spill-max-mb %llu) holds less than a full window's transfer (%lld segments, %llu bytes "
                 "at block size %lld): the engine pauses while the front drains (nothing is lost), but a resume after a break "
                 "recomputes what the spill no longer holds", (unsigned long long)(s->spool_spill_max >> 20),
                 (long long)s->lim.window_blocks, (unsigned long long)s->lim.window_spill_bytes, (long long)s->lim.block_size);
    pdb_http_opts ho = {.host = o->host, .port = o->port, .api_key = o->api_key, .max_body = (size_t)s->lim.max_body_bytes,
                        .idle_timeout_s = (unsigned)s->lim.http_idle_timeout_s,
                        .handler = handler, .body_route = body_route, .user = s};
    if ((st = pdb_http_server_start(&ho, &s->http))) goto fail;
    PDB_INFO("prefill-server: %s on port %d, backend %s x%d, decoder %s (fingerprint %.16s..., scheme %s), spill %s (at most %llu MB)",
             o->model_dir, pdb_http_server_port(s->http), s->backend, s->n_engines, o->decoder_dir, s->fp_hex, s->scheme,
             pdb_spool_dir(s->spool), (unsigned long long)(s->spool_spill_max >> 20));
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
    pthread_mutex_lock(&s->mu); /* jobs and engines waiting for one see `stopping`; the spool wakes its waiters */
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pdb_spool_shutdown(s->spool);
    if (s->http) pdb_http_server_stop(s->http);
    pthread_mutex_lock(&s->mu);
    while (s->jobs > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pdb_spool_close(s->spool); /* the spill files and the directory go */
    for (int i = 0; i < s->n_engines; i++)
        if (s->engines[i]) s->engines[i]->destroy(s->engines[i]);
    pdb_st_close(s->est);
    pdb_st_close(s->dst);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
