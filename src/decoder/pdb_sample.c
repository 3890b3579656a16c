/* pdb_sample: greedy / temperature / top_k / top_p sampling with a seeded xoroshiro128**
 * generator. Invariants: the result depends only on (logits, params, rng state); candidate
 * orderings break ties by lowest index so that equal logits never depend on sort stability;
 * greedy (temperature <= 0) consumes no randomness; at most one rng draw per sampled token. */
#include "pdb_sample.h"

#include "pdb_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t pdb_sample_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void pdb_sample_rng_init(pdb_sample_rng *r, uint64_t seed) {
    uint64_t x = seed;
    r->s[0] = pdb_sample_splitmix(&x);
    r->s[1] = pdb_sample_splitmix(&x);
    if (!r->s[0] && !r->s[1]) r->s[1] = 1; /* the all-zero state is a fixed point */
}

static inline uint64_t pdb_sample_rotl(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }

/* xoroshiro128** */
static uint64_t pdb_sample_next_u64(pdb_sample_rng *r) {
    uint64_t s0 = r->s[0], s1 = r->s[1];
    uint64_t out = pdb_sample_rotl(s0 * 5, 7) * 9;
    s1 ^= s0;
    r->s[0] = pdb_sample_rotl(s0, 24) ^ s1 ^ (s1 << 16);
    r->s[1] = pdb_sample_rotl(s1, 37);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static double pdb_sample_next_unit(pdb_sample_rng *r) { return (double)(pdb_sample_next_u64(r) >> 11) * 0x1.0p-53; }

static int32_t pdb_sample_argmax(const float *logits, int64_t n) { return (int32_t)pdb_math_argmax(logits, n); }

typedef struct pdb_sample_cand { float v; int32_t id; } pdb_sample_cand;

/* Descending value, then ascending id. */
static int pdb_sample_cmp_cand(const void *a, const void *b) {
    const pdb_sample_cand *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* "a ranks below b" in the candidate order. */
static inline int pdb_sample_below(const pdb_sample_cand *a, const pdb_sample_cand *b) {
    return a->v < b->v || (a->v == b->v && a->id > b->id);
}

/* Min-heap (by rank) of the best k candidates: O(n log k). */
static void pdb_sample_heap_down(pdb_sample_cand *h, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && pdb_sample_below(&h[l], &h[m])) m = l;
        if (r < k && pdb_sample_below(&h[r], &h[m])) m = r;
        if (m == i) return;
        pdb_sample_cand t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

static int64_t pdb_sample_top_k(const float *logits, int64_t n, int64_t k, pdb_sample_cand *h) {
    for (int64_t i = 0; i < k; i++) h[i] = (pdb_sample_cand){logits[i], (int32_t)i};
    for (int64_t i = k / 2 - 1; i >= 0; i--) pdb_sample_heap_down(h, k, i);
    for (int64_t i = k; i < n; i++) {
        pdb_sample_cand c = {logits[i], (int32_t)i};
        if (pdb_sample_below(&h[0], &c)) { h[0] = c; pdb_sample_heap_down(h, k, 0); }
    }
    qsort(h, (size_t)k, sizeof *h, pdb_sample_cmp_cand);
    return k;
}

int32_t pdb_sample_next_token(float *logits, int64_t n_vocab, const pdb_sample_params *p, pdb_sample_rng *r) {
    if (n_vocab <= 0) return -1;
    for (int64_t i = 0; i < n_vocab; i++)
        if (isnan(logits[i])) logits[i] = -INFINITY;
    if (!(p->temperature > 0.0f)) return pdb_sample_argmax(logits, n_vocab);

    int64_t k = (p->top_k > 0 && p->top_k < n_vocab) ? p->top_k : 0;
    float top_p = (p->top_p > 0.0f && p->top_p < 1.0f) ? p->top_p : 1.0f;
    int32_t best = pdb_sample_argmax(logits, n_vocab);
    float mx = logits[best];
    if (!isfinite(mx)) return best;
    double inv_t = 1.0 / (double)p->temperature;

    if (!k && top_p >= 1.0f) { /* plain temperature: one pass in index order, no allocation */
        double sum = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            double e = exp(((double)logits[i] - mx) * inv_t);
            logits[i] = (float)e;
            sum += logits[i];
        }
        double u = pdb_sample_next_unit(r) * sum, acc = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            acc += logits[i];
            if (u < acc) return (int32_t)i;
        }
        return best;
    }

    int64_t n_cand = k ? k : n_vocab;
    pdb_sample_cand *c = malloc((size_t)n_cand * sizeof *c);
    if (!c) return best; /* out of memory: fall back to the most likely token */
    if (k) {
        pdb_sample_top_k(logits, n_vocab, k, c);
        double sum = 0;
        for (int64_t i = 0; i < k; i++) { c[i].v = (float)exp(((double)c[i].v - mx) * inv_t); sum += c[i].v; }
        for (int64_t i = 0; i < k; i++) c[i].v = (float)(c[i].v / sum);
    } else {
        /* Probabilities over the whole vocabulary; only tokens with p > (1 - top_p) / n can be
         * in the nucleus (the last member of the nucleus outweighs the average of the rest), so
         * only those are sorted. */
        double sum = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            logits[i] = (float)exp(((double)logits[i] - mx) * inv_t);
            sum += logits[i];
        }
        double cut = (1.0 - top_p) / (double)n_vocab * 0.5; /* halved: margin for float rounding */
        n_cand = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            float pr = (float)(logits[i] / sum);
            if (pr > cut) c[n_cand++] = (pdb_sample_cand){pr, (int32_t)i};
        }
        qsort(c, (size_t)n_cand, sizeof *c, pdb_sample_cmp_cand);
    }
    int64_t keep = n_cand;
    if (top_p < 1.0f) {
        double acc = 0;
        for (int64_t i = 0; i < n_cand; i++) {
            acc += c[i].v;
            if (acc >= top_p) { keep = i + 1; break; }
        }
    }
    double mass = 0;
    for (int64_t i = 0; i < keep; i++) mass += c[i].v;
    double u = pdb_sample_next_unit(r) * mass, acc = 0;
    int32_t out = c[keep - 1].id;
    for (int64_t i = 0; i < keep; i++) {
        acc += c[i].v;
        if (u < acc) { out = c[i].id; break; }
    }
    free(c);
    return out;
}

void pdb_sample_logprobs(const float *logits, int64_t n_vocab, int32_t tok, int n_top, double *lp_tok, int32_t *top_ids,
                         double *top_lp) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n_vocab; i++)
        if (!isnan(logits[i]) && logits[i] > mx) mx = logits[i];
    double sum = 0;
    if (isfinite(mx))
        for (int64_t i = 0; i < n_vocab; i++)
            if (!isnan(logits[i])) sum += exp((double)logits[i] - mx);
    double lse = isfinite(mx) ? mx + log(sum) : 0;
#define PDB_SAMPLE_LP(v) (isnan(v) || !isfinite(mx) ? -INFINITY : (double)(v) - lse)
    *lp_tok = tok >= 0 && tok < n_vocab ? PDB_SAMPLE_LP(logits[tok]) : -INFINITY;
    if (n_top <= 0) return;
    if (n_top > n_vocab) n_top = (int)n_vocab;
    pdb_sample_cand h[64], *c = n_top <= 64 ? h : malloc(sizeof *c * (size_t)n_top);
    if (!c) { for (int k = 0; k < n_top; k++) { top_ids[k] = -1; top_lp[k] = -INFINITY; } return; }
    pdb_sample_top_k(logits, n_vocab, n_top, c);
    for (int k = 0; k < n_top; k++) {
        top_ids[k] = c[k].id;
        top_lp[k] = PDB_SAMPLE_LP(c[k].v);
    }
#undef PDB_SAMPLE_LP
    if (c != h) free(c);
}

static int pdb_sample_cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void pdb_sample_apply_penalties(float *logits, int64_t n_vocab, const int32_t *gen, int64_t n_gen, float frequency, float presence) {
    if (n_gen <= 0 || (frequency == 0.0f && presence == 0.0f)) return;
    int32_t *s = malloc(sizeof *s * (size_t)n_gen);
    if (!s) return;
    memcpy(s, gen, sizeof *s * (size_t)n_gen);
    qsort(s, (size_t)n_gen, sizeof *s, pdb_sample_cmp_i32);
    for (int64_t i = 0; i < n_gen;) {
        int64_t j = i;
        while (j < n_gen && s[j] == s[i]) j++;
        if (s[i] >= 0 && s[i] < n_vocab) logits[s[i]] -= frequency * (float)(j - i) + presence;
        i = j;
    }
    free(s);
}
