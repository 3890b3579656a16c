/* bench_tool_mask: what choosing a forced call's name costs per decode step: pdb_tool_mask_apply
 * in its name part (the tokens whose bytes extend the text toward NAME "\n```json\n" for one of
 * the tools' names) over a real tokenizer's vocabulary, along random walks that choose uniformly
 * among the allowed tokens until the name and fence are written, for 2, 16 and 128 tools (names
 * "get_weather_k", which share long prefixes: the worst case for the candidate check). Each
 * step is timed three times and the least kept (the box may be shared). The arguments part is
 * pdb_json_mask, measured by bench_json_mask. Prints per tool count the mean and p50/p99
 * microseconds per name step, the mean steps per name and the mean allowed tokens.
 * Usage: bench_tool_mask TOKENIZER_JSON [walks (200)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_clock.h"
#include "pdb_tool_mask.h"
#include "pdb_tokenizer.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: bench_tool_mask TOKENIZER_JSON [walks (200)]\n");
        return argc < 2;
    }
    int n_walks = argc > 2 ? atoi(argv[2]) : 200;
    pdb_tokenizer *tok;
    if (pdb_tokenizer_load(argv[1], &tok)) { fprintf(stderr, "%s\n", pdb_err_msg()); return 1; }
    int64_t V = pdb_tokenizer_vocab_size(tok);
    pdb_json_vocab *v;
    if (pdb_json_vocab_from_tokenizer(tok, V, &v)) { fprintf(stderr, "%s\n", pdb_err_msg()); return 1; }
    float *logits = malloc(sizeof(float) * (size_t)V);
    const int counts[3] = {2, 16, 128};
    for (int c = 0; c < 3; c++) {
        char names_buf[128][32];
        const char *names[128];
        for (int k = 0; k < counts[c]; k++) {
            snprintf(names_buf[k], sizeof names_buf[k], "get_weather_%d", k);
            names[k] = names_buf[k];
        }
        pdb_tool_mask *m;
        if (pdb_tool_mask_new(v, names, (size_t)counts[c], &m)) { fprintf(stderr, "%s\n", pdb_err_msg()); return 1; }
        size_t cap = (size_t)n_walks * PDB_TOOL_MASK_MAX_HEAD;
        double *us = malloc(sizeof(double) * cap), allowed_sum = 0;
        size_t n_steps = 0;
        uint64_t x = 88172645463325252ull;
        for (int w = 0; w < n_walks; w++) {
            pdb_tool_mask_state st;
            pdb_tool_mask_state_init(m, &st);
            while (!st.args && n_steps < cap) {
                int64_t allowed = 0;
                double best = INFINITY;
                for (int rep = 0; rep < 3; rep++) {
                    for (int64_t k = 0; k < V; k++) logits[k] = 0;
                    double t0 = pdb_clock_now();
                    allowed = pdb_tool_mask_apply(m, &st, logits, V, 200);
                    double t = (pdb_clock_now() - t0) * 1e6;
                    if (t < best) best = t;
                }
                us[n_steps++] = best;
                allowed_sum += (double)allowed;
                if (!allowed) { fprintf(stderr, "no token allowed in the name part\n"); return 1; }
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                int64_t pick = (int64_t)(x % (uint64_t)allowed);
                for (int64_t k = 0; k < V; k++)
                    if (logits[k] == 0 && pick-- == 0) {
                        if (!pdb_tool_mask_advance(m, &st, (int32_t)k)) { fprintf(stderr, "an allowed token did not advance\n"); return 1; }
                        break;
                    }
            }
        }
        double mean = 0;
        for (size_t i = 0; i < n_steps; i++) mean += us[i];
        mean /= (double)n_steps;
        qsort(us, n_steps, sizeof *us, cmp_d);
        printf("%3d tools: %zu name steps over %d walks (%.1f steps a name): mean %.0f us/step, p50 %.0f, p99 %.0f; "
               "mean allowed tokens %.1f\n", counts[c], n_steps, n_walks, (double)n_steps / n_walks, mean, us[n_steps / 2],
               us[n_steps * 99 / 100], allowed_sum / (double)n_steps);
        free(us);
        pdb_tool_mask_free(m);
    }
    free(logits);
    pdb_json_vocab_free(v);
    pdb_tokenizer_free(tok);
    return 0;
}
