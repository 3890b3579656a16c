/* pdb_mem: anonymous memory in whole 2 MB units, aligned to 2 MB and advised for transparent huge
 * pages (or advised against them): the decoder's resident weights and the benchmarks' buffers.
 * Invariant: a region from pdb_mem_map is pdb_mem_len(n) bytes from a 2 MB boundary, readable and
 * writable, zero-filled; the advice is a hint (where THP is off the pages stay 4 KB). */
#ifndef PDB_MEM_H
#define PDB_MEM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* n rounded up to whole 2 MB units: the length pdb_mem_map maps and pdb_mem_unmap takes */
size_t pdb_mem_len(size_t n);
/* pdb_mem_len(n) bytes at a 2 MB boundary, advised MADV_HUGEPAGE when huge, else MADV_NOHUGEPAGE;
 * NULL (errno from mmap) when the memory cannot be had. */
void *pdb_mem_map(size_t n, int huge);
void pdb_mem_unmap(void *p, size_t n); /* n: the size given to pdb_mem_map */

#ifdef __cplusplus
}
#endif

#endif
