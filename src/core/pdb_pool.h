/* pdb_pool: a fixed thread pool running one parallel-for at a time. Invariant: pdb_pool_run
 * returns only after every task ran exactly once; which thread runs a task never changes a
 * result (callers split work over outputs, never over a reduction). */
#ifndef PDB_POOL_H
#define PDB_POOL_H

#include <stdint.h>

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_pool pdb_pool;
typedef void (*pdb_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads <= 0: number of online CPUs. */
pdb_status pdb_pool_create(int n_threads, pdb_pool **out);
void pdb_pool_destroy(pdb_pool *p);
/* NULL (no pool) counts as one thread: the caller's. */
int pdb_pool_threads(const pdb_pool *p);
/* Run fn(ctx, i, thread) for i in [0, n_tasks); the caller's thread takes part. Not reentrant:
 * one run at a time per pool (callers serialise). p NULL: every task on the calling thread
 * (thread 0), in order. */
void pdb_pool_run(pdb_pool *p, int64_t n_tasks, pdb_pool_fn fn, void *ctx);
/* Runs that went to the workers so far (a run of one task, or on a pool of one thread, runs on
 * the caller alone and is not counted): benchmarks count dispatches per decode step. Read it
 * between runs. */
uint64_t pdb_pool_runs(const pdb_pool *p);
/* Diagnosis: while buf is set, each run that goes to the workers writes one record of 2 + 2n
 * doubles (pdb_clock_now seconds, n = pdb_pool_threads): [0] the caller publishes the run, [1]
 * the caller returns, [2 + 2i] thread i starts claiming tasks, [3 + 2i] thread i finds none left
 * (a thread that misses the run entirely records 0, 0). Records go to buf[k * (2 + 2n)] for
 * k < cap; *count counts them (past cap too). buf NULL stops tracing. Set between runs. */
void pdb_pool_trace(pdb_pool *p, double *buf, int64_t cap, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif
