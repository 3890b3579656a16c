/* pdb_pool: workers wait on a condition variable for a generation number; a run publishes
 * (fn, ctx, n_tasks), bumps the generation, and every thread (caller included) claims task
 * indices from an atomic counter until none are left; the caller waits until all workers have
 * left the run. State: gen (run number), next (next task), active (workers still in the run). */
#include "pdb_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct pdb_pool {
    int n;                /* threads including the caller */
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;
    int stop, active;
    pdb_pool_fn fn;
    void *ctx;
    int64_t n_tasks;
    atomic_int_fast64_t next;
};

typedef struct { pdb_pool *p; int id; } pool_arg;

static void pool_work(pdb_pool *p, int id) {
    for (;;) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->fn(p->ctx, i, id);
    }
}

static void *pool_main(void *arg) {
    pool_arg a = *(pool_arg *)arg;
    free(arg);
    pdb_pool *p = a.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        pool_work(p, a.id);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

pdb_status pdb_pool_create(int n, pdb_pool **out) {
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    if (n > 256) n = 256;
    pdb_pool *p = calloc(1, sizeof *p);
    if (!p) return pdb_err_set(PDB_NOMEM, "thread pool");
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
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int pdb_pool_threads(const pdb_pool *p) { return p->n; }

void pdb_pool_run(pdb_pool *p, int64_t n_tasks, pdb_pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    p->active = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    pool_work(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
