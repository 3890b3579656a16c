/* pdb_status: status names, the per-thread error message, leveled logging to stderr and the
 * always-on assert. Invariant: the error buffer is thread-local, so concurrent requests
 * never see each other's messages. */
#include "pdb_status.h"

#include <string.h>
#include <time.h>

static const char *const status_names[PDB_STATUS_COUNT] = {
    "ok", "out of memory", "i/o error", "corrupt data", "protocol error", "too large",
    "timeout", "cuda error", "invalid argument", "not found", "unsupported", "mismatch",
};

const char *pdb_status_str(pdb_status st) {
    if ((int)st < 0 || st >= PDB_STATUS_COUNT) return "unknown status";
    return status_names[st];
}

static _Thread_local char err_buf[1400];

pdb_status pdb_err_set(pdb_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return st;
}

pdb_status pdb_err_wrap(pdb_status st, const char *fmt, ...) {
    char prefix[256], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t n = strlen(prefix);
    memcpy(err_buf, prefix, n);
    snprintf(err_buf + n, sizeof err_buf - n, ": %.*s", (int)(sizeof err_buf - n - 3),
             old[0] ? old : pdb_status_str(st));
    return st;
}

const char *pdb_err_msg(void) { return err_buf[0] ? err_buf : "no error message"; }
void pdb_err_clear(void) { err_buf[0] = 0; }

static pdb_log_level log_level = PDB_LOG_INFO;
void pdb_log_set_level(pdb_log_level lvl) { log_level = lvl; }

void pdb_log(pdb_log_level lvl, const char *fmt, ...) {
    static const char *const tags[] = {"debug", "info", "warn", "error"};
    if (lvl < log_level) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld pdbridge %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, tags[lvl], line);
}

void pdb_assert_fail(const char *expr, const char *file, int line, const char *msg) {
    fprintf(stderr, "pdbridge: assertion failed at %s:%d: %s (%s)\n", file, line, msg, expr);
    abort();
}
