/* pdb_mem: 2 MB-aligned anonymous memory advised for (or against) transparent huge pages. The
 * alignment comes from mapping one extra 2 MB unit and unmapping the unaligned head and tail. */
#include "pdb_mem.h"

#include <stdint.h>
#include <sys/mman.h>

#include "pdb_sys.h"

enum { MEM_HUGE = 2 << 20 };

size_t pdb_mem_len(size_t n) { return (n + MEM_HUGE - 1) / MEM_HUGE * MEM_HUGE; }

void *pdb_mem_map(size_t n, int huge) {
    size_t len = pdb_mem_len(n);
    uint8_t *raw = mmap(NULL, len + MEM_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)raw + MEM_HUGE - 1) / MEM_HUGE * MEM_HUGE);
    if (a > raw) munmap(raw, (size_t)(a - raw));
    if (a + len < raw + len + MEM_HUGE) munmap(a + len, (size_t)(raw + len + MEM_HUGE - (a + len)));
    pdb_sys_advise_huge(a, len, huge); /* Linux only; elsewhere the kernel picks the pages */
    return a;
}

void pdb_mem_unmap(void *p, size_t n) {
    if (p) munmap(p, pdb_mem_len(n));
}
