/* pdb_proc: /proc readers (see pdb_proc.h): VmRSS/VmHWM of a status file, MemAvailable, and the
 * two memory gauges every server puts in /metrics. Unreadable values are 0, never an error. On
 * macOS (no /proc) the same figures come from the Mach calls instead (written to compile by
 * construction; not built on this project's machines). */
#include "pdb_proc.h"

#include <stdio.h>
#include <string.h>

#ifdef __APPLE__
#include <mach/mach.h>
#include <sys/resource.h>
#endif

void pdb_proc_read_memory_file(const char *path, pdb_proc_memory *out) {
    memset(out, 0, sizeof *out);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) out->rss_bytes = (uint64_t)kb * 1024;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) out->peak_rss_bytes = (uint64_t)kb * 1024;
    }
    fclose(f);
}

#ifdef __APPLE__
void pdb_proc_read_memory(pdb_proc_memory *out) {
    memset(out, 0, sizeof *out);
    mach_task_basic_info_data_t info;
    mach_msg_type_number_t n = MACH_TASK_BASIC_INFO_COUNT;
    if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&info, &n) == KERN_SUCCESS)
        out->rss_bytes = (uint64_t)info.resident_size;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) out->peak_rss_bytes = (uint64_t)ru.ru_maxrss; /* bytes on macOS */
}

uint64_t pdb_proc_mem_available(void) { /* free + inactive + purgeable pages: what new work can take */
    vm_statistics64_data_t vm;
    mach_msg_type_number_t n = HOST_VM_INFO64_COUNT;
    vm_size_t page = 0;
    if (host_page_size(mach_host_self(), &page) != KERN_SUCCESS ||
        host_statistics64(mach_host_self(), HOST_VM_INFO64, (host_info64_t)&vm, &n) != KERN_SUCCESS)
        return 0;
    return ((uint64_t)vm.free_count + vm.inactive_count + vm.purgeable_count) * (uint64_t)page;
}
#else
void pdb_proc_read_memory(pdb_proc_memory *out) { pdb_proc_read_memory_file("/proc/self/status", out); }

uint64_t pdb_proc_mem_available(void) {
    FILE *m = fopen("/proc/meminfo", "r");
    if (!m) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, m))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(m);
    return (uint64_t)kb * 1024;
}
#endif

size_t pdb_proc_metrics_text(char *buf, size_t cap) {
    if (!cap) return 0;
    pdb_proc_memory m;
    pdb_proc_read_memory(&m);
    int n = snprintf(buf, cap,
                     "# HELP pdb_process_rss_bytes Resident memory of this process now (VmRSS; 0 where /proc is missing).\n"
                     "# TYPE pdb_process_rss_bytes gauge\npdb_process_rss_bytes %llu\n"
                     "# HELP pdb_process_peak_rss_bytes Peak resident memory of this process since it started (VmHWM; 0 "
                     "where /proc is missing).\n"
                     "# TYPE pdb_process_peak_rss_bytes gauge\npdb_process_peak_rss_bytes %llu\n",
                     (unsigned long long)m.rss_bytes, (unsigned long long)m.peak_rss_bytes);
    if (n < 0) {
        buf[0] = 0;
        return 0;
    }
    if ((size_t)n >= cap) { /* cut at the last whole line so a scraper never sees half a sample */
        char *nl = NULL;
        for (char *p = buf; *p; p++)
            if (*p == '\n') nl = p;
        size_t k = nl ? (size_t)(nl - buf) + 1 : 0;
        buf[k] = 0;
        return k;
    }
    return (size_t)n;
}
