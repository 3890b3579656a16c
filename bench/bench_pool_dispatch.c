/* bench_pool_dispatch: what one pdb_pool_run costs beyond its work, per thread count: empty runs
 * (threads tasks doing nothing) back to back, and runs separated by a short serial gap (the
 * shape of a decode step: ~100 parallel-fors with small serial work between them).
 * Usage: bench_pool_dispatch [max_threads] [runs] (defaults: online CPUs, 20000). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pdb_pool.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nothing(void *ctx, int64_t task, int thread) { (void)ctx, (void)task, (void)thread; }

static volatile double sink;

static void serial_gap(int n) { /* ~n * 1 ns of serial work, like an rmsnorm or a routing step */
    double s = 0;
    for (int i = 0; i < n; i++) s += i * 0.5;
    sink = s;
}

int main(int argc, char **argv) {
    int maxt = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN), runs = argc > 2 ? atoi(argv[2]) : 20000;
    printf("%8s %16s %22s\n", "threads", "empty run us", "run after 2us gap us");
    for (int t = 1; t <= maxt; t = t < 4 ? t + 1 : t * 2) {
        pdb_pool *pool;
        if (pdb_pool_create(t, &pool)) return 1;
        for (int i = 0; i < 1000; i++) pdb_pool_run(pool, t, nothing, NULL); /* warm */
        double best_empty = 1e9, best_gap = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now_s();
            for (int i = 0; i < runs; i++) pdb_pool_run(pool, t, nothing, NULL);
            double e = (now_s() - t0) / runs;
            double gap_only = 1e9;
            t0 = now_s();
            for (int i = 0; i < runs / 4; i++) serial_gap(2000);
            gap_only = (now_s() - t0) / (runs / 4);
            t0 = now_s();
            for (int i = 0; i < runs / 4; i++) {
                serial_gap(2000);
                pdb_pool_run(pool, t, nothing, NULL);
            }
            double g = (now_s() - t0) / (runs / 4) - gap_only;
            if (e < best_empty) best_empty = e;
            if (g < best_gap) best_gap = g;
        }
        printf("%8d %16.2f %22.2f\n", t, best_empty * 1e6, best_gap * 1e6);
        pdb_pool_destroy(pool);
        if (t >= maxt) break;
    }
    return 0;
}
