/* pdb_sample: token sampling from logits: greedy (temperature 0), temperature, top_k, top_p,
 * seeded. Invariant: a pure function of (logits, params, rng state): the same seed gives the
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

#endif
