/* pdb_front_bridge: a POST to /v1/prefill (pdb_http_client), the PDBF parser fed from its body
 * callback, and store writes from the parser's segment callback; acknowledgements are short POSTs
 * to /v1/prefill/ack, calls of their own. State (bridge_ctx): the parser, the store stream,
 * counters, the transfer id, the blocks acknowledged so far, and the first failure reason (which
 * stops the transfer). */
#include "pdb_front_bridge.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pdb_arch.h"
#include "pdb_clock.h"
#include "pdb_dec_model.h"
#include "pdb_http_client.h"
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
    const pdb_front_bridge_opts *o;
    int64_t acked_through; /* blocks < this were acknowledged */
    uint64_t unacked_bytes;
    int ack_failed;
} bridge_ctx;

/* Acknowledge every ACK_EVERY_BLOCKS blocks or ACK_EVERY_BYTES bytes written, whichever first. */
enum { ACK_EVERY_BLOCKS = 8 };
#define ACK_EVERY_BYTES ((uint64_t)64 << 20)

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

static int discard_body(void *u, int status, const char *data, size_t n) { return 1; }

/* POST /v1/prefill/ack: blocks < through are in the store (or no longer wanted). Best effort: a
 * failed acknowledgement only leaves the segments to the server's TTL. */
static void bridge_ack(bridge_ctx *c, int64_t through) {
    if (!c->res->transfer[0] || through <= c->acked_through || c->ack_failed > 2) return;
    const pdb_front_bridge_opts *o = c->o;
    char url[1024], body[128];
    snprintf(url, sizeof url, "%s/v1/prefill/ack", o->prefill_url);
    snprintf(body, sizeof body, "{\"transfer\":\"%s\",\"through_block\":%lld}", c->res->transfer, (long long)through);
    pdb_http_call call = {.url = url, .body = body, .json = 1, .bearer = o->api_key,
                          .connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 2000L, .timeout_ms = 5000L,
                          .on_body = discard_body};
    pdb_http_reply rp;
    pdb_status cs = pdb_http_client_call(&call, &rp);
    if (cs == PDB_OK && rp.status == 200) {
        c->acked_through = through;
        c->res->acks++;
    } else {
        c->ack_failed++;
        PDB_DEBUG("bridge: acknowledging transfer %s through block %lld: %s (HTTP %d)", c->res->transfer, (long long)through,
                  cs ? rp.error : "refused", rp.status);
    }
}

static pdb_status on_segment(void *u, int64_t b, const void *data, uint64_t len) {
    bridge_ctx *c = u;
    if (b >= c->end) return PDB_OK; /* more than asked: ignore */
    double t0 = pdb_clock_now();
    const void *in[PDB_ARCH_MAX_POOLS] = {data};
    if (c->layout) pdb_arch_block_pools(c->layout, c->bs, data, in);
    pdb_status s = pdb_store_stream_put(c->stream, b, in);
    c->res->write_ms += (pdb_clock_now() - t0) * 1e3;
    if (s) {
        set_reason(c, "store_write_failed");
        PDB_WARN("bridge: block %lld not written: %s", (long long)b, pdb_err_msg());
        return s;
    }
    c->res->blocks_written++;
    c->res->bytes += len;
    c->unacked_bytes += len;
    if (b + 1 - c->acked_through >= ACK_EVERY_BLOCKS || c->unacked_bytes >= ACK_EVERY_BYTES) { /* in the store: release */
        bridge_ack(c, b + 1);
        c->unacked_bytes = 0;
    }
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
    if (j) c->res->spool_blocks += json_integer_value(json_object_get(j, "spool_blocks"));
    json_decref(j);
}

static int body_cb(void *u, int status, const char *ptr, size_t n) {
    bridge_ctx *c = u;
    c->http_status = status;
    if (c->http_status != 200) { /* keep the error body for the log */
        size_t take = n < sizeof c->errbody - 1 - c->errlen ? n : sizeof c->errbody - 1 - c->errlen;
        memcpy(c->errbody + c->errlen, ptr, take);
        c->errlen += take;
        c->errbody[c->errlen] = 0;
        return 1;
    }
    if (pdb_segment_parser_feed(c->parser, ptr, n)) {
        if (!c->res->reason[0]) {
            PDB_WARN("bridge: bad segment stream: %s", pdb_err_msg());
            set_reason(c, "bad_segment");
        }
        return 0; /* abort the transfer */
    }
    return 1;
}

static void header_cb(void *u, const char *buf, size_t n) {
    bridge_ctx *c = u;
    static const char th[] = "x-pd-transfer:";
    if (n > sizeof th - 1 && !strncasecmp(buf, th, sizeof th - 1)) { /* the id a resume and an ack name */
        size_t i = sizeof th - 1, k = 0;
        char id[33];
        while (i < n && (buf[i] == ' ' || buf[i] == '\t')) i++;
        while (i < n && k < 32 && ((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f'))) id[k++] = buf[i++];
        id[k] = 0;
        if (k == 32) {
            if (strcmp(id, c->res->transfer)) c->acked_through = c->first; /* a new transfer (the old one was not retained) */
            memcpy(c->res->transfer, id, 33);
        }
    }
}

static char *request_body(const int32_t *ids, int64_t n, int64_t bs, int64_t first, const char *fp, const char *transfer) {
    size_t cap = (size_t)n * 12 + 320, k = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    k += (size_t)snprintf(b + k, cap - k, "{\"block_size\":%lld,\"first_block\":%lld,\"fingerprint\":\"%s\",",
                          (long long)bs, (long long)first, fp);
    if (transfer && *transfer) k += (size_t)snprintf(b + k, cap - k, "\"transfer\":\"%s\",", transfer); /* a resume */
    k += (size_t)snprintf(b + k, cap - k, "\"token_ids\":[");
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
    char *body = request_body(ids, c->end * c->bs, c->bs, c->first, c->fp, res->transfer);
    if (!body) {
        set_reason(c, "out_of_memory");
        free(body);
        pdb_segment_parser_free(c->parser);
        c->parser = NULL;
        return;
    }
    char url[1024];
    snprintf(url, sizeof url, "%s/v1/prefill", o->prefill_url);
    pdb_http_call call = {.url = url, .body = body, .json = 1, .bearer = o->api_key,
                          .connect_timeout_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 2000L,
                          .timeout_ms = timeout_ms, .on_body = body_cb, .on_header = header_cb, .user = c};
    pdb_http_reply rp;
    pdb_status cs = pdb_http_client_call(&call, &rp);
    c->http_status = rp.status;
    if (cs != PDB_OK && !res->reason[0]) {
        if (cs == PDB_NOMEM) set_reason(c, "out_of_memory");
        else if (rp.unreachable) set_reason(c, "prefill_unreachable");
        else if (cs == PDB_TIMEOUT) set_reason(c, c->http_status ? "prefill_timeout" : "prefill_unreachable");
        else set_reason(c, "prefill_connection_lost");
        PDB_WARN("bridge: %s: %s", url, rp.error);
    }
    if (!res->reason[0] && c->http_status != 200) {
        char r[64];
        snprintf(r, sizeof r, c->http_status == 409 ? "fingerprint_mismatch" : "prefill_http_%d", c->http_status);
        set_reason(c, r);
        PDB_WARN("bridge: %s answered %d: %s", url, c->http_status, c->errbody);
    }
    if (!res->reason[0] && !c->got_end) set_reason(c, "prefill_stream_truncated");
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
    double t0 = pdb_clock_now();
    bridge_ctx c = {.store = store, .fp = fp, .bs = bs, .first = first, .end = end, .res = res, .layout = o->layout, .o = o,
                    .acked_through = first};
    if (o->layout && o->layout->n_pools > PDB_ARCH_MAX_POOLS)
        return pdb_err_set(PDB_INVALID, "bridge: %d pools exceed %d", o->layout->n_pools, PDB_ARCH_MAX_POOLS);
    PDB_TRY(pdb_store_stream_begin(store, ids, end * bs, &c.stream));
    long budget = o->total_timeout_ms ? o->total_timeout_ms : 600000L;
    for (;;) {
        c.first = first + res->blocks_written;
        long left = budget - (long)((pdb_clock_now() - t0) * 1e3);
        if (left <= 0) { set_reason(&c, "prefill_timeout"); break; }
        bridge_attempt(o, &c, ids, left);
        if (!res->reason[0] && res->blocks_written < end - first) set_reason(&c, "prefill_sent_fewer");
        if (!res->reason[0] || !bridge_resumable(res->reason) || res->resumes >= PDB_FRONT_BRIDGE_MAX_RESUMES) break;
        res->resumes++;
        bridge_ack(&c, first + res->blocks_written); /* what the store has: the resume starts after it */
        PDB_WARN("bridge: transfer stopped (%s) after block %lld; resuming from block %lld (resume %d of %d)", res->reason,
                 (long long)(first + res->blocks_written - 1), (long long)(first + res->blocks_written), res->resumes,
                 PDB_FRONT_BRIDGE_MAX_RESUMES);
        res->reason[0] = 0;
    }
    if (pdb_store_stream_finish(c.stream)) PDB_WARN("bridge: finishing the block stream: %s", pdb_err_msg());
    bridge_ack(&c, end); /* the bridge is over: the server may release the whole transfer */
    if (res->resumes)
        PDB_INFO("bridge: transfer %s: %lld blocks written after %d resume(s), %lld of them from the prefill server's spool",
                 res->transfer, (long long)res->blocks_written, res->resumes, (long long)res->spool_blocks);
    res->total_ms = (pdb_clock_now() - t0) * 1e3;
    res->engine_ms = c.engine_s * 1e3;
    res->transfer_ms = res->total_ms - res->write_ms;
    return PDB_OK;
}
