/* pdb_status: the one error type of pdbridge, a thread-local error message, logging and
 * always-on asserts. Invariant: every fallible function returns pdb_status; on failure it
 * has called pdb_err_set() so that pdb_err_msg() names the file/field/request at fault.
 * Library code never exits; only PDB_ASSERT (programmer errors) aborts. */
#ifndef PDB_STATUS_H
#define PDB_STATUS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Append-only: values are part of logs and test expectations. */
typedef enum pdb_status {
    PDB_OK = 0,
    PDB_NOMEM,       /* allocation failed */
    PDB_IO,          /* read/write/open/mmap failed */
    PDB_CORRUPT,     /* data fails validation (bad header, checksum, offsets) */
    PDB_PROTOCOL,    /* peer spoke something we do not understand */
    PDB_TOO_LARGE,   /* a limit was exceeded */
    PDB_TIMEOUT,     /* a deadline passed */
    PDB_CUDA,        /* a CUDA/cuBLAS/NCCL call failed */
    PDB_INVALID,     /* bad argument or configuration value */
    PDB_NOT_FOUND,   /* a named thing (tensor, file, block) does not exist */
    PDB_UNSUPPORTED, /* valid but not implemented (architecture, dtype) */
    PDB_MISMATCH,    /* two things that must agree do not (fingerprint, shape) */
    PDB_STATUS_COUNT
} pdb_status;

const char *pdb_status_str(pdb_status st);

/* Record the message for the current thread and return st (for `return pdb_err_set(...)`). */
pdb_status pdb_err_set(pdb_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with context ("loading X: " + old message); returns st. */
pdb_status pdb_err_wrap(pdb_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *pdb_err_msg(void);
void pdb_err_clear(void);

typedef enum pdb_log_level { PDB_LOG_DEBUG = 0, PDB_LOG_INFO, PDB_LOG_WARN, PDB_LOG_ERROR } pdb_log_level;
void pdb_log_set_level(pdb_log_level lvl);
void pdb_log(pdb_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define PDB_DEBUG(...) pdb_log(PDB_LOG_DEBUG, __VA_ARGS__)
#define PDB_INFO(...) pdb_log(PDB_LOG_INFO, __VA_ARGS__)
#define PDB_WARN(...) pdb_log(PDB_LOG_WARN, __VA_ARGS__)
#define PDB_ERROR(...) pdb_log(PDB_LOG_ERROR, __VA_ARGS__)

void pdb_assert_fail(const char *expr, const char *file, int line, const char *msg) __attribute__((noreturn));
/* Always on, also in release builds: for programmer errors only, never for bad input. */
#define PDB_ASSERT(cond, msg) \
    do { if (!(cond)) pdb_assert_fail(#cond, __FILE__, __LINE__, (msg)); } while (0)

/* Propagate a failure: `PDB_TRY(f(x));` returns f's status when it is not PDB_OK. */
#define PDB_TRY(expr) \
    do { pdb_status pdb_try_st_ = (expr); if (pdb_try_st_ != PDB_OK) return pdb_try_st_; } while (0)

#ifdef __cplusplus
}
#endif

#endif
