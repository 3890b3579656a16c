/* pdb_buf: growable NUL-terminated byte buffer (see pdb_buf.h for the invariants). */
#include "pdb_buf.h"

#include <stdlib.h>
#include <string.h>

void pdb_buf_put(pdb_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void pdb_buf_puts(pdb_buf *b, const char *s) { pdb_buf_put(b, s, strlen(s)); }

void pdb_buf_free(pdb_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
