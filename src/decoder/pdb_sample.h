/* pdb_sample: token sampling from logits: greedy (temperature 0), temperature, top_k, top_p,
 * seeded; log-probabilities and penalties. Invariant: a pure function of (logits, params, rng state): the same seed gives the
 * same tokens whatever else the server is doing; greedy picks the lowest index among ties. */
#ifndef PDB_SAMPLE_H
#define PDB_SAMPLE_H

#include <stdint.h>

typedef struct pdb_sample_params {
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int32_t top_k;     /* 0 = off */
    uint64_t seed;
} pdb_sample_params;

typedef struct pdb_sample_rng { uint64_t s[2]; } pdb_sample_rng;

void pdb_sample_rng_init(pdb_sample_rng *r, uint64_t seed);
/* logits [n_vocab] may be modified (scratch). */
int32_t pdb_sample_next_token(float *logits, int64_t n_vocab, const pdb_sample_params *p, pdb_sample_rng *r);

/* Log-probabilities from raw logits [n_vocab] (not modified): log-softmax in double, the max and
 * the sum of exp(l - max) taken in index order (one fixed order: equal logits give equal
 * numbers on any machine), NaN read as -inf. *lp_tok: token tok's; top_ids/top_lp [n_top]: the
 * n_top likeliest tokens, descending, ties by lowest id (n_top <= n_vocab). */
void pdb_sample_logprobs(const float *logits, int64_t n_vocab, int32_t tok, int n_top, double *lp_tok, int32_t *top_ids,
                         double *top_lp);
/* OpenAI's penalties over the tokens generated so far (gen [n_gen]): each token id that occurs c
 * times loses c * frequency + presence from its logit. */
void pdb_sample_apply_penalties(float *logits, int64_t n_vocab, const int32_t *gen, int64_t n_gen, float frequency, float presence);

#endif
