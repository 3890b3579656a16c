/* pdb_names: formatting and lookup over a model's tensor-name table (see pdb_names.h for the
 * spelling order). The patterns come from the tables' static rows only, never from input. */
#include "pdb_names.h"

#include <stdio.h>

static const pdb_names_row *row_of(const pdb_names_table *t, int role) {
    PDB_ASSERT(t && role >= 0 && role < t->n_roles && t->rows[role].role == role, "pdb_names: bad role");
    return &t->rows[role];
}

static const char *const *prefixes(const pdb_names_table *t, const pdb_names_row *r) {
    return r->scope == PDB_NAMES_GLOBAL ? t->global_prefix : t->layer_prefix;
}

static int count(const char *const *v, int max) {
    int n = 0;
    while (n < max && v[n]) n++;
    return n;
}

int pdb_names_spellings(const pdb_names_table *t, int role) {
    const pdb_names_row *r = row_of(t, role);
    return count(r->suffix, PDB_NAMES_MAX_SUFFIX) * count(prefixes(t, r), PDB_NAMES_MAX_PREFIX);
}

const char *pdb_names_format(const pdb_names_table *t, int role, int spelling, int64_t layer, int64_t expert, char *buf) {
    const pdb_names_row *r = row_of(t, role);
    const char *const *pre = prefixes(t, r);
    int np = count(pre, PDB_NAMES_MAX_PREFIX);
    PDB_ASSERT(np > 0 && spelling >= 0 && spelling < pdb_names_spellings(t, role), "pdb_names_format: bad spelling");
    /* the prefix has the layer's conversion (or none, for GLOBAL), the suffix the expert's (or none) */
    int n = snprintf(buf, PDB_NAMES_MAX_LEN, pre[spelling % np], (long long)layer);
    PDB_ASSERT(n >= 0 && n < PDB_NAMES_MAX_LEN, "pdb_names_format: name too long");
    int m = snprintf(buf + n, (size_t)(PDB_NAMES_MAX_LEN - n), r->suffix[spelling / np], (long long)expert);
    PDB_ASSERT(m >= 0 && m < PDB_NAMES_MAX_LEN - n, "pdb_names_format: name too long");
    return buf;
}

const char *pdb_names_format_saved(const pdb_names_table *t, int role, int64_t layer, int64_t expert, char *buf) {
    return pdb_names_format(t, role, row_of(t, role)->saved, layer, expert, buf);
}

const pdb_tensor_view *pdb_names_find(const pdb_names_table *t, const pdb_st *st, int role, int64_t layer,
                                      int64_t expert, char *buf) {
    int n = pdb_names_spellings(t, role);
    for (int i = 0; i < n; i++) {
        const pdb_tensor_view *v = pdb_st_find(st, pdb_names_format(t, role, i, layer, expert, buf));
        if (v) return v;
    }
    pdb_names_format(t, role, 0, layer, expert, buf);
    return NULL;
}
