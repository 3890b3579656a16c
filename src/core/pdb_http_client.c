/* pdb_http_client: a libcurl easy handle per call (see pdb_http_client.h). The header callback
 * keeps the last status line's code, so a "100 Continue" before the answer does not count; the
 * write callback hands the body on or collects it within the bound (into a memory stream that
 * becomes reply->body), and records why it stopped a transfer so the result names that rather
 * than libcurl's generic write error. */
#include "pdb_http_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const pdb_http_call *call;
    pdb_http_reply *reply;
    FILE *mem;        /* the collected body (open_memstream onto reply->body, reply->len) */
    size_t got, max;  /* bytes collected, and the bound */
    pdb_status stop; /* set when the write callback stopped the transfer itself */
} client_ctx;

static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static CURLcode g_init_rc;

static void client_global_init(void) { g_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

pdb_status pdb_http_client_init(void) {
    pthread_once(&g_init_once, client_global_init);
    if (g_init_rc != CURLE_OK) return pdb_err_set(PDB_IO, "libcurl initialization: %s", curl_easy_strerror(g_init_rc));
    return PDB_OK;
}

static size_t client_header(char *b, size_t sz, size_t nm, void *u) {
    client_ctx *c = u;
    size_t n = sz * nm;
    int code;
    if (n > 9 && !strncmp(b, "HTTP/", 5) && sscanf(b, "HTTP/%*s %d", &code) == 1) c->reply->status = code;
    if (c->call->on_header) c->call->on_header(c->call->user, b, n);
    return n;
}

static size_t client_write(char *p, size_t sz, size_t nm, void *u) {
    client_ctx *c = u;
    size_t n = sz * nm;
    if (c->call->on_body) {
        if (c->call->on_body(c->call->user, c->reply->status, p, n)) return n;
        c->stop = PDB_IO;
        return 0;
    }
    if (n > c->max - c->got) {
        c->stop = PDB_TOO_LARGE;
        return 0;
    }
    if ((!c->mem && !(c->mem = open_memstream(&c->reply->body, &c->reply->len))) || fwrite(p, 1, n, c->mem) != n) {
        c->stop = PDB_NOMEM;
        return 0;
    }
    c->got += n;
    return n;
}

/* The request headers: the JSON content type, the bearer key and the caller's lines, as asked. */
static pdb_status client_headers(const pdb_http_call *call, struct curl_slist **out) {
    struct curl_slist *h = NULL, *t;
    *out = NULL;
    if (call->json) {
        if (!(h = curl_slist_append(NULL, "Content-Type: application/json")))
            return pdb_err_set(PDB_NOMEM, "%s: request headers", call->url);
    }
    if (call->bearer && *call->bearer) {
        size_t need = strlen(call->bearer) + sizeof "Authorization: Bearer ";
        char *auth = malloc(need);
        t = auth ? (snprintf(auth, need, "Authorization: Bearer %s", call->bearer), curl_slist_append(h, auth)) : NULL;
        free(auth);
        if (!t) {
            curl_slist_free_all(h);
            return pdb_err_set(PDB_NOMEM, "%s: request headers", call->url);
        }
        h = t;
    }
    for (const char *const *x = call->headers; x && *x; x++) {
        if (!(t = curl_slist_append(h, *x))) {
            curl_slist_free_all(h);
            return pdb_err_set(PDB_NOMEM, "%s: request headers", call->url);
        }
        h = t;
    }
    *out = h;
    return PDB_OK;
}

pdb_status pdb_http_client_call(const pdb_http_call *call, pdb_http_reply *reply) {
    memset(reply, 0, sizeof *reply);
    client_ctx c = {.call = call, .reply = reply,
                    .max = call->max_body ? call->max_body : PDB_HTTP_CLIENT_DEFAULT_MAX_BODY};
    struct curl_slist *hd;
    PDB_TRY(client_headers(call, &hd));
    CURL *h = curl_easy_init();
    if (!h) {
        curl_slist_free_all(hd);
        snprintf(reply->error, sizeof reply->error, "cannot create a libcurl handle");
        return pdb_err_set(PDB_NOMEM, "%s: %s", call->url, reply->error);
    }
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, call->url);
    if (call->body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, call->body);
    if (hd) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, client_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, client_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &c);
    if (call->connect_timeout_ms > 0) curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, call->connect_timeout_ms);
    if (call->timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, call->timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* timeouts without SIGALRM: calls run on server threads */
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_cleanup(h);
    curl_slist_free_all(hd);
    if (c.mem && fclose(c.mem) && cc == CURLE_OK) { /* the last bytes could not be flushed */
        snprintf(reply->error, sizeof reply->error, "no memory for the answer's body");
        return pdb_err_set(PDB_NOMEM, "%s: %s", call->url, reply->error);
    }
    if (cc == CURLE_OK) return PDB_OK;
    pdb_status st = PDB_IO;
    if (c.stop == PDB_TOO_LARGE) {
        st = PDB_TOO_LARGE;
        snprintf(reply->error, sizeof reply->error, "the answer's body is longer than %zu bytes", c.max);
    } else {
        snprintf(reply->error, sizeof reply->error, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
        if (c.stop == PDB_NOMEM || cc == CURLE_OUT_OF_MEMORY) st = PDB_NOMEM;
        else if (cc == CURLE_OPERATION_TIMEDOUT) st = PDB_TIMEOUT;
        reply->unreachable = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST;
    }
    return pdb_err_set(st, "%s: %s", call->url, reply->error);
}
