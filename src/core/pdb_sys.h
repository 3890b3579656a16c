/* pdb_sys: the system calls and CPU hints whose spelling differs between Linux and macOS (or
 * between x86-64 and aarch64), each behind one function with a fallback, so that no other file
 * needs an #ifdef for the platform. Invariants: nothing here fails loudly or allocates: a hint the
 * platform lacks is a no-op, a value it cannot give is 0 / -1 as documented per function; every
 * function may be called from any thread. Linux x86-64 and aarch64 are built and tested here;
 * the macOS branches are written to compile by construction and are not built on this machine. */
#ifndef PDB_SYS_H
#define PDB_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One spin-wait hint (x86 PAUSE, aarch64 YIELD, nothing elsewhere): for the tight polling loops
 * of the thread pool and the attention's step barrier. Inline: it sits in loops of ~1 ns. */
static inline void pdb_sys_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The open(2) flag that makes opening anything but a directory fail (O_DIRECTORY), or 0 where
 * the platform has none (the caller's later calls then fail on a non-directory instead). */
int pdb_sys_o_directory(void);

/* Advise [p, p + len) for transparent huge pages (huge) or against them: madvise MADV_HUGEPAGE /
 * MADV_NOHUGEPAGE on Linux; a no-op elsewhere (macOS has no such advice). Never fails. */
void pdb_sys_advise_huge(void *p, size_t len, int huge);

/* A file's modification time in nanoseconds since the epoch (st_mtim on Linux, st_mtimespec on
 * macOS; whole seconds where neither exists). */
int64_t pdb_sys_mtime_ns(const struct stat *st);

/* The path of this process's own executable into buf (NUL-terminated): /proc/self/exe resolved
 * on Linux, _NSGetExecutablePath on macOS. Returns 0, or -1 (buf empty) when it cannot be found
 * or does not fit. */
int pdb_sys_self_exe(char *buf, size_t cap);

/* The last-level (L3) cache size in bytes (sysconf _SC_LEVEL3_CACHE_SIZE with glibc, sysctl
 * hw.l3cachesize on macOS); 0 when unknown (glibc on aarch64 often says 0). */
long pdb_sys_l3_bytes(void);

/* The L3 size as lscpu prints it: sysfs's cpu0 index3 on Linux when readable (some VMs' sysconf
 * reports the host's cache), else pdb_sys_l3_bytes. What the benchmarks size "several times the
 * L3" from. */
long pdb_sys_l3_bytes_sysfs(void);

/* (Memory figures, /proc on Linux and the Mach calls on macOS, live in pdb_proc.) */

#ifdef __cplusplus
}
#endif

#endif
