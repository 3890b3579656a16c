/* pdb_proc: what the kernel says about this process and this machine, read from /proc: the
 * resident memory of the process now and at its peak (VmRSS, VmHWM of /proc/self/status) and the
 * memory available to new work (MemAvailable of /proc/meminfo). The one place that reads /proc
 * (on macOS, where there is none, the same figures come from task_info, getrusage and
 * host_statistics64).
 * Invariants: nothing here fails or allocates: a value that cannot be read (no /proc, a field
 * missing, a line that does not parse) is 0, so a caller on another kernel reports 0 and goes on;
 * values are bytes (the kernel's kB times 1024). Every function may be called from any thread. */
#ifndef PDB_PROC_H
#define PDB_PROC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_proc_memory {
    uint64_t rss_bytes;      /* VmRSS: resident now */
    uint64_t peak_rss_bytes; /* VmHWM: the most resident at any time since the process started */
} pdb_proc_memory;

/* This process's resident memory (/proc/self/status); fields 0 when unreadable. */
void pdb_proc_read_memory(pdb_proc_memory *out);
/* The same from a file in /proc/PID/status's form (a test gives a fixture or a missing path). */
void pdb_proc_read_memory_file(const char *path, pdb_proc_memory *out);
/* MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read. */
uint64_t pdb_proc_mem_available(void);

/* The two gauges pdb_process_rss_bytes and pdb_process_peak_rss_bytes (HELP, TYPE and value
 * lines, Prometheus text) for this process, written at buf (NUL-terminated when cap > 0). Returns
 * the bytes written, never more than cap - 1 (0 when cap is 0): a caller appends it to its
 * /metrics answer. The same lines on every server, so one scrape rule reads all three. */
size_t pdb_proc_metrics_text(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
