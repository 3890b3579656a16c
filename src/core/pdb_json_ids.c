/* pdb_json_ids: a byte-at-a-time walk of a JSON object's top-level members that reads one integer
 * array into int32s (the fast path of pdb_json_ids.h). One state machine serves the whole body
 * (pdb_json_ids_scan) and its pieces (the reader), so the two cannot disagree. Everything but the
 * array is kept verbatim in `rest` (the array as "0"); any byte off the fast path switches the
 * reader to keeping every later byte verbatim behind the stand-in of what it has consumed. */
#include "pdb_json_ids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_buf.h"

typedef enum {
    R_START,   /* before the top-level '{' */
    R_OPEN,    /* after '{': a key or (declined) '}' */
    R_KEY_Q,   /* after ',': a key's opening quote */
    R_KEY,     /* inside a key */
    R_COLON,   /* after a key */
    R_VALUE,   /* after ':' */
    R_SKIP,    /* inside another member's value */
    R_AFTER,   /* after a member's value: ',' or '}' */
    R_END,     /* after the closing '}': whitespace only */
    R_A_ELEM,  /* in the array, after '[' or ',': an element's first digit */
    R_A_DIGITS,/* in an element's digits */
    R_A_AFTER, /* after an element: ',' or ']' */
    R_RAW      /* declined: every byte verbatim */
} rstate;

struct pdb_json_ids_reader {
    char key[64];
    size_t kl;
    int64_t max_id;
    rstate st;
    pdb_status err;
    uint64_t fed;
    pdb_buf rest;
    /* the key being read, and the member it names */
    size_t key_at;
    int key_esc, key_bs, match, seen;
    /* a skipped value */
    int depth, in_str, str_bs, in_word;
    /* the array: ids, the element being read, and where the consumed part ends (nl newlines,
     * then col bytes; col counts from '[' while nl is 0) */
    int started, closed, after_comma;
    size_t va; /* rest offset of the "0" standing for the array */
    int32_t *ids;
    int64_t n, cap, bad;
    int64_t x;
    int nd;
    char dig[12];
    int64_t nl, col;
};

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void put(pdb_json_ids_reader *rd, const char *s, size_t n) {
    if (!pdb_buf_put(&rd->rest, s, n) && !rd->err) rd->err = pdb_err_set(PDB_NOMEM, "json ids: out of memory for the body without '%s'", rd->key);
}

/* The array as read so far in place of its "0" at rest[va] (out holds rest[0..va) already):
 * compact elements (an id past the vocabulary as max_id, no longer than its own digits), then
 * whitespace up to the line and column the consumed bytes ended at, then rest after the "0". The
 * consumed bytes are only '[', digits, ',', ']' and whitespace, so the compact form is never
 * longer than they were on their last line. 0 when out of memory. */
static int stand_in(pdb_buf *out, const char *tail, size_t tail_len, const int32_t *ids, int64_t n, int64_t max_id,
                    int after_comma, int closed, int64_t nl, int64_t col) {
    char num[24];
    int64_t lc = 1;
    pdb_buf_put(out, "[", 1);
    for (int64_t i = 0; i < n; i++) {
        int k = snprintf(num, sizeof num, "%s%lld", i ? "," : "", (long long)(ids[i] >= 0 ? ids[i] : max_id));
        pdb_buf_put(out, num, (size_t)k);
        lc += k;
    }
    if (after_comma && !closed) { pdb_buf_put(out, ",", 1); lc++; }
    if (closed) lc++;
    char sp[256];
    int64_t pad = nl == 0 ? col - lc : col - (closed ? 1 : 0);
    memset(sp, '\n', sizeof sp);
    for (int64_t k = nl; k > 0; k -= (int64_t)sizeof sp) pdb_buf_put(out, sp, k < (int64_t)sizeof sp ? (size_t)k : sizeof sp);
    memset(sp, ' ', sizeof sp);
    for (int64_t k = pad; k > 0; k -= (int64_t)sizeof sp) pdb_buf_put(out, sp, k < (int64_t)sizeof sp ? (size_t)k : sizeof sp);
    if (closed) pdb_buf_put(out, "]", 1);
    pdb_buf_put(out, tail, tail_len);
    return !out->oom;
}

static void put_stand_in(pdb_json_ids_reader *rd) {
    pdb_buf out = {0};
    pdb_buf_put(&out, rd->rest.p, rd->va);
    if (!stand_in(&out, rd->rest.p + rd->va + 1, rd->rest.len - (rd->va + 1), rd->ids, rd->n, rd->max_id, rd->after_comma,
                  rd->closed, rd->nl, rd->col)) {
        pdb_buf_free(&out);
        if (!rd->err) rd->err = pdb_err_set(PDB_NOMEM, "json ids: out of memory for the body's stand-in");
        return;
    }
    pdb_buf_free(&rd->rest);
    rd->rest = out;
}

pdb_status pdb_json_ids_stand_in(const pdb_json_ids *x, int64_t max_id, char **text, size_t *len) {
    *text = NULL, *len = 0;
    if (!x->found || !x->rest || x->array_at >= x->rest_len) return pdb_err_set(PDB_INVALID, "json ids: no array to stand in for");
    pdb_buf out = {0};
    pdb_buf_put(&out, x->rest, x->array_at);
    if (!stand_in(&out, x->rest + x->array_at + 1, x->rest_len - (x->array_at + 1), x->ids, x->n, max_id, 0, 1, x->array_nl,
                  x->array_col)) {
        pdb_buf_free(&out);
        return pdb_err_set(PDB_NOMEM, "json ids: out of memory for the body's stand-in");
    }
    *text = out.p, *len = out.len;
    return PDB_OK;
}

/* Off the fast path: what was consumed becomes its stand-in, then `pending` (bytes not consumed:
 * an element's digits and the byte at hand) and everything after are kept verbatim. */
static void decline(pdb_json_ids_reader *rd, const char *pending, size_t np) {
    /* a comma is the last consumed token when an element was due (or its digits were read) */
    rd->after_comma = (rd->st == R_A_ELEM || rd->st == R_A_DIGITS) && rd->n > 0;
    if (rd->started) put_stand_in(rd);
    put(rd, pending, np);
    rd->st = R_RAW;
}

static void commit_id(pdb_json_ids_reader *rd) {
    if (rd->n == rd->cap) {
        int64_t nc = rd->cap ? rd->cap * 2 : 1024;
        int32_t *v = realloc(rd->ids, sizeof(int32_t) * (size_t)nc);
        if (!v) { if (!rd->err) rd->err = pdb_err_set(PDB_NOMEM, "json ids: out of memory for '%s'", rd->key); return; }
        rd->ids = v, rd->cap = nc;
    }
    if (rd->x >= rd->max_id && rd->bad < 0) rd->bad = rd->n;
    rd->ids[rd->n++] = rd->x < rd->max_id ? (int32_t)rd->x : -1;
    rd->col += rd->nd;
    rd->nd = 0;
}

static void array_pos(pdb_json_ids_reader *rd, unsigned char c) {
    if (c == '\n') rd->nl++, rd->col = 0;
    else rd->col++;
}

static void start_key(pdb_json_ids_reader *rd, const char *c) {
    put(rd, c, 1);
    rd->key_at = rd->rest.len;
    rd->key_esc = rd->key_bs = 0;
    rd->st = R_KEY;
}

/* One byte; returns 1 when the byte must be looked at again in the new state. */
static int step(pdb_json_ids_reader *rd, const char *p) {
    unsigned char c = (unsigned char)*p;
    switch (rd->st) {
    case R_START:
        if (is_ws(c)) put(rd, p, 1);
        else if (c == '{') { put(rd, p, 1); rd->st = R_OPEN; }
        else decline(rd, p, 1);
        return 0;
    case R_OPEN:
    case R_KEY_Q:
        if (is_ws(c)) put(rd, p, 1);
        else if (c == '"') start_key(rd, p);
        else decline(rd, p, 1); /* '{}' included: no member */
        return 0;
    case R_KEY:
        if (rd->key_bs) { rd->key_bs = 0; put(rd, p, 1); }
        else if (c == '"') {
            size_t kn = rd->rest.len - rd->key_at;
            rd->match = kn == rd->kl && !memcmp(rd->rest.p + rd->key_at, rd->key, rd->kl);
            put(rd, p, 1);
            rd->st = R_COLON;
        } else if (c < 0x20) decline(rd, p, 1);
        else {
            if (c == '\\') rd->key_esc = rd->key_bs = 1;
            put(rd, p, 1);
        }
        return 0;
    case R_COLON:
        if (is_ws(c)) put(rd, p, 1);
        else if (c == ':') { put(rd, p, 1); rd->st = R_VALUE; }
        else decline(rd, p, 1);
        return 0;
    case R_VALUE:
        if (is_ws(c)) { put(rd, p, 1); return 0; }
        if (rd->key_esc || rd->match) { /* twice, escaped keys (maybe KEY), not an array: the full parse */
            if (rd->seen || rd->key_esc || c != '[') { decline(rd, p, 1); return 0; }
            rd->va = rd->rest.len;
            put(rd, "0", 1);
            rd->started = 1, rd->nl = 0, rd->col = 1, rd->n = 0, rd->bad = -1;
            rd->st = R_A_ELEM;
            return 0;
        }
        rd->depth = rd->in_str = rd->str_bs = rd->in_word = 0;
        rd->st = R_SKIP;
        return 1;
    case R_SKIP:
        /* as a walk that skips one value of any kind (nested by depth, strings with escapes)
         * without validating it: jansson's parse of the rest does */
        if (rd->in_str) {
            if (rd->str_bs) rd->str_bs = 0;
            else if (c == '"') { rd->in_str = 0; if (!rd->depth) rd->st = R_AFTER; }
            else if (c < 0x20) { decline(rd, p, 1); return 0; }
            else if (c == '\\') rd->str_bs = 1;
            put(rd, p, 1);
            return 0;
        }
        if (rd->in_word) {
            if (c && !strchr(",:[]{}\" \t\r\n", c)) { put(rd, p, 1); return 0; }
            rd->in_word = 0;
            if (!rd->depth) { rd->st = R_AFTER; return 1; }
        }
        if (is_ws(c)) put(rd, p, 1);
        else if (c == '"') { rd->in_str = 1; put(rd, p, 1); }
        else if (c == '[' || c == '{') { rd->depth++; put(rd, p, 1); }
        else if (c == ']' || c == '}') {
            if (!rd->depth) { decline(rd, p, 1); return 0; }
            put(rd, p, 1);
            if (!--rd->depth) rd->st = R_AFTER;
        } else if (c == ',' || c == ':') {
            if (!rd->depth) { decline(rd, p, 1); return 0; }
            put(rd, p, 1);
        } else if (!c) decline(rd, p, 1); /* a NUL byte is no JSON */
        else { rd->in_word = 1; put(rd, p, 1); }
        return 0;
    case R_AFTER:
        if (is_ws(c)) put(rd, p, 1);
        else if (c == ',') { put(rd, p, 1); rd->st = R_KEY_Q; }
        else if (c == '}') { put(rd, p, 1); rd->st = R_END; }
        else decline(rd, p, 1);
        return 0;
    case R_END:
        if (is_ws(c)) put(rd, p, 1);
        else decline(rd, p, 1);
        return 0;
    case R_A_ELEM:
        if (is_ws(c)) array_pos(rd, c);
        else if (c >= '0' && c <= '9') { rd->dig[0] = (char)c; rd->nd = 1; rd->x = c - '0'; rd->st = R_A_DIGITS; }
        else decline(rd, p, 1);
        return 0;
    case R_A_DIGITS:
        if (c >= '0' && c <= '9') {
            if (rd->nd == 10) { /* an 11th digit: past int32 anyway */
                rd->dig[rd->nd++] = (char)c;
                decline(rd, rd->dig, (size_t)rd->nd);
                return 0;
            }
            rd->dig[rd->nd++] = (char)c;
            rd->x = rd->x * 10 + (c - '0');
            return 0;
        }
        /* taken only before whitespace, ',' or ']': anything else (a fraction, an exponent, a
         * letter, a byte jansson cannot decode) may belong to the number in jansson's eyes (its
         * error would be "near" the digits), so the digits stay verbatim */
        if ((rd->nd > 1 && rd->dig[0] == '0') || !(is_ws(c) || c == ',' || c == ']')) {
            rd->dig[rd->nd] = (char)c;
            decline(rd, rd->dig, (size_t)rd->nd + 1);
            return 0;
        }
        commit_id(rd);
        rd->st = R_A_AFTER;
        return 1;
    case R_A_AFTER:
        if (is_ws(c)) array_pos(rd, c);
        else if (c == ',') { array_pos(rd, c); rd->st = R_A_ELEM; }
        else if (c == ']') { array_pos(rd, c); rd->closed = 1; rd->seen = 1; rd->st = R_AFTER; }
        else decline(rd, p, 1);
        return 0;
    case R_RAW:
        put(rd, p, 1);
        return 0;
    }
    return 0;
}

pdb_status pdb_json_ids_reader_new(const char *key, int64_t max_id, pdb_json_ids_reader **out) {
    *out = NULL;
    size_t kl = strlen(key);
    if (kl >= sizeof ((pdb_json_ids_reader *)0)->key) return pdb_err_set(PDB_INVALID, "json ids: key '%s' too long", key);
    pdb_json_ids_reader *rd = calloc(1, sizeof *rd);
    if (!rd) return pdb_err_set(PDB_NOMEM, "json ids: out of memory for a reader");
    memcpy(rd->key, key, kl + 1);
    rd->kl = kl;
    rd->max_id = max_id;
    rd->bad = -1;
    *out = rd;
    return PDB_OK;
}

pdb_status pdb_json_ids_reader_feed(pdb_json_ids_reader *rd, const char *data, size_t len) {
    rd->fed += len;
    for (size_t i = 0; i < len && !rd->err; i++) {
        if (rd->st == R_RAW) { put(rd, data + i, len - i); break; }
        while (step(rd, data + i)) {}
    }
    return rd->err;
}

uint64_t pdb_json_ids_reader_bytes(const pdb_json_ids_reader *rd) { return rd->fed; }

pdb_status pdb_json_ids_reader_finish(pdb_json_ids_reader *rd, pdb_json_ids *out) {
    memset(out, 0, sizeof *out);
    out->bad_index = -1;
    if (!rd->err && rd->st == R_END && rd->seen) {
        int32_t *v = realloc(rd->ids, sizeof(int32_t) * (size_t)rd->n); /* the exact size */
        if (v) rd->ids = v;
        out->found = 1, out->ids = rd->ids, out->n = rd->n, out->bad_index = rd->bad;
        out->array_at = rd->va, out->array_nl = rd->nl, out->array_col = rd->col;
        rd->ids = NULL;
    } else if (!rd->err && rd->st != R_RAW) {
        /* ended on the fast path's way: the stand-in of what was consumed (an element's digits not
         * yet taken included) */
        decline(rd, rd->dig, rd->st == R_A_DIGITS ? (size_t)rd->nd : 0);
    }
    if (rd->err) return rd->err;
    if (!rd->rest.p && !pdb_buf_put(&rd->rest, "", 0)) return pdb_err_set(PDB_NOMEM, "json ids: out of memory"); /* "" for an empty body */
    out->rest = rd->rest.p;
    out->rest_len = rd->rest.len;
    rd->rest = (pdb_buf){0};
    return PDB_OK;
}

void pdb_json_ids_reader_free(pdb_json_ids_reader *rd) {
    if (!rd) return;
    free(rd->ids);
    pdb_buf_free(&rd->rest);
    free(rd);
}

void pdb_json_ids_free(pdb_json_ids *x) {
    free(x->ids);
    free(x->rest);
    memset(x, 0, sizeof *x);
}

pdb_status pdb_json_ids_scan(const char *body, size_t len, const char *key, int64_t max_id, pdb_json_ids *out) {
    memset(out, 0, sizeof *out);
    out->bad_index = -1;
    pdb_json_ids_reader *rd;
    PDB_TRY(pdb_json_ids_reader_new(key, max_id, &rd));
    pdb_status st = pdb_json_ids_reader_feed(rd, body, len);
    if (!st) st = pdb_json_ids_reader_finish(rd, out);
    pdb_json_ids_reader_free(rd);
    if (st) return st;
    if (!out->found) { /* the caller holds the body itself */
        free(out->rest);
        out->rest = NULL;
        out->rest_len = 0;
    }
    return PDB_OK;
}
