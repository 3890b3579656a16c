/* pdb_buf: a growable, always NUL-terminated byte buffer for building text (rendered prompts,
 * SSE event streams). Invariants: p[len] == 0 whenever p is not NULL; once an allocation fails,
 * oom is set and every later put is a no-op, so a builder checks oom once at the end. */
#ifndef PDB_BUF_H
#define PDB_BUF_H

#include <stddef.h>

typedef struct pdb_buf { char *p; size_t len, cap; int oom; } pdb_buf;

/* Append n bytes of s (capacity doubles from 1024). */
void pdb_buf_put(pdb_buf *b, const char *s, size_t n);
/* Append the string s. */
void pdb_buf_puts(pdb_buf *b, const char *s);
/* Free the bytes and zero the buffer. */
void pdb_buf_free(pdb_buf *b);

#endif
