/* pdb_pool: workers wait for a generation number; a run publishes (fn, ctx, n_tasks), bumps the
 * generation, and every thread (caller included) claims task indices from an atomic counter until
 * none are left; the caller returns when every worker has left the run. Workers and the caller
 * spin briefly (PDB_POOL_SPIN polls) before sleeping on a condition variable: a decode step runs
 * ~100 short parallel-fors, and waking sleeping threads for each would cost more than the work.
 * State: gen, active and stop are atomics; mu/cv/done only guard the sleeping paths. A traced run
 * (pdb_pool_trace) has its record chosen by the caller before gen is bumped; each thread writes
 * only its own two entries, and the caller stamps its return after every worker has left. */
#include "pdb_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_sys.h"

enum { PDB_POOL_SPIN = 4000 }; /* ~10-100 us of spin hints (x86 PAUSE, aarch64 YIELD): bridges the gaps inside a step, not idle time */

/* The three counters every run writes sit on cache lines of their own: the workers spin reading
 * gen, and claims (next) and departures (active) would otherwise invalidate that line for all of
 * them once per worker and run. */
struct pdb_pool {
    int n;                /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    atomic_int stop;
    pdb_pool_fn fn;       /* fn, ctx, n_tasks: written before gen is bumped, read-only during a run */
    void *ctx;
    int64_t n_tasks;
    uint64_t runs;        /* runs dispatched (written by the caller only, between runs) */
    double *trace;        /* pdb_pool_trace: the current run's record, or NULL (set by the caller before gen is bumped) */
    double *trace_buf;
    int64_t trace_cap, *trace_count;
    _Alignas(64) atomic_uint_fast64_t gen;
    _Alignas(64) atomic_int_fast64_t next;
    _Alignas(64) atomic_int active;
};

typedef struct { pdb_pool *p; int id; } pool_arg;

static void pool_work(pdb_pool *p, int id) {
    for (;;) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i, id);
    }
}

/* pool_work with thread id's entries in the run's trace record (when the run is traced) */
static void pool_work_traced(pdb_pool *p, int id) {
    double *t = p->trace;
    if (t) t[2 + 2 * id] = pdb_clock_now();
    pool_work(p, id);
    if (t) t[3 + 2 * id] = pdb_clock_now();
}

static void *pool_main(void *arg) {
    pool_arg a = *(pool_arg *)arg;
    free(arg);
    pdb_pool *p = a.p;
    uint64_t seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop) && spins < PDB_POOL_SPIN) {
            pdb_sys_cpu_relax();
            spins++;
        }
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->go, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        pool_work_traced(p, a.id);
        if (atomic_fetch_sub(&p->active, 1) == 1) { /* the last worker out wakes a sleeping caller */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

void pdb_pool_trace(pdb_pool *p, double *buf, int64_t cap, int64_t *count) {
    if (!p) return;
    p->trace_buf = buf, p->trace_cap = cap, p->trace_count = count;
}

pdb_status pdb_pool_create(int n, pdb_pool **out) {
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    if (n > 256) n = 256;
    pdb_pool *p = aligned_alloc(64, (sizeof *p + 63) / 64 * 64);
    if (!p) return pdb_err_set(PDB_NOMEM, "thread pool");
    memset(p, 0, sizeof *p);
    p->n = n;
    p->th = calloc((size_t)n, sizeof *p->th);
    if (!p->th) { free(p); return pdb_err_set(PDB_NOMEM, "thread pool"); }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int i = 1; i < n; i++) {
        pool_arg *a = malloc(sizeof *a);
        if (!a || (a->p = p, a->id = i, pthread_create(&p->th[i], NULL, pool_main, a))) {
            free(a);
            p->n = i;
            pdb_pool_destroy(p);
            return pdb_err_set(PDB_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return PDB_OK;
}

void pdb_pool_destroy(pdb_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int pdb_pool_threads(const pdb_pool *p) { return p ? p->n : 1; }

uint64_t pdb_pool_runs(const pdb_pool *p) { return p ? p->runs : 0; }

void pdb_pool_run(pdb_pool *p, int64_t n_tasks, pdb_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    p->runs++;
    p->trace = NULL;
    if (p->trace_buf) {
        int64_t k = (*p->trace_count)++;
        if (k < p->trace_cap) {
            p->trace = p->trace_buf + k * (2 + 2 * (int64_t)p->n);
            memset(p->trace, 0, sizeof(double) * (size_t)(2 + 2 * p->n));
            p->trace[0] = pdb_clock_now();
        }
    }
    atomic_store(&p->next, 0);
    atomic_store(&p->active, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1); /* publishes fn/ctx/n_tasks (seq_cst) */
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    pool_work_traced(p, 0);
    int spins = 0;
    while (atomic_load(&p->active) > 0 && spins < PDB_POOL_SPIN) {
        pdb_sys_cpu_relax();
        spins++;
    }
    if (atomic_load(&p->active) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    if (p->trace) p->trace[1] = pdb_clock_now();
}
