/* pdb_tools: DeepSeek's tool-call format, rendering and parsing (see pdb_tools.h).
 * The parser is a small state machine over a held-back buffer: TEXT (content, watching for
 * CALLS_BEGIN), BETWEEN (after CALLS_BEGIN or a call's end: CALL_BEGIN, CALLS_END or back to
 * content), HEAD (type SEP name "\n"), FENCE ("```json\n", optional), ARGS (up to CALL_END, the
 * closing fence stripped) and DONE. Invariant: buf never holds more than a marker's length of
 * undecided bytes, except in HEAD, which gives up (as content) past PDB_TOOLS_MAX_HEAD bytes. */
#include "pdb_tools.h"

#include <stdlib.h>
#include <string.h>

#include "pdb_buf.h"

#define PDB_TOOLS_MAX_HEAD 512
#define PDB_TOOLS_FENCE "```json\n"

enum { S_TEXT = 0, S_BETWEEN, S_HEAD, S_FENCE, S_ARGS, S_DONE };

/* ---- rendering ------------------------------------------------------------------------------ */

static pdb_status tl_done(pdb_buf *b, char **text, size_t *len) {
    if (b->oom || !b->p) { free(b->p); return pdb_err_set(PDB_NOMEM, "tools: out of memory rendering the prompt"); }
    *text = b->p;
    *len = b->len;
    return PDB_OK;
}

pdb_status pdb_tools_render_section(const pdb_tools_def *defs, size_t n, char **text, size_t *len) {
    pdb_buf b = {0};
    pdb_buf_puts(&b, "## Tools\nYou can call the following functions.\n");
    for (size_t i = 0; i < n; i++) {
        pdb_buf_puts(&b, "\n### ");
        pdb_buf_puts(&b, defs[i].name);
        pdb_buf_puts(&b, "\n");
        if (defs[i].description) { pdb_buf_puts(&b, "Description: "); pdb_buf_puts(&b, defs[i].description); pdb_buf_puts(&b, "\n"); }
        if (defs[i].parameters) { pdb_buf_puts(&b, "Parameters: "); pdb_buf_puts(&b, defs[i].parameters); pdb_buf_puts(&b, "\n"); }
    }
    pdb_buf_puts(&b, "\nTo call functions, answer with " PDB_TOOLS_CALLS_BEGIN ", then for each call " PDB_TOOLS_CALL_BEGIN "function"
                PDB_TOOLS_SEP "NAME" PDB_TOOLS_ARGS_OPEN "ARGUMENTS AS A JSON OBJECT" PDB_TOOLS_ARGS_CLOSE PDB_TOOLS_CALL_END
                ", and after the last call " PDB_TOOLS_CALLS_END ".");
    return tl_done(&b, text, len);
}

pdb_status pdb_tools_forced_prefix(const char *name, char **text, size_t *len) {
    pdb_buf b = {0};
    pdb_buf_puts(&b, PDB_TOOLS_CALLS_BEGIN PDB_TOOLS_CALL_BEGIN "function" PDB_TOOLS_SEP);
    if (name) {
        pdb_buf_puts(&b, name);
        pdb_buf_puts(&b, PDB_TOOLS_ARGS_OPEN);
    }
    return tl_done(&b, text, len);
}

/* ---- parsing -------------------------------------------------------------------------------- */

void pdb_tools_parser_init(pdb_tools_parser *p, const char *forced_name) {
    memset(p, 0, sizeof *p);
    if (forced_name) {
        snprintf(p->forced, sizeof p->forced, "%s", forced_name);
        p->forced_pending = 1;
        p->state = S_ARGS;
    }
}

void pdb_tools_parser_init_head(pdb_tools_parser *p) {
    memset(p, 0, sizeof *p);
    p->state = S_HEAD;
    p->head_sep = 1;
}

void pdb_tools_parser_free(pdb_tools_parser *p) {
    free(p->buf);
    p->buf = NULL;
    p->len = p->cap = 0;
}

int pdb_tools_parser_done(const pdb_tools_parser *p) { return p->done; }
int pdb_tools_parser_calls(const pdb_tools_parser *p) { return p->n_calls; }

static void tp_consume(pdb_tools_parser *p, size_t n) {
    if (!n) return; /* buf may still be NULL */
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
}

static int tp_starts(const pdb_tools_parser *p, const char *m) {
    size_t ml = strlen(m);
    return p->len >= ml && !memcmp(p->buf, m, ml);
}

/* buf (all of it) is a proper prefix of m. */
static int tp_is_prefix(const pdb_tools_parser *p, const char *m) {
    size_t ml = strlen(m);
    return p->len < ml && (p->len == 0 || !memcmp(p->buf, m, p->len));
}

/* Longest suffix of s[n] that is a proper prefix of m. */
static size_t tp_hold(const char *s, size_t n, const char *m) {
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k)) return k;
    return 0;
}

static const char *tp_find(const char *s, size_t n, const char *m) { return n ? memmem(s, n, m, strlen(m)) : NULL; }

static const char *const tp_closers[] = {PDB_TOOLS_ARGS_CLOSE PDB_TOOLS_CALL_END, "```" PDB_TOOLS_CALL_END, PDB_TOOLS_CALL_END};

static size_t tp_args_hold(const char *s, size_t n) {
    size_t h = 0;
    for (size_t i = 0; i < 3; i++) {
        size_t k = tp_hold(s, n, tp_closers[i]);
        if (k > h) h = k;
    }
    return h;
}

/* Arguments before a call's end: without the closing fence. */
static size_t tp_args_trim(const char *s, size_t n) {
    if (n >= 4 && !memcmp(s + n - 4, PDB_TOOLS_ARGS_CLOSE, 4)) return n - 4;
    if (n >= 3 && !memcmp(s + n - 3, "```", 3)) return n - 3;
    return n;
}

#define TP_EMIT(ev, s, n)                                          \
    do {                                                           \
        int rc_ = fn(user, (ev), p->n_calls - 1, (s), (n));        \
        if (rc_) return rc_;                                       \
    } while (0)

/* Name of a head "type SEP name" (without the "\n"): trimmed, into the callback. */
static int tp_emit_head(pdb_tools_parser *p, const char *sep, const char *end, pdb_tools_event_fn fn, void *user) {
    const char *nm = sep + strlen(PDB_TOOLS_SEP);
    while (nm < end && (*nm == ' ' || *nm == '\t')) nm++;
    while (end > nm && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
    p->n_calls++;
    TP_EMIT(PDB_TOOLS_EV_CALL, nm, (size_t)(end - nm));
    return 0;
}

/* Decide what can be decided in buf. final: the end of the generation (decide everything). */
static int tp_run(pdb_tools_parser *p, int final, pdb_tools_event_fn fn, void *user) {
    if (p->forced_pending) {
        p->forced_pending = 0;
        p->n_calls = 1;
        TP_EMIT(PDB_TOOLS_EV_CALL, p->forced, strlen(p->forced));
    }
    for (;;) {
        switch (p->state) {
        case S_TEXT: {
            const char *m = tp_find(p->buf, p->len, PDB_TOOLS_CALLS_BEGIN);
            if (m) {
                size_t k = (size_t)(m - p->buf);
                if (k) TP_EMIT(PDB_TOOLS_EV_TEXT, p->buf, k);
                tp_consume(p, k + strlen(PDB_TOOLS_CALLS_BEGIN));
                p->state = S_BETWEEN;
                continue;
            }
            size_t keep = final ? 0 : tp_hold(p->buf, p->len, PDB_TOOLS_CALLS_BEGIN);
            if (p->len > keep) TP_EMIT(PDB_TOOLS_EV_TEXT, p->buf, p->len - keep);
            tp_consume(p, p->len - keep);
            return 0;
        }
        case S_BETWEEN: {
            size_t ws = 0;
            while (ws < p->len && (p->buf[ws] == ' ' || p->buf[ws] == '\n' || p->buf[ws] == '\r' || p->buf[ws] == '\t')) ws++;
            tp_consume(p, ws);
            if (tp_starts(p, PDB_TOOLS_CALL_BEGIN)) {
                tp_consume(p, strlen(PDB_TOOLS_CALL_BEGIN));
                p->state = S_HEAD;
                continue;
            }
            if (tp_starts(p, PDB_TOOLS_CALLS_END)) {
                tp_consume(p, strlen(PDB_TOOLS_CALLS_END));
                p->state = S_DONE;
                p->done = 1;
                continue;
            }
            if (!final && (p->len == 0 || tp_is_prefix(p, PDB_TOOLS_CALL_BEGIN) || tp_is_prefix(p, PDB_TOOLS_CALLS_END))) return 0;
            if (final && p->len == 0) return 0;
            p->state = S_TEXT; /* not a call: the rest is content */
            continue;
        }
        case S_HEAD: {
            if (p->head_sep) { /* the name starts here: it ends at its "\n" */
                if (final && p->len == 0) { p->head_sep = 0; p->state = S_TEXT; return 0; } /* nothing was generated */
                const char *nl = memchr(p->buf, '\n', p->len);
                if (!nl && !final && p->len <= PDB_TOOLS_MAX_HEAD) return 0;
                const char *end = nl ? nl : p->buf + p->len;
                p->head_sep = 0;
                p->n_calls++;
                TP_EMIT(PDB_TOOLS_EV_CALL, p->buf, (size_t)(end - p->buf));
                tp_consume(p, nl ? (size_t)(nl - p->buf) + 1 : p->len);
                p->state = S_FENCE;
                continue;
            }
            const char *sep = tp_find(p->buf, p->len, PDB_TOOLS_SEP);
            const char *nl = sep ? memchr(sep, '\n', (size_t)(p->buf + p->len - sep)) : NULL;
            if (sep && (nl || final)) {
                const char *end = nl ? nl : p->buf + p->len;
                int rc = tp_emit_head(p, sep, end, fn, user);
                if (rc) return rc;
                tp_consume(p, nl ? (size_t)(nl - p->buf) + 1 : p->len);
                p->state = S_FENCE;
                continue;
            }
            if (!final && p->len <= PDB_TOOLS_MAX_HEAD) return 0;
            p->state = S_TEXT; /* malformed head: content */
            continue;
        }
        case S_FENCE:
            if (tp_starts(p, PDB_TOOLS_FENCE)) tp_consume(p, strlen(PDB_TOOLS_FENCE));
            else if (tp_is_prefix(p, PDB_TOOLS_FENCE) && !final) return 0;
            else if (tp_is_prefix(p, PDB_TOOLS_FENCE)) tp_consume(p, p->len);
            p->state = S_ARGS;
            continue;
        case S_ARGS: {
            const char *m = tp_find(p->buf, p->len, PDB_TOOLS_CALL_END);
            if (m || final) {
                size_t k = m ? (size_t)(m - p->buf) : p->len;
                size_t a = m ? tp_args_trim(p->buf, k) : k - tp_args_hold(p->buf, k);
                if (a) TP_EMIT(PDB_TOOLS_EV_ARGS, p->buf, a);
                TP_EMIT(PDB_TOOLS_EV_CALL_END, NULL, 0);
                tp_consume(p, m ? k + strlen(PDB_TOOLS_CALL_END) : p->len);
                p->state = S_BETWEEN;
                if (final && !m) return 0;
                continue;
            }
            size_t keep = tp_args_hold(p->buf, p->len);
            if (p->len > keep) TP_EMIT(PDB_TOOLS_EV_ARGS, p->buf, p->len - keep);
            tp_consume(p, p->len - keep);
            return 0;
        }
        default: /* S_DONE: anything after the calls block is content */
            if (p->len) TP_EMIT(PDB_TOOLS_EV_TEXT, p->buf, p->len);
            p->len = 0;
            return 0;
        }
    }
}

int pdb_tools_parser_feed(pdb_tools_parser *p, const char *s, size_t n, pdb_tools_event_fn fn, void *user) {
    if (p->len + n + 1 > p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        while (nc < p->len + n + 1) nc *= 2;
        char *nb = realloc(p->buf, nc);
        if (!nb) return -1;
        p->buf = nb;
        p->cap = nc;
    }
    if (n) memcpy(p->buf + p->len, s, n);
    p->len += n;
    return tp_run(p, 0, fn, user);
}

int pdb_tools_parser_finish(pdb_tools_parser *p, pdb_tools_event_fn fn, void *user) { return tp_run(p, 1, fn, user); }
