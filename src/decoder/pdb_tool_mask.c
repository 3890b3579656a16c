/* pdb_tool_mask: the forced tool call's mask (see pdb_tool_mask.h). The name part is a set of
 * candidate strings S_i = name_i "\n```json\n"; the state holds the bytes w written so far, and
 * the candidates still possible are those S_i that start with w. No S_i is a prefix of another
 * (names hold no '\n'), so the name is decided exactly when w equals one S_i, and the state then
 * moves to the arguments. A token is judged by its first byte against the candidates' next bytes
 * first (most tokens fail there), then by comparing its bytes with each candidate's rest. */
#include "pdb_tool_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_tools.h"

struct pdb_tool_mask {
    const pdb_json_vocab *v;
    size_t n;                 /* candidates; 0 = arguments only */
    char **s;                 /* [n] name "\n```json\n" */
    size_t *len;              /* [n] */
    size_t min_len;           /* the shortest S_i (0 when n = 0) */
};

pdb_status pdb_tool_mask_new(const pdb_json_vocab *v, const char *const *names, size_t n_names, pdb_tool_mask **out) {
    *out = NULL;
    pdb_tool_mask *m = calloc(1, sizeof *m);
    if (!m) return pdb_err_set(PDB_NOMEM, "tool mask: out of memory");
    m->v = v;
    m->s = calloc(n_names + 1, sizeof *m->s);
    m->len = calloc(n_names + 1, sizeof *m->len);
    if (!m->s || !m->len) { pdb_tool_mask_free(m); return pdb_err_set(PDB_NOMEM, "tool mask: out of memory"); }
    const size_t open = strlen(PDB_TOOLS_ARGS_OPEN);
    if (n_names > PDB_TOOL_MASK_MAX_NAMES) {
        pdb_tool_mask_free(m);
        return pdb_err_set(PDB_INVALID, "tool mask: %zu names (limit %d)", n_names, PDB_TOOL_MASK_MAX_NAMES);
    }
    for (size_t i = 0; i < n_names; i++) {
        size_t nl = strlen(names[i]);
        if (nl == 0 || nl + open > PDB_TOOL_MASK_MAX_HEAD || memchr(names[i], '\n', nl)) {
            pdb_tool_mask_free(m);
            return pdb_err_set(PDB_INVALID, "tool mask: the name '%.64s' is empty, too long or holds a newline", names[i]);
        }
        m->s[i] = malloc(nl + open + 1);
        if (!m->s[i]) { pdb_tool_mask_free(m); return pdb_err_set(PDB_NOMEM, "tool mask: out of memory"); }
        memcpy(m->s[i], names[i], nl);
        memcpy(m->s[i] + nl, PDB_TOOLS_ARGS_OPEN, open + 1);
        m->len[i] = nl + open;
        m->n = i + 1;
        if (!m->min_len || m->len[i] < m->min_len) m->min_len = m->len[i];
    }
    *out = m;
    return PDB_OK;
}

void pdb_tool_mask_free(pdb_tool_mask *m) {
    if (!m) return;
    for (size_t i = 0; m->s && i < m->n; i++) free(m->s[i]);
    free(m->s);
    free(m->len);
    free(m);
}

void pdb_tool_mask_state_init(const pdb_tool_mask *m, pdb_tool_mask_state *st) {
    memset(st, 0, sizeof *st);
    st->args = m->n == 0;
    pdb_json_state_init(&st->js);
}

int64_t pdb_tool_mask_min_tokens(const pdb_tool_mask *m) { return (int64_t)m->min_len + 2; }

int pdb_tool_mask_done(const pdb_tool_mask_state *st) { return st->args && pdb_json_state_complete(&st->js); }

/* Candidate i is still possible after w. */
static int tm_live(const pdb_tool_mask *m, const pdb_tool_mask_state *st, size_t i) {
    return m->len[i] > st->n && !memcmp(m->s[i], st->w, st->n);
}

int64_t pdb_tool_mask_apply(const pdb_tool_mask *m, const pdb_tool_mask_state *st, float *logits, int64_t n_vocab, int64_t budget) {
    if (st->args) return pdb_json_mask_apply(m->v, &st->js, logits, n_vocab, budget);
    /* the candidates still possible, and the bytes that can come next */
    size_t live[PDB_TOOL_MASK_MAX_NAMES], n_live = 0;
    uint8_t first_ok[256] = {0};
    for (size_t i = 0; i < m->n; i++)
        if (tm_live(m, st, i)) {
            live[n_live++] = i;
            first_ok[(unsigned char)m->s[i][st->n]] = 1;
        }
    int64_t allowed = 0;
    for (int64_t t = 0; t < n_vocab; t++) {
        size_t len = 0;
        const char *b = pdb_json_vocab_token(m->v, t, &len);
        int ok = 0;
        if (b && len && first_ok[(unsigned char)b[0]]) {
            for (size_t k = 0; k < n_live && !ok; k++) {
                size_t i = live[k], rest = m->len[i] - st->n;
                /* the token stays inside S_i, and what is left of S_i plus "{}" fits the budget */
                ok = len <= rest && !memcmp(m->s[i] + st->n, b, len) && (int64_t)(rest - len) + 2 <= budget;
            }
        }
        if (ok) allowed++;
        else logits[t] = -INFINITY;
    }
    return allowed;
}

int pdb_tool_mask_advance(const pdb_tool_mask *m, pdb_tool_mask_state *st, int32_t tok) {
    if (st->args) return pdb_json_mask_advance(m->v, &st->js, tok);
    size_t len = 0;
    const char *b = pdb_json_vocab_token(m->v, tok, &len);
    if (!b || st->n + len > PDB_TOOL_MASK_MAX_HEAD) return 0;
    memcpy(st->w + st->n, b, len);
    st->n = (uint8_t)(st->n + len);
    int prefix = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->len[i] < st->n || memcmp(m->s[i], st->w, st->n)) continue;
        if (m->len[i] == st->n) { /* the name and its fence are written: the arguments follow */
            st->args = 1;
            pdb_json_state_init(&st->js);
            return 1;
        }
        prefix = 1;
    }
    return prefix;
}
