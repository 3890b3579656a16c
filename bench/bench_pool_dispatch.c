/* bench_pool_dispatch: what one pdb_pool_run costs beyond its work, per thread count: runs of
 * `threads` empty tasks back to back (best of 5 rounds). A decode step of the 16-layer bench
 * model makes 176 runs (bench_decode prints the matmul ones); multiply to get the per-token
 * dispatch cost.
 * Usage: bench_pool_dispatch [max_threads] [runs] (defaults: online CPUs, 20000). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_pool.h"

static void nothing(void *ctx, int64_t task, int thread) { (void)ctx, (void)task, (void)thread; }

int main(int argc, char **argv) {
    int maxt = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN), runs = argc > 2 ? atoi(argv[2]) : 20000;
    printf("%8s %16s\n", "threads", "empty run us");
    for (int t = 1; t <= maxt; t = t < 4 ? t + 1 : t * 2) {
        pdb_pool *pool;
        if (pdb_pool_create(t, &pool)) return 1;
        for (int i = 0; i < 1000; i++) pdb_pool_run(pool, t, nothing, NULL); /* warm */
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = pdb_clock_now();
            for (int i = 0; i < runs; i++) pdb_pool_run(pool, t, nothing, NULL);
            double e = (pdb_clock_now() - t0) / runs;
            if (e < best) best = e;
        }
        printf("%8d %16.2f\n", t, best * 1e6);
        pdb_pool_destroy(pool);
        if (t >= maxt) break;
    }
    return 0;
}
