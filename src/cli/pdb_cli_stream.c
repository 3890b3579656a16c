/* pdb_cli_stream: a timed, streamed OpenAI request over pdb_http_client (see pdb_cli_stream.h):
 * server-sent events parsed line by line, text, usage and verdicts collected. */
#include "pdb_cli_stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pdb_clock.h"
#include "pdb_http_client.h"

static int stream_append(pdb_cli_stream_result *r, const char *s, size_t n) {
    if (r->len + n + 1 > r->cap) {
        char *t = realloc(r->text, (r->len + n + 1) * 2);
        if (!t) { r->no_memory = 1; return 0; }
        r->text = t;
        r->cap = (r->len + n + 1) * 2;
    }
    memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = 0;
    return 1;
}

static void stream_event(pdb_cli_stream_result *r, const char *data) {
    if (!strncmp(data, "[DONE]", 6)) return;
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    json_t *err = json_object_get(j, "error");
    if (err) {
        const char *m = json_string_value(json_object_get(err, "message"));
        snprintf(r->stream_error, sizeof r->stream_error, "%s", m ? m : "an error event without a message");
    }
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    const char *t = r->o->chat ? json_string_value(json_object_get(json_object_get(c0, "delta"), "content"))
                               : json_string_value(json_object_get(c0, "text"));
    if (t && *t) {
        if (r->ttft_s == 0) {
            r->ttft_s = pdb_clock_now() - r->t0;
            if (r->o->on_first_text) r->o->on_first_text(r->o->user, r->ttft_s);
        }
        stream_append(r, t, strlen(t));
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        r->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
        r->completion_tokens = json_integer_value(json_object_get(u, "completion_tokens"));
        r->cached_tokens = json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    }
    const char *pv = json_string_value(json_object_get(json_object_get(j, "pd_bridge"), "verdict"));
    if (pv) snprintf(r->pd_verdict, sizeof r->pd_verdict, "%s", pv);
    json_decref(j);
}

static int stream_body(void *u, int status, const char *p, size_t n) {
    pdb_cli_stream_result *r = u;
    (void)status;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            r->line[r->ll] = 0;
            if (!strncmp(r->line, "data: ", 6)) stream_event(r, r->line + 6);
            r->ll = 0;
        } else if (r->ll + 1 < sizeof r->line) {
            r->line[r->ll++] = p[i];
        }
    }
    return !r->no_memory;
}

static void stream_header(void *u, const char *b, size_t n) {
    pdb_cli_stream_result *r = u;
    if (n >= 12 && !strncasecmp(b, "X-PD-Bridge:", 12)) {
        size_t k = 12;
        while (k < n && (b[k] == ' ' || b[k] == '\t')) k++;
        snprintf(r->verdict, sizeof r->verdict, "%.*s", (int)(n - k), b + k);
        r->verdict[strcspn(r->verdict, "\r\n")] = 0;
    }
}

void pdb_cli_stream_free(pdb_cli_stream_result *r) {
    free(r->text);
    r->text = NULL;
    r->len = r->cap = 0;
}

pdb_status pdb_cli_stream_request(const pdb_cli_stream_opts *o, pdb_cli_stream_result *r) {
    memset(r, 0, sizeof *r);
    r->o = o;
    r->prompt_tokens = r->cached_tokens = r->completion_tokens = -1;
    char full[600];
    snprintf(full, sizeof full, "%s%s", o->url, o->chat ? "/v1/chat/completions" : "/v1/completions");
    json_t *b = o->chat ? json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", o->text)
                        : json_pack("{s:s}", "prompt", o->text);
    if (b && (json_object_set_new(b, "max_tokens", json_integer(o->max_tokens)) ||
              json_object_set_new(b, "temperature", json_real(0.0)) || json_object_set_new(b, "stream", json_true()) ||
              json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1)) ||
              (o->model && json_object_set_new(b, "model", json_string(o->model))) ||
              (o->ignore_eos && json_object_set_new(b, "ignore_eos", json_true())))) {
        json_decref(b);
        b = NULL;
    }
    char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!body) return pdb_err_set(PDB_NOMEM, "the request body for %s", full);
    char mode_hdr[96];
    snprintf(mode_hdr, sizeof mode_hdr, "X-PD-Bridge-Mode: %s", o->mode ? o->mode : "");
    const char *const hdrs[] = {mode_hdr, NULL};
    pdb_http_call call = {.url = full, .body = body, .json = 1, .bearer = o->bearer,
                          .timeout_ms = o->timeout_ms ? o->timeout_ms : 1800L * 1000, .on_body = stream_body,
                          .on_header = stream_header, .user = r, .headers = o->mode ? hdrs : NULL};
    pdb_http_reply rp;
    r->t0 = pdb_clock_now();
    pdb_status st = pdb_http_client_call(&call, &rp);
    r->total_s = pdb_clock_now() - r->t0;
    r->http_status = rp.status;
    free(body);
    free(rp.body);
    if (!r->no_memory && (st != PDB_OK || rp.status != 200))
        return pdb_err_set(st ? st : PDB_IO, "request to %s failed: %s (HTTP %d)", full, st ? rp.error : "No error", rp.status);
    if (r->no_memory || (!r->text && !stream_append(r, "", 0)))
        return pdb_err_set(PDB_NOMEM, "the answer's text from %s (%zu bytes so far)", full, r->len);
    return PDB_OK;
}
