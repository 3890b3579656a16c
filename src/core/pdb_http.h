/* pdb_http: a small HTTP/1.1 server over libmicrohttpd (one thread per connection, so many
 * streaming clients can wait at once). Invariants: the handler is called once per request with
 * the whole body (at most max_body bytes; larger bodies get a 413 OpenAI-style error without
 * reaching the handler), or, on a route the body_route hook streams, after the body went piece by
 * piece to the request's sink (the same max_body bound and 413; the server holds none of it); it must answer exactly once, either with pdb_http_respond() or by
 * opening a stream; a handler that answers nothing gets a 500. Every endpoint but /health
 * requires "Authorization: Bearer KEY" when an api_key is configured (401 otherwise,
 * constant-time compare). Streams are fed from any thread through a bounded queue; a client that
 * goes away is noticed while waiting, and reported to the producer. */
#ifndef PDB_HTTP_H
#define PDB_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

#define PDB_HTTP_DEFAULT_MAX_BODY ((size_t)32 << 20)
#define PDB_HTTP_DEFAULT_MAX_HEADER ((size_t)16 << 10)
#define PDB_HTTP_DEFAULT_MAX_CONNECTIONS 512u
#define PDB_HTTP_DEFAULT_STREAM_QUEUE ((size_t)4 << 20)

typedef struct pdb_http_server pdb_http_server;
typedef struct pdb_http_request pdb_http_request; /* valid only inside the handler call */
typedef struct pdb_http_stream pdb_http_stream;

typedef struct pdb_http_header { const char *name, *value; } pdb_http_header;

/* Called on the connection's thread; may block (e.g. waiting for a non-stream answer). */
typedef void (*pdb_http_handler_fn)(void *user, pdb_http_request *req);

/* A streamed request body. feed: each piece as libmicrohttpd delivers it, on the connection's
 * thread, before the handler; a nonzero status stops the feeding (the rest of the body is read and
 * dropped, the handler still runs and finds the failure in its sink). release: exactly once, when
 * the request ends (after the handler, or without it: 401 / 413 / a client gone mid-body). */
typedef struct pdb_http_body_sink {
    pdb_status (*feed)(void *user, const char *data, size_t len);
    void (*release)(void *user);
    void *user;
} pdb_http_body_sink;

/* The per-route choice: called once a request's line and headers are in (after the header bound,
 * authentication and the Content-Length bound); fill *sink and return 1 to stream the body into
 * it, 0 to have it buffered whole. May read the method, path and headers. */
typedef int (*pdb_http_body_route_fn)(void *user, pdb_http_request *req, pdb_http_body_sink *sink);

typedef struct pdb_http_opts {
    const char *host;          /* NULL = "127.0.0.1" (an IPv4 literal or "0.0.0.0") */
    int port;                  /* 0 = ephemeral; see pdb_http_server_port() */
    size_t max_body;           /* 0 = PDB_HTTP_DEFAULT_MAX_BODY */
    size_t max_header;         /* bytes of request line + headers; 0 = default (over -> 431) */
    unsigned max_connections;  /* 0 = default */
    unsigned idle_timeout_s;   /* idle keep-alive connections are closed after this; 0 = 300 */
    const char *api_key;       /* NULL or "" = no authentication */
    pdb_http_handler_fn handler;
    pdb_http_body_route_fn body_route; /* NULL: every body buffered whole */
    void *user;                /* of handler and body_route */
} pdb_http_opts;

pdb_status pdb_http_server_start(const pdb_http_opts *o, pdb_http_server **out);
int pdb_http_server_port(const pdb_http_server *s);
/* Stop accepting new connections (existing ones continue). */
void pdb_http_server_quiesce(pdb_http_server *s);
/* Graceful stop: streams still open are ended (their clients see the stream end), then every
 * connection thread is joined. Call after the producers have been told to finish. */
void pdb_http_server_stop(pdb_http_server *s);

/* ---- inside the handler ---- */
const char *pdb_http_request_method(const pdb_http_request *r);
const char *pdb_http_request_path(const pdb_http_request *r);      /* without the query string */
const char *pdb_http_request_header(const pdb_http_request *r, const char *name); /* NULL if absent */
const char *pdb_http_request_body(const pdb_http_request *r);      /* NUL-terminated copy ("" when streamed) */
size_t pdb_http_request_body_len(const pdb_http_request *r);        /* 0 when streamed */
/* A streamed body's sink user (the route gave it), or NULL when the body was buffered. */
void *pdb_http_request_sink(const pdb_http_request *r);
/* Bytes of the body received (buffered or streamed). */
uint64_t pdb_http_request_body_bytes(const pdb_http_request *r);
/* Free the body once the handler has read what it needs (a long streamed answer then does not
 * hold a multi-megabyte request for its whole life); the body reads as "" (length 0) after. */
void pdb_http_request_drop_body(pdb_http_request *r);
/* Nonzero once the client has closed its connection (cheap; poll it while waiting). */
int pdb_http_request_client_gone(pdb_http_request *r);

/* A complete response; body is copied. Only the first answer of a request counts. */
pdb_status pdb_http_respond(pdb_http_request *r, int status, const char *content_type, const char *body,
                            size_t len, const pdb_http_header *headers, size_t n_headers);
/* An OpenAI-style error: {"error": {"message", "type", "param", "code"}} (param/code may be NULL). */
pdb_status pdb_http_respond_error(pdb_http_request *r, int status, const char *type, const char *param,
                                  const char *code, const char *message);

/* Stream hooks, called from the connection's thread. on_gone: the client went away before the
 * producer closed the stream (at most once). on_release: the connection side is done with the
 * stream (exactly once, after on_gone); the user pointer may be freed from then on as far as the
 * stream is concerned. Either may be NULL. */
typedef struct pdb_http_stream_hooks {
    void (*on_gone)(void *user);
    void (*on_release)(void *user);
    void *user;
} pdb_http_stream_hooks;

/* Answer with a streamed body (chunked transfer encoding) fed by pdb_http_stream_write. The
 * queue holds at most max_queued bytes (0 = default). The producer owns one reference until
 * pdb_http_stream_close. */
pdb_status pdb_http_respond_stream(pdb_http_request *r, int status, const char *content_type,
                                   const pdb_http_header *headers, size_t n_headers, size_t max_queued,
                                   const pdb_http_stream_hooks *hooks, pdb_http_stream **out);

/* ---- from any thread ---- */
/* Queue len bytes. Waits up to timeout_ms (0 = not at all, < 0 = forever) for room. Returns
 * PDB_IO when the client is gone or the server stops, PDB_TIMEOUT when the queue stayed full,
 * PDB_TOO_LARGE when len exceeds the queue's capacity. */
pdb_status pdb_http_stream_write(pdb_http_stream *s, const char *data, size_t len, int timeout_ms);
/* End of stream: what is queued is still delivered. Drops the producer's reference. */
void pdb_http_stream_close(pdb_http_stream *s);

/* Constant-time equality of two byte strings (time depends only on the lengths). */
int pdb_http_equal_secret(const char *a, size_t alen, const char *b, size_t blen);

#endif
