/* pdb_buf: growable NUL-terminated byte buffer (see pdb_buf.h for the invariants). */
#include "pdb_buf.h"

#include <stdlib.h>
#include <string.h>

int pdb_buf_grow(char **p, size_t *cap, size_t need, size_t max) {
    if (need <= *cap) return 1;
    if (max && need > max) return 0;
    size_t nc = *cap ? *cap * 2 : 1024;
    while (nc < need) nc *= 2;
    if (max && nc > max) nc = max;
    char *np = realloc(*p, nc);
    if (!np) return 0;
    *p = np;
    *cap = nc;
    return 1;
}

int pdb_buf_put(pdb_buf *b, const char *s, size_t n) {
    if (b->oom) return 0;
    if (!pdb_buf_grow(&b->p, &b->cap, b->len + n + 1, b->max)) { b->oom = 1; return 0; }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 1;
}

void pdb_buf_puts(pdb_buf *b, const char *s) { pdb_buf_put(b, s, strlen(s)); }

void pdb_buf_free(pdb_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
