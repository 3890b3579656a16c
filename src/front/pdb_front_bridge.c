/* pdb_front_bridge: libcurl POST to /v1/prefill, the PDBF parser fed from curl's write callback,
 * and store writes from the parser's segment callback. State (bridge_ctx): the parser, the store
 * stream, counters, and the first failure reason (which stops the transfer). */
#include "pdb_front_bridge.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_dec_model.h"
#include "pdb_segment.h"

typedef struct {
    pdb_store *store;
    pdb_store_stream *stream;
    pdb_segment_parser *parser;
    const char *fp;
    int64_t bs, first, end;
    pdb_front_bridge_result *res;
    const pdb_store_layout *layout;
    int http_status;
    char errbody[512];
    size_t errlen;
    int32_t end_status;
    int got_end;
    double engine_s;
} bridge_ctx;

static double br_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void set_reason(bridge_ctx *c, const char *r) {
    if (!c->res->reason[0]) snprintf(c->res->reason, sizeof c->res->reason, "%s", r);
}

static pdb_status on_header(void *u, const pdb_segment_header *h) {
    bridge_ctx *c = u;
    if (strcmp(h->fingerprint, c->fp) || h->block_size != c->bs || h->first_block != c->first || h->n_blocks < c->end) {
        set_reason(c, "prefill_header_mismatch");
        return pdb_err_set(PDB_MISMATCH, "prefill stream header does not match the request");
    }
    if (h->block_bytes != pdb_store_block_bytes(c->store)) {
        set_reason(c, "prefill_layout_mismatch");
        return pdb_err_set(PDB_MISMATCH, "prefill segments of %llu bytes, store blocks are %llu",
                           (unsigned long long)h->block_bytes, (unsigned long long)pdb_store_block_bytes(c->store));
    }
    return PDB_OK;
}

static pdb_status on_segment(void *u, int64_t b, const void *data, uint64_t len) {
    bridge_ctx *c = u;
    if (b >= c->end) return PDB_OK; /* more than asked: ignore */
    double t0 = br_now();
    const void *in[PDB_DEC_MAX_POOLS] = {data};
    if (c->layout) pdb_dec_block_pools(c->layout, c->bs, data, in);
    pdb_status s = pdb_store_stream_put(c->stream, b, in);
    c->res->write_ms += (br_now() - t0) * 1e3;
    if (s) {
        set_reason(c, "store_write_failed");
        PDB_WARN("bridge: block %lld not written: %s", (long long)b, pdb_err_msg());
        return s;
    }
    c->res->blocks_written++;
    c->res->bytes += len;
    return PDB_OK;
}

static void on_end(void *u, int32_t status, const char *msg) {
    bridge_ctx *c = u;
    c->got_end = 1;
    c->end_status = status;
    if (status) {
        set_reason(c, "prefill_engine_error");
        PDB_WARN("bridge: prefill reported an error: %s", msg);
        return;
    }
    json_t *j = json_loads(msg, 0, NULL);
    if (j) c->engine_s += json_number_value(json_object_get(j, "engine_s")); /* summed over resumed attempts */
    json_decref(j);
}

static size_t write_cb(char *ptr, size_t sz, size_t nm, void *u) {
    bridge_ctx *c = u;
    size_t n = sz * nm;
    if (c->http_status != 200) { /* keep the error body for the log */
        size_t take = n < sizeof c->errbody - 1 - c->errlen ? n : sizeof c->errbody - 1 - c->errlen;
        memcpy(c->errbody + c->errlen, ptr, take);
        c->errlen += take;
        c->errbody[c->errlen] = 0;
        return n;
    }
    if (pdb_segment_parser_feed(c->parser, ptr, n)) {
        if (!c->res->reason[0]) {
            PDB_WARN("bridge: bad segment stream: %s", pdb_err_msg());
            set_reason(c, "bad_segment");
        }
        return 0; /* abort the transfer */
    }
    return n;
}

static size_t header_cb(char *buf, size_t sz, size_t nm, void *u) {
    bridge_ctx *c = u;
    int code;
    if (sz * nm > 9 && !strncmp(buf, "HTTP/", 5) && sscanf(buf, "HTTP/%*s %d", &code) == 1) c->http_status = code;
    return sz * nm;
}

static char *request_body(const int32_t *ids, int64_t n, int64_t bs, int64_t first, const char *fp) {
    size_t cap = (size_t)n * 12 + 256, k = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    k += (size_t)snprintf(b + k, cap - k, "{\"block_size\":%lld,\"first_block\":%lld,\"fingerprint\":\"%s\",\"token_ids\":[",
                          (long long)bs, (long long)first, fp);
    for (int64_t i = 0; i < n; i++) k += (size_t)snprintf(b + k, cap - k, i ? ",%d" : "%d", ids[i]);
    snprintf(b + k, cap - k, "]}");
    return b;
}

/* One request for blocks [c->first, c->end): parses the stream into the store stream. Sets
 * res->reason when it stops early. */
static void bridge_attempt(const pdb_front_bridge_opts *o, bridge_ctx *c, const int32_t *ids, long timeout_ms) {
    pdb_front_bridge_result *res = c->res;
    c->http_status = 0;
    c->errlen = 0;
    c->got_end = 0;
    pdb_segment_parser_cbs cbs = {on_header, on_segment, on_end, c};
    if (pdb_segment_parser_init(&c->parser, &cbs, pdb_store_block_bytes(c->store))) {
        set_reason(c, "out_of_memory");
        return;
    }
    char *body = request_body(ids, c->end * c->bs, c->bs, c->first, c->fp);
    CURL *h = body ? curl_easy_init() : NULL;
    if (!h) {
        set_reason(c, "out_of_memory");
        free(body);
        pdb_segment_parser_free(c->parser);
        c->parser = NULL;
        return;
    }
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s/v1/prefill", o->prefill_url);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key && *o->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        hdrs = curl_slist_append(hdrs, auth);
    }
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms ? o->connect_timeout_ms : 2000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK && !res->reason[0]) {
        if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST) set_reason(c, "prefill_unreachable");
        else if (cc == CURLE_OPERATION_TIMEDOUT) set_reason(c, c->http_status ? "prefill_timeout" : "prefill_unreachable");
        else set_reason(c, "prefill_connection_lost");
        PDB_WARN("bridge: %s: %s", url, cerr[0] ? cerr : curl_easy_strerror(cc));
    }
    if (!res->reason[0] && c->http_status != 200) {
        char r[64];
        snprintf(r, sizeof r, c->http_status == 409 ? "fingerprint_mismatch" : "prefill_http_%d", c->http_status);
        set_reason(c, r);
        PDB_WARN("bridge: %s answered %d: %s", url, c->http_status, c->errbody);
    }
    if (!res->reason[0] && !c->got_end) set_reason(c, "prefill_stream_truncated");
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(body);
    pdb_segment_parser_free(c->parser);
    c->parser = NULL;
}

/* A transfer that broke (connection lost, truncated or corrupted stream) resumes from the next
 * block boundary: the engines are deterministic, so the resumed segments are the lost ones. */
static int bridge_resumable(const char *reason) {
    return !strcmp(reason, "prefill_connection_lost") || !strcmp(reason, "prefill_stream_truncated") ||
           !strcmp(reason, "bad_segment");
}

pdb_status pdb_front_bridge_run(const pdb_front_bridge_opts *o, pdb_store *store, const char *fp, const int32_t *ids,
                                int64_t bs, int64_t first, int64_t end, pdb_front_bridge_result *res) {
    memset(res, 0, sizeof *res);
    double t0 = br_now();
    bridge_ctx c = {.store = store, .fp = fp, .bs = bs, .first = first, .end = end, .res = res, .layout = o->layout};
    if (o->layout && o->layout->n_pools > PDB_DEC_MAX_POOLS)
        return pdb_err_set(PDB_INVALID, "bridge: %d pools exceed %d", o->layout->n_pools, PDB_DEC_MAX_POOLS);
    PDB_TRY(pdb_store_stream_begin(store, ids, end * bs, &c.stream));
    long budget = o->total_timeout_ms ? o->total_timeout_ms : 600000L;
    for (;;) {
        c.first = first + res->blocks_written;
        long left = budget - (long)((br_now() - t0) * 1e3);
        if (left <= 0) { set_reason(&c, "prefill_timeout"); break; }
        bridge_attempt(o, &c, ids, left);
        if (!res->reason[0] && res->blocks_written < end - first) set_reason(&c, "prefill_sent_fewer");
        if (!res->reason[0] || !bridge_resumable(res->reason) || res->resumes >= PDB_FRONT_BRIDGE_MAX_RESUMES) break;
        res->resumes++;
        PDB_WARN("bridge: transfer stopped (%s) after block %lld; resuming from block %lld (resume %d of %d)", res->reason,
                 (long long)(first + res->blocks_written - 1), (long long)(first + res->blocks_written), res->resumes,
                 PDB_FRONT_BRIDGE_MAX_RESUMES);
        res->reason[0] = 0;
    }
    if (pdb_store_stream_finish(c.stream)) PDB_WARN("bridge: finishing the block stream: %s", pdb_err_msg());
    res->total_ms = (br_now() - t0) * 1e3;
    res->engine_ms = c.engine_s * 1e3;
    res->transfer_ms = res->total_ms - res->write_ms;
    return PDB_OK;
}
