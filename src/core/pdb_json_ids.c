/* pdb_json_ids: a top-level member walk of a JSON object that reads one integer array into int32s
 * (the fast path of pdb_json_ids.h; every other input is left to the caller's full parse). */
#include "pdb_json_ids.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
} jscan;

static void ws(jscan *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

/* A string at j->i (the opening quote); *esc = 1 when it holds a backslash. 0 when unterminated. */
static int str(jscan *j, size_t *a, size_t *b, int *esc) {
    if (j->i >= j->n || j->s[j->i] != '"') return 0;
    *a = ++j->i;
    *esc = 0;
    while (j->i < j->n && j->s[j->i] != '"') {
        if ((unsigned char)j->s[j->i] < 0x20) return 0;
        if (j->s[j->i] == '\\') { *esc = 1; j->i++; }
        j->i++;
    }
    if (j->i >= j->n) return 0;
    *b = j->i++;
    return 1;
}

/* Skip one value of any kind (nested arrays and objects by depth, strings with escapes). The value
 * is not validated beyond its extent: the caller's full parse of the rest validates it. */
static int skip(jscan *j) {
    size_t a, b;
    int esc, depth = 0;
    do {
        ws(j);
        if (j->i >= j->n) return 0;
        char c = j->s[j->i];
        if (c == '"') {
            if (!str(j, &a, &b, &esc)) return 0;
        } else if (c == '[' || c == '{') {
            depth++;
            j->i++;
        } else if (c == ']' || c == '}') {
            if (!depth) return 0;
            depth--;
            j->i++;
        } else if (c == ',' || c == ':') {
            if (!depth) return 0;
            j->i++;
        } else { /* a bare word (number, true, ...); a NUL byte is no JSON: not taken */
            size_t w = j->i;
            while (j->i < j->n && j->s[j->i] && !strchr(",:[]{}\" \t\r\n", j->s[j->i])) j->i++;
            if (j->i == w) return 0;
        }
    } while (depth);
    return 1;
}

/* The array at j->i: plain non-negative integers only. 1 = taken (ids, n, bad set), 0 = not. */
static int ids_array(jscan *j, int64_t max_id, int32_t **ids, int64_t *n, int64_t *bad) {
    size_t at = j->i + 1, cap = 0;
    for (size_t k = at; k < j->n && j->s[k] != ']'; k++) cap += j->s[k] == ',';
    cap++; /* elements <= commas + 1 (an upper bound: commas inside the array only) */
    int32_t *v = malloc(sizeof(int32_t) * cap);
    if (!v) return -1;
    int64_t m = 0;
    *bad = -1;
    j->i++;
    for (;;) {
        ws(j);
        if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9') break;
        size_t d0 = j->i;
        int64_t x = 0;
        while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9' && j->i - d0 < 11) x = x * 10 + (j->s[j->i++] - '0');
        size_t nd = j->i - d0;
        if (nd > 10 || (nd > 1 && j->s[d0] == '0') || (j->i < j->n && strchr(".eE-+", j->s[j->i]))) break;
        if ((size_t)m >= cap) break;
        if (x >= max_id && *bad < 0) *bad = m;
        v[m++] = x < max_id ? (int32_t)x : -1;
        ws(j);
        if (j->i < j->n && j->s[j->i] == ',') { j->i++; continue; }
        if (j->i < j->n && j->s[j->i] == ']') {
            j->i++;
            *ids = v;
            *n = m;
            return 1;
        }
        break;
    }
    free(v);
    return 0;
}

void pdb_json_ids_free(pdb_json_ids *x) {
    free(x->ids);
    free(x->rest);
    memset(x, 0, sizeof *x);
}

pdb_status pdb_json_ids_scan(const char *body, size_t len, const char *key, int64_t max_id, pdb_json_ids *out) {
    memset(out, 0, sizeof *out);
    out->bad_index = -1;
    jscan j = {body, len, 0};
    size_t kl = strlen(key), va = 0, vb = 0;
    int32_t *ids = NULL;
    int64_t n = 0, bad = -1;
    int seen = 0;
    ws(&j);
    if (j.i >= j.n || body[j.i] != '{') return PDB_OK;
    j.i++;
    ws(&j);
    if (j.i < j.n && body[j.i] == '}') return PDB_OK;
    for (;;) {
        size_t a, b;
        int esc;
        ws(&j);
        if (!str(&j, &a, &b, &esc)) goto no;
        ws(&j);
        if (j.i >= j.n || body[j.i] != ':') goto no;
        j.i++;
        ws(&j);
        int match = b - a == kl && !memcmp(body + a, key, kl);
        if (esc || match) {
            if (seen || esc || j.i >= j.n || body[j.i] != '[') goto no; /* twice, escaped keys, not an array */
            va = j.i;
            int r = ids_array(&j, max_id, &ids, &n, &bad);
            if (r < 0) return pdb_err_set(PDB_NOMEM, "json ids: out of memory for '%s'", key);
            if (!r || n == 0) goto no;
            vb = j.i;
            seen = 1;
        } else if (!skip(&j)) {
            goto no;
        }
        ws(&j);
        if (j.i < j.n && body[j.i] == ',') { j.i++; continue; }
        if (j.i < j.n && body[j.i] == '}') { j.i++; break; }
        goto no;
    }
    ws(&j);
    if (j.i != j.n || !seen) goto no;
    out->rest_len = va + 1 + (len - vb);
    out->rest = malloc(out->rest_len + 1);
    if (!out->rest) {
        free(ids);
        return pdb_err_set(PDB_NOMEM, "json ids: out of memory for the body without '%s'", key);
    }
    memcpy(out->rest, body, va);
    out->rest[va] = '0';
    memcpy(out->rest + va + 1, body + vb, len - vb);
    out->rest[out->rest_len] = 0;
    out->found = 1, out->ids = ids, out->n = n, out->bad_index = bad;
    return PDB_OK;
no:
    free(ids);
    return PDB_OK;
}
