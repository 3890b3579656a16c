/* pdb_http_client: one HTTP exchange over libcurl, the client side of pdb_http (GET, or POST of
 * a NUL-terminated body). Invariants: every call is bounded (connect and total timeouts, and a
 * bound on a body collected in memory); a call returns PDB_OK exactly when a complete answer
 * arrived, whatever its HTTP status (the caller judges the status); on any other outcome
 * pdb_err_msg() names the URL and why, and the reply says whether the server was reached at
 * all. Requests carry "Content-Type: application/json" when asked, "Authorization: Bearer
 * KEY" when a key is given and the caller's extra header lines. Calls are independent (one libcurl handle each), so any thread may
 * make them once pdb_http_client_init has run. */
#ifndef PDB_HTTP_CLIENT_H
#define PDB_HTTP_CLIENT_H

#include <stddef.h>

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PDB_HTTP_CLIENT_DEFAULT_MAX_BODY ((size_t)1 << 20)

typedef struct pdb_http_call {
    const char *url;
    const char *body;        /* NULL = GET; else POST of strlen(body) bytes */
    int json;                /* send "Content-Type: application/json" */
    const char *bearer;      /* NULL or "" = no Authorization header */
    long connect_timeout_ms; /* 0 = libcurl's default */
    long timeout_ms;         /* the whole exchange; 0 = no limit */
    /* The body as it arrives, piece by piece, with the status of the answer; return 0 to stop
     * the exchange (the call then fails with PDB_IO). NULL: the body is collected into the
     * reply, at most max_body bytes (more fails with PDB_TOO_LARGE). */
    int (*on_body)(void *user, int status, const char *data, size_t n);
    /* Each header line of the answer as received (status lines included, CRLF kept); may be NULL. */
    void (*on_header)(void *user, const char *line, size_t n);
    void *user;
    size_t max_body; /* 0 = PDB_HTTP_CLIENT_DEFAULT_MAX_BODY */
    const char *const *headers; /* NULL, or more request header lines ("Name: value"), NULL-terminated */
} pdb_http_call;

typedef struct pdb_http_reply {
    int status;       /* code of the last status line received; 0 when none came */
    char *body;       /* the collected body (NUL-terminated) when on_body is NULL, else NULL; free() */
    size_t len;
    int unreachable;  /* the host name did not resolve or the connection was refused */
    char error[256];  /* why the exchange failed (libcurl's words); "" on PDB_OK */
} pdb_http_reply;

/* libcurl's global setup; call once before any thread makes a call (idempotent). PDB_IO when it fails. */
pdb_status pdb_http_client_init(void);

/* Make the exchange. *reply is always filled (free reply->body whatever the result). PDB_TIMEOUT
 * when a timeout passed (reply->status tells whether an answer had begun), PDB_TOO_LARGE for a
 * collected body over the bound, PDB_NOMEM, PDB_IO for every other failure (unreachable, the
 * connection lost, on_body stopping it). */
pdb_status pdb_http_client_call(const pdb_http_call *call, pdb_http_reply *reply);

#ifdef __cplusplus
}
#endif

#endif
