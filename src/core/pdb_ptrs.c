/* pdb_ptrs: see pdb_ptrs.h. */
#include "pdb_ptrs.h"

#include <stdlib.h>

pdb_status pdb_ptrs_push(pdb_ptrs *l, void *p) {
    if (!p) return pdb_err_set(PDB_NOMEM, "out of memory");
    if (l->n == l->cap) {
        int64_t nc = l->cap ? l->cap * 2 : 64;
        void **np = realloc(l->p, sizeof(*np) * (size_t)nc);
        if (!np) {
            free(p);
            return pdb_err_set(PDB_NOMEM, "out of memory (a list of %lld buffers)", (long long)nc);
        }
        l->p = np;
        l->cap = nc;
    }
    l->p[l->n++] = p;
    return PDB_OK;
}

void pdb_ptrs_free(pdb_ptrs *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->p[i]);
    free(l->p);
    l->p = NULL;
    l->n = l->cap = 0;
}
