/* pdb_logit_hash: the decoder's behaviour in one number, for checking that a refactor changed
 * nothing. Opens a decoder checkpoint (pdb_dec_model), prefills P token ids (id_i = (i * 7919 +
 * 13) mod vocab) in chunks of C, then runs S greedy decode steps, and prints the FNV-1a 64-bit
 * hash over the bytes of every logit vector produced (the prefill's last row, then each step's)
 * and the greedy tokens. Invariant: the hash is a pure function of the weights and the decoder's
 * arithmetic (pdb_dec_model.h's exactness contract), so it is the same for any thread count and
 * any ISA, x86-64 or aarch64 (`--isa scalar|avx2+fma|avx512|neon` forces the kernels' ISA; default
 * the best one). `--per-step` also prints each logit vector's own hash ("step I HASH", step 0 the
 * prefill's last row), so that two runs can be compared step by step.
 * usage: pdb_logit_hash DEC_DIR [--prompt P] [--steps S] [--chunk C] [--threads N] [--isa NAME] [--per-step] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dec_model.h"
#include "pdb_qmat.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        printf("usage: pdb_logit_hash DEC_DIR [--prompt P] [--steps S] [--chunk C] [--threads N] [--isa scalar|avx2+fma|avx512|neon] [--per-step]\n");
        return argc < 2 ? 2 : 0;
    }
    int64_t P = 64, S = 24, C = 64;
    int threads = 2, per_step = 0;
    for (int i = 2; i < argc; i += 2) {
        if (!strcmp(argv[i], "--per-step")) { per_step = 1; i--; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "pdb_logit_hash: %s needs a value\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "--prompt")) P = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) S = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk")) C = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--isa")) {
            int found = 0;
            for (int k = PDB_ISA_SCALAR; k <= PDB_ISA_NEON; k++)
                if (!strcmp(argv[i + 1], pdb_qmat_isa_name((pdb_qmat_isa)k))) {
                    if (!pdb_qmat_isa_supported((pdb_qmat_isa)k)) { fprintf(stderr, "pdb_logit_hash: ISA %s is not supported on this CPU\n", argv[i + 1]); return 2; }
                    pdb_qmat_isa_set((pdb_qmat_isa)k);
                    found = 1;
                }
            if (!found) { fprintf(stderr, "pdb_logit_hash: unknown ISA %s\n", argv[i + 1]); return 2; }
        }
        else { fprintf(stderr, "pdb_logit_hash: unknown option %s\n", argv[i]); return 2; }
    }
    if (P < 1 || S < 0 || C < 1) { fprintf(stderr, "pdb_logit_hash: bad --prompt/--steps/--chunk\n"); return 2; }
    pdb_pool *pool = NULL;
    pdb_dec_model *m = NULL;
    if (pdb_pool_create(threads, &pool) || pdb_dec_model_open(argv[1], pool, &m)) {
        fprintf(stderr, "pdb_logit_hash: %s\n", pdb_err_msg());
        return 1;
    }
    int64_t V = pdb_dec_model_config(m)->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(P + S));
    float *logits = malloc(sizeof(float) * (size_t)V);
    pdb_dec_seq s;
    if (!ids || !logits || pdb_dec_seq_init(&s, m, P + S + 1)) { fprintf(stderr, "pdb_logit_hash: out of memory\n"); return 1; }
    for (int64_t i = 0; i < P; i++) ids[i] = (int32_t)((i * 7919 + 13) % V);
    uint64_t h = 1469598103934665603ull;
    for (int64_t p = 0; p < P; p += C) {
        int64_t n = P - p < C ? P - p : C;
        pdb_dec_seg sg = {&s, ids + p, n, p + n == P ? logits : NULL};
        if (pdb_dec_forward(m, &sg, 1)) { fprintf(stderr, "pdb_logit_hash: %s\n", pdb_err_msg()); return 1; }
    }
    h = fnv(h, logits, sizeof(float) * (size_t)V);
    char *steps = per_step ? malloc((size_t)(S + 1) * 32) : NULL; /* printed after the tokens line */
    size_t sl = 0;
    if (steps) sl += (size_t)sprintf(steps + sl, "step 0 %016llx\n", (unsigned long long)fnv(1469598103934665603ull, logits, sizeof(float) * (size_t)V));
    printf("tokens:");
    for (int64_t t = 0; t < S; t++) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++) if (logits[v] > logits[best]) best = (int32_t)v;
        ids[P + t] = best;
        printf(" %d", best);
        pdb_dec_seg sg = {&s, ids + P + t, 1, logits};
        if (pdb_dec_forward(m, &sg, 1)) { fprintf(stderr, "pdb_logit_hash: %s\n", pdb_err_msg()); return 1; }
        h = fnv(h, logits, sizeof(float) * (size_t)V);
        if (steps) sl += (size_t)sprintf(steps + sl, "step %lld %016llx\n", (long long)t + 1, (unsigned long long)fnv(1469598103934665603ull, logits, sizeof(float) * (size_t)V));
    }
    printf("\n%slogit hash %016llx\n", steps ? steps : "", (unsigned long long)h);
    free(steps);
    pdb_dec_seq_free(&s);
    pdb_dec_model_close(m);
    pdb_pool_destroy(pool);
    free(ids);
    free(logits);
    return 0;
}
