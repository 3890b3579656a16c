/* pdb_sys: the per-platform spellings behind pdb_sys.h (Linux first, macOS second, a plain
 * fallback last in each function). */
#include "pdb_sys.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef __APPLE__
#include <mach-o/dyld.h>
#include <stdlib.h>
#include <sys/sysctl.h>
#endif

int pdb_sys_o_directory(void) {
#ifdef O_DIRECTORY
    return O_DIRECTORY;
#else
    return 0;
#endif
}

void pdb_sys_advise_huge(void *p, size_t len, int huge) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
    (void)madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#else
    (void)p, (void)len, (void)huge;
#endif
}

int64_t pdb_sys_mtime_ns(const struct stat *st) {
#if defined(__APPLE__)
    return (int64_t)st->st_mtimespec.tv_sec * 1000000000 + st->st_mtimespec.tv_nsec;
#elif defined(__linux__)
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
#else
    return (int64_t)st->st_mtime * 1000000000;
#endif
}

int pdb_sys_self_exe(char *buf, size_t cap) {
    if (!buf || cap == 0) return -1;
    buf[0] = 0;
#if defined(__APPLE__)
    uint32_t n = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
    char raw[4096];
    uint32_t rn = sizeof raw;
    if (_NSGetExecutablePath(raw, &rn) != 0) return -1;
    char *real = realpath(raw, NULL); /* the loader's path may hold ./ or symlinks */
    if (!real) return -1;
    size_t len = strlen(real);
    if (len + 1 > n) { free(real); return -1; }
    memcpy(buf, real, len + 1);
    free(real);
    return 0;
#else
    ssize_t len = readlink("/proc/self/exe", buf, cap - 1);
    if (len <= 0 || (size_t)len >= cap - 1) { buf[0] = 0; return -1; }
    buf[len] = 0;
    return 0;
#endif
}

long pdb_sys_l3_bytes(void) {
#if defined(_SC_LEVEL3_CACHE_SIZE)
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? v : 0;
#elif defined(__APPLE__)
    int64_t v = 0;
    size_t len = sizeof v;
    return sysctlbyname("hw.l3cachesize", &v, &len, NULL, 0) == 0 && v > 0 ? (long)v : 0;
#else
    return 0;
#endif
}

long pdb_sys_l3_bytes_sysfs(void) {
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    long kb = 0;
    char unit = 0;
    if (f && fscanf(f, "%ld%c", &kb, &unit) >= 1 && kb > 0) {
        fclose(f);
        return unit == 'M' ? kb << 20 : kb << 10;
    }
    if (f) fclose(f);
    return pdb_sys_l3_bytes();
}
