/* bench_json_mask: what JSON mode costs per decode step: pdb_json_mask_apply over a real
 * tokenizer's vocabulary (every token's bytes tried against the recognizer state, the first-byte
 * filter first) along random walks that choose uniformly among the allowed tokens, as a sampler
 * with flat logits would. Each step is timed three times and the least kept (the box may be
 * shared). Prints the mean and p50/p99 microseconds per step and the mean number of allowed
 * tokens (the same for any correct version: a check that two versions decide alike).
 * Usage: bench_json_mask TOKENIZER_JSON [steps] [budget] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_clock.h"
#include "pdb_json_mask.h"
#include "pdb_tokenizer.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: bench_json_mask TOKENIZER_JSON [steps (2000)] [budget per walk (64)]\n");
        return argc < 2;
    }
    int steps = argc > 2 ? atoi(argv[2]) : 2000, budget = argc > 3 ? atoi(argv[3]) : 64;
    pdb_tokenizer *tok;
    if (pdb_tokenizer_load(argv[1], &tok)) { fprintf(stderr, "%s\n", pdb_err_msg()); return 1; }
    int64_t V = pdb_tokenizer_vocab_size(tok);
    pdb_json_vocab *v;
    if (pdb_json_vocab_from_tokenizer(tok, V, &v)) { fprintf(stderr, "%s\n", pdb_err_msg()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)V);
    double *us = malloc(sizeof(double) * (size_t)steps), allowed_sum = 0;
    uint64_t x = 88172645463325252ull;
    pdb_json_state st;
    pdb_json_state_init(&st);
    int left = budget, walks = 1;
    for (int i = 0; i < steps; i++) {
        int64_t allowed = 0;
        us[i] = INFINITY;
        for (int rep = 0; rep < 3; rep++) { /* the least of three: a step's cost without the preemptions of a shared box */
            for (int64_t k = 0; k < V; k++) logits[k] = 0;
            double t0 = pdb_clock_now();
            allowed = pdb_json_mask_apply(v, &st, logits, V, left - 1);
            double t = (pdb_clock_now() - t0) * 1e6;
            if (t < us[i]) us[i] = t;
        }
        allowed_sum += (double)allowed;
        if (!allowed) { pdb_json_state_init(&st); left = budget; walks++; continue; }
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t pick = (int64_t)(x % (uint64_t)allowed);
        for (int64_t k = 0; k < V; k++)
            if (logits[k] == 0 && pick-- == 0) { pdb_json_mask_advance(v, &st, (int32_t)k); break; }
        left--;
    }
    double mean = 0;
    for (int i = 0; i < steps; i++) mean += us[i];
    mean /= steps;
    qsort(us, (size_t)steps, sizeof *us, cmp_d);
    printf("vocabulary %lld tokens, %d steps over %d walks (budget %d tokens each): mean %.0f us/step, p50 %.0f, p99 %.0f; "
           "mean allowed tokens %.0f\n", (long long)V, steps, walks, budget, mean, us[steps / 2], us[steps * 99 / 100],
           allowed_sum / steps);
    free(us);
    free(logits);
    pdb_json_vocab_free(v);
    pdb_tokenizer_free(tok);
    return 0;
}
