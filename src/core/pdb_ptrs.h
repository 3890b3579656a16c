/* pdb_ptrs: a growable list of owned heap blocks (malloc'd), freed together: the buffers a loader
 * or a writer must keep alive until it is done. Invariant: a pointer handed to pdb_ptrs_push is
 * the list's from then on, also when the push fails (it is freed then), so no caller leaks on an
 * error path; the list grows by doubling and never shrinks. */
#ifndef PDB_PTRS_H
#define PDB_PTRS_H

#include <stdint.h>

#include "pdb_status.h"

typedef struct pdb_ptrs {
    void **p;        /* [n] owned */
    int64_t n, cap;
} pdb_ptrs;

/* Take ownership of p (NULL: PDB_NOMEM, for a caller that pushes what malloc returned). */
pdb_status pdb_ptrs_push(pdb_ptrs *l, void *p);
/* Free every pointer and the list; l is empty (and reusable) afterwards. */
void pdb_ptrs_free(pdb_ptrs *l);

#endif
