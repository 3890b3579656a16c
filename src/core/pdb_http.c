/* pdb_http: libmicrohttpd wrapper (see pdb_http.h). Invariants: a request's context lives from
 * MHD's first access-handler call until its completion notice; bodies never grow past max_body
 * (excess is discarded, then answered 413; a declared Content-Length far past the limit is
 * answered at once); a streamed body (body_route) is counted against the same bound and handed to
 * its sink piece by piece, the sink released exactly once at the request's end; a stream is
 * shared by the producer and the connection and freed when both references are dropped; no wait
 * in here is unbounded without re-checking for a gone client or a stopping server. */
#include "pdb_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pdb_buf.h"

#define PDB_HTTP_WAIT_SLICE_MS 100

struct pdb_http_server {
    struct MHD_Daemon *d;
    pdb_http_opts o;
    char *api_key;      /* "Bearer KEY" or NULL */
    size_t auth_len;
    int port;
    atomic_int stopping;
};

struct pdb_http_request {
    pdb_http_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url;
    char *body;         /* [cap] */
    size_t len, cap, discarded; /* len: bytes received (into body, or the sink's) */
    int too_large, answered, started, fd;
    int streamed, sink_stopped; /* the body goes to sink (body_route) */
    pdb_http_body_sink sink;
};

typedef struct pdb_http_chunk {
    struct pdb_http_chunk *next;
    size_t len, off;
    char data[];
} pdb_http_chunk;

struct pdb_http_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* data arrived, room freed, or state changed */
    pdb_http_chunk *head, *tail;
    size_t queued, cap;
    int closed, gone, gone_notified, refs, fd;
    pdb_http_server *srv;
    pdb_http_stream_hooks hooks;
};

int pdb_http_equal_secret(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen > blen ? alen : blen;
    unsigned char diff = (unsigned char)(alen != blen);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0, y = i < blen ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(x ^ y);
    }
    return diff == 0;
}

static int pdb_http_fd_hung_up(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void pdb_http_deadline(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
}

/* ---- responses ------------------------------------------------------------------------------ */

static pdb_status pdb_http_queue(pdb_http_request *r, int status, struct MHD_Response *resp, const char *content_type,
                                 const pdb_http_header *h, size_t nh) {
    if (!resp) return pdb_err_set(PDB_NOMEM, "http: cannot create a response");
    if (content_type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (size_t i = 0; i < nh; i++)
        if (h[i].name && h[i].value) MHD_add_response_header(resp, h[i].name, h[i].value);
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->answered = 1;
    return ok == MHD_YES ? PDB_OK : pdb_err_set(PDB_IO, "http: cannot queue the %d response for %s", status, r->url);
}

pdb_status pdb_http_respond(pdb_http_request *r, int status, const char *content_type, const char *body, size_t len,
                            const pdb_http_header *headers, size_t n_headers) {
    if (r->answered) return pdb_err_set(PDB_INVALID, "http: %s answered twice", r->url);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    return pdb_http_queue(r, status, resp, content_type, headers, n_headers);
}

pdb_status pdb_http_respond_error(pdb_http_request *r, int status, const char *type, const char *param,
                                  const char *code, const char *message) {
    json_t *e = json_object();
    json_t *m = message ? json_string(message) : NULL; /* NULL also when not valid UTF-8 */
    json_object_set_new(e, "message", m ? m : json_string("error"));
    json_object_set_new(e, "type", json_string(type ? type : "invalid_request_error"));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *root = json_pack("{s:o}", "error", e);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    pdb_status st;
    if (!s) {
        static const char fallback[] = "{\"error\":{\"message\":\"error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        st = pdb_http_respond(r, status, "application/json", fallback, sizeof fallback - 1, NULL, 0);
    } else {
        st = pdb_http_respond(r, status, "application/json", s, strlen(s), NULL, 0);
    }
    free(s);
    return st;
}

/* ---- streams -------------------------------------------------------------------------------- */

static void pdb_http_stream_unref(pdb_http_stream *s) {
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left) return;
    for (pdb_http_chunk *c = s->head, *n; c; c = n) { n = c->next; free(c); }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* Marks the client gone (mu held); returns 1 when the caller must call on_gone after unlocking. */
static int pdb_http_stream_mark_gone(pdb_http_stream *s) {
    s->gone = 1;
    pthread_cond_broadcast(&s->cv);
    if (s->closed || s->gone_notified) return 0;
    s->gone_notified = 1;
    return s->hooks.on_gone != NULL;
}

static ssize_t pdb_http_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    pdb_http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->head) {
            size_t n = 0;
            while (s->head && n < max) {
                pdb_http_chunk *c = s->head;
                size_t take = c->len - c->off;
                if (take > max - n) take = max - n;
                memcpy(buf + n, c->data + c->off, take);
                c->off += take;
                n += take;
                if (c->off == c->len) {
                    s->head = c->next;
                    if (!s->head) s->tail = NULL;
                    s->queued -= c->len;
                    free(c);
                }
            }
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            return (ssize_t)n;
        }
        if (s->closed) { pthread_mutex_unlock(&s->mu); return MHD_CONTENT_READER_END_OF_STREAM; }
        if (s->gone || atomic_load(&s->srv->stopping)) {
            int notify = pdb_http_stream_mark_gone(s);
            pthread_mutex_unlock(&s->mu);
            if (notify) s->hooks.on_gone(s->hooks.user);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        struct timespec ts;
        pdb_http_deadline(&ts, PDB_HTTP_WAIT_SLICE_MS);
        int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (rc == ETIMEDOUT && !s->head && !s->closed && pdb_http_fd_hung_up(s->fd)) s->gone = 1;
    }
}

static void pdb_http_stream_free_cb(void *cls) {
    pdb_http_stream *s = cls;
    pthread_mutex_lock(&s->mu);
    int notify = pdb_http_stream_mark_gone(s);
    pthread_mutex_unlock(&s->mu);
    if (notify) s->hooks.on_gone(s->hooks.user);
    if (s->hooks.on_release) s->hooks.on_release(s->hooks.user);
    pdb_http_stream_unref(s);
}

pdb_status pdb_http_respond_stream(pdb_http_request *r, int status, const char *content_type,
                                   const pdb_http_header *headers, size_t n_headers, size_t max_queued,
                                   const pdb_http_stream_hooks *hooks, pdb_http_stream **out) {
    *out = NULL;
    if (r->answered) return pdb_err_set(PDB_INVALID, "http: %s answered twice", r->url);
    pdb_http_stream *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "http: no memory for a stream");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->cap = max_queued ? max_queued : PDB_HTTP_DEFAULT_STREAM_QUEUE;
    s->refs = 2;
    s->fd = r->fd;
    s->srv = r->srv;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, pdb_http_stream_read, s, pdb_http_stream_free_cb);
    if (!resp) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return pdb_err_set(PDB_NOMEM, "http: cannot create a stream response");
    }
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    pdb_status st = pdb_http_queue(r, status, resp, content_type, headers, n_headers);
    if (st != PDB_OK) {
        /* MHD destroyed the response: the free callback ran (with no hooks installed yet) and
         * dropped the connection's reference; the caller gets no stream and no hook calls. */
        pdb_http_stream_unref(s);
        return st;
    }
    /* The reader and free callbacks run on this thread after the handler returns. */
    if (hooks) s->hooks = *hooks;
    *out = s;
    return PDB_OK;
}

pdb_status pdb_http_stream_write(pdb_http_stream *s, const char *data, size_t len, int timeout_ms) {
    if (len > s->cap) return pdb_err_set(PDB_TOO_LARGE, "http: stream write of %zu bytes exceeds the queue (%zu)", len, s->cap);
    if (!len) return PDB_OK;
    pdb_http_chunk *c = malloc(sizeof *c + len);
    if (!c) return pdb_err_set(PDB_NOMEM, "http: no memory for a stream chunk");
    memcpy(c->data, data, len);
    c->len = len;
    c->off = 0;
    c->next = NULL;
    struct timespec end;
    if (timeout_ms > 0) pdb_http_deadline(&end, timeout_ms);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->gone || s->closed || atomic_load(&s->srv->stopping)) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            return pdb_err_set(PDB_IO, "http: stream client is gone");
        }
        if (s->queued + len <= s->cap) break;
        if (timeout_ms == 0) {
            pthread_mutex_unlock(&s->mu);
            free(c);
            return pdb_err_set(PDB_TIMEOUT, "http: stream queue full (client not reading)");
        }
        struct timespec ts;
        pdb_http_deadline(&ts, PDB_HTTP_WAIT_SLICE_MS);
        if (timeout_ms > 0 && (ts.tv_sec > end.tv_sec || (ts.tv_sec == end.tv_sec && ts.tv_nsec > end.tv_nsec))) ts = end;
        int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (rc == ETIMEDOUT && timeout_ms > 0) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec)) {
                if (s->queued + len <= s->cap) break;
                pthread_mutex_unlock(&s->mu);
                free(c);
                return pdb_err_set(PDB_TIMEOUT, "http: stream queue full (client not reading)");
            }
        }
    }
    if (s->tail) s->tail->next = c; else s->head = c;
    s->tail = c;
    s->queued += len;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return PDB_OK;
}

void pdb_http_stream_close(pdb_http_stream *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->closed = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pdb_http_stream_unref(s);
}

/* ---- request accessors ---------------------------------------------------------------------- */

const char *pdb_http_request_method(const pdb_http_request *r) { return r->method; }
const char *pdb_http_request_path(const pdb_http_request *r) { return r->url; }
const char *pdb_http_request_header(const pdb_http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}
const char *pdb_http_request_body(const pdb_http_request *r) { return r->body ? r->body : ""; }
size_t pdb_http_request_body_len(const pdb_http_request *r) { return r->body ? r->len : 0; }
void *pdb_http_request_sink(const pdb_http_request *r) { return r->streamed ? r->sink.user : NULL; }
uint64_t pdb_http_request_body_bytes(const pdb_http_request *r) { return r->len; }
void pdb_http_request_drop_body(pdb_http_request *r) {
    free(r->body);
    r->body = NULL;
    r->len = r->cap = 0;
}
int pdb_http_request_client_gone(pdb_http_request *r) {
    return pdb_http_fd_hung_up(r->fd) || atomic_load(&r->srv->stopping);
}

/* ---- MHD callbacks -------------------------------------------------------------------------- */

static void pdb_http_respond_too_large(pdb_http_request *r) {
    char msg[160];
    snprintf(msg, sizeof msg, "request body exceeds the server's limit of %zu bytes", r->srv->o.max_body);
    pdb_http_respond_error(r, 413, "invalid_request_error", NULL, "request_too_large", msg);
}

static enum MHD_Result pdb_http_sum_header(void *cls, enum MHD_ValueKind kind, const char *k, const char *v) {
    (void)kind;
    *(size_t *)cls += strlen(k) + (v ? strlen(v) : 0) + 4; /* "k: v\r\n" */
    return MHD_YES;
}

static enum MHD_Result pdb_http_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                       const char *version, const char *upload_data, size_t *upload_data_size,
                                       void **con_cls) {
    (void)version;
    pdb_http_server *srv = cls;
    pdb_http_request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = srv;
        r->conn = conn;
        r->method = method;
        r->url = url;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        *con_cls = r;
        /* MHD only refuses headers that overflow the connection pool (max_header + 16 KiB):
         * enforce the documented limit itself */
        size_t hsize = strlen(method) + strlen(url) + 16;
        MHD_get_connection_values(conn, MHD_HEADER_KIND, pdb_http_sum_header, &hsize);
        if (hsize > srv->o.max_header) {
            char msg[128];
            snprintf(msg, sizeof msg, "request line and headers exceed the server's limit of %zu bytes", srv->o.max_header);
            pdb_http_respond_error(r, 431, "invalid_request_error", NULL, "request_header_fields_too_large", msg);
            return MHD_YES;
        }
        if (srv->api_key && strcmp(url, "/health") != 0) {
            const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
            if (!a || !pdb_http_equal_secret(a, strlen(a), srv->api_key, srv->auth_len)) {
                pdb_http_respond_error(r, 401, "invalid_request_error", NULL, "invalid_api_key",
                                       "missing or wrong API key (send Authorization: Bearer KEY)");
                return MHD_YES;
            }
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end = NULL;
            errno = 0;
            unsigned long long v = strtoull(cl, &end, 10);
            /* Bodies somewhat over the limit are read and dropped so that the client, still
             * sending, reliably reads the 413; absurd ones are answered at once. */
            uint64_t hard = (uint64_t)srv->o.max_body * 4 + ((uint64_t)1 << 20);
            if (errno || end == cl || v > hard) { pdb_http_respond_too_large(r); return MHD_YES; }
        }
        if (srv->o.body_route) {
            pdb_http_body_sink sk = {0};
            if (srv->o.body_route(srv->o.user, r, &sk) && sk.feed) r->sink = sk, r->streamed = 1;
            else if (sk.release) sk.release(sk.user);
        }
        return MHD_YES;
    }
    if (r->answered) { /* answered early (401/413): swallow the rest of the body */
        r->discarded += *upload_data_size;
        *upload_data_size = 0;
        return r->discarded > srv->o.max_body * 4 + ((size_t)1 << 20) ? MHD_NO : MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_large || r->len + n > srv->o.max_body) {
            r->too_large = 1;
            r->discarded += n;
            return r->discarded > srv->o.max_body * 4 + ((size_t)1 << 20) ? MHD_NO : MHD_YES;
        }
        if (r->streamed) { /* the piece goes to the sink as delivered; nothing is kept here */
            r->len += n;
            if (!r->sink_stopped && r->sink.feed(r->sink.user, upload_data, n) != PDB_OK) r->sink_stopped = 1;
            return MHD_YES;
        }
        if (!pdb_buf_grow(&r->body, &r->cap, r->len + n + 1, srv->o.max_body + 1)) return MHD_NO;
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = 0;
        return MHD_YES;
    }
    if (r->started) return MHD_YES;
    r->started = 1;
    if (r->too_large) { pdb_http_respond_too_large(r); return MHD_YES; }
    srv->o.handler(srv->o.user, r);
    if (!r->answered)
        pdb_http_respond_error(r, 500, "server_error", NULL, NULL, "the request handler produced no response");
    return MHD_YES;
}

static void pdb_http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                               enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)conn; (void)toe;
    pdb_http_request *r = *con_cls;
    if (!r) return;
    if (r->streamed && r->sink.release) r->sink.release(r->sink.user);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

pdb_status pdb_http_server_start(const pdb_http_opts *o, pdb_http_server **out) {
    *out = NULL;
    if (!o->handler) return pdb_err_set(PDB_INVALID, "http: no handler");
    if (o->port < 0 || o->port > 65535) return pdb_err_set(PDB_INVALID, "http: port %d out of range", o->port);
    pdb_http_server *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "http: no memory");
    s->o = *o;
    if (!s->o.max_body) s->o.max_body = PDB_HTTP_DEFAULT_MAX_BODY;
    if (!s->o.max_header) s->o.max_header = PDB_HTTP_DEFAULT_MAX_HEADER;
    if (!s->o.max_connections) s->o.max_connections = PDB_HTTP_DEFAULT_MAX_CONNECTIONS;
    if (!s->o.idle_timeout_s) s->o.idle_timeout_s = 300;
    if (o->api_key && *o->api_key) {
        size_t n = strlen(o->api_key) + 8;
        s->api_key = malloc(n);
        if (!s->api_key) { free(s); return pdb_err_set(PDB_NOMEM, "http: no memory"); }
        snprintf(s->api_key, n, "Bearer %s", o->api_key);
        s->auth_len = strlen(s->api_key);
        s->o.api_key = NULL;
    }
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)o->port);
    const char *host = o->host && *o->host ? o->host : "127.0.0.1";
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        free(s->api_key);
        free(s);
        return pdb_err_set(PDB_INVALID, "http: --host '%s' is not an IPv4 address", host);
    }
    /* The connection memory pool holds the request line + headers and the read buffer. */
    size_t pool = s->o.max_header + 16 * 1024;
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC,
                            (uint16_t)o->port, NULL, NULL, pdb_http_access, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
                            MHD_OPTION_CONNECTION_LIMIT, s->o.max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
                            MHD_OPTION_NOTIFY_COMPLETED, pdb_http_completed, s,
                            MHD_OPTION_END);
    if (!s->d) {
        int e = errno;
        free(s->api_key);
        free(s);
        return pdb_err_set(PDB_IO, "http: cannot listen on %s:%d (%s)", host, o->port, strerror(e));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : o->port;
    *out = s;
    return PDB_OK;
}

int pdb_http_server_port(const pdb_http_server *s) { return s->port; }

void pdb_http_server_quiesce(pdb_http_server *s) {
    if (!s || !s->d) return;
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void pdb_http_server_stop(pdb_http_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, 1);
    if (s->d) MHD_stop_daemon(s->d);
    free(s->api_key);
    free(s);
}
