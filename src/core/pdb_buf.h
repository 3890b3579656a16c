/* pdb_buf: a growable, always NUL-terminated byte buffer for building text (rendered prompts,
 * SSE event streams, request and response bodies), and the one growth rule of the project's
 * hand-kept text buffers (pdb_buf_grow). Invariants: p[len] == 0 whenever p is not NULL; the
 * allocation never exceeds max bytes when max is set; once an allocation fails (or would pass
 * max), oom is set and every later put is a no-op, so a builder checks oom once at the end. */
#ifndef PDB_BUF_H
#define PDB_BUF_H

#include <stddef.h>

typedef struct pdb_buf {
    char *p;
    size_t len, cap;
    int oom;
    size_t max; /* most bytes the allocation may take, the NUL included (0: no limit); set before the first put */
} pdb_buf;

/* Grow the allocation *p of *cap bytes to at least need bytes: capacity doubles from 1024, never
 * past max (0: no limit). Returns 1, or 0 (nothing changed) when need > max or out of memory. */
int pdb_buf_grow(char **p, size_t *cap, size_t need, size_t max);
/* Append n bytes of s. Returns 1, or 0 with oom set (out of memory, past max, or oom before). */
int pdb_buf_put(pdb_buf *b, const char *s, size_t n);
/* Append the string s. */
void pdb_buf_puts(pdb_buf *b, const char *s);
/* Free the bytes and zero the buffer (max included). */
void pdb_buf_free(pdb_buf *b);

#endif
