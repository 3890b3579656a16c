/* pdb_rope: rotary position embedding tables (default and YaRN) and their application on
 * interleaved pairs (x[2i], x[2i+1]), the one implementation every CPU component shares.
 * Invariant: inv_freq and the attention factor are computed exactly as transformers 5.17's
 * _compute_yarn_parameters / default rope (f32 results), angles are f32(inv_freq * pos). */
#ifndef PDB_ROPE_H
#define PDB_ROPE_H

#include <stdint.h>

#include "pdb_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdb_rope {
    int64_t dim;       /* rotary dims (even) */
    float *inv_freq;   /* [dim/2] */
    float attn_factor; /* multiplies cos and sin */
} pdb_rope;

pdb_status pdb_rope_init(pdb_rope *r, const pdb_rope_params *p, int64_t dim);
void pdb_rope_free(pdb_rope *r);
/* Rotate one vector x [dim] in place for position pos. */
void pdb_rope_apply(const pdb_rope *r, float *x, int64_t pos);
/* The factors pdb_rope_apply uses at position pos, cs [dim]: (cos, sin) per pair, attention factor
 * included; pdb_rope_apply_cs(r, cs, x) then rotates x exactly as pdb_rope_apply(r, x, pos) does
 * (one position's factors serve every head and the cache row: no trigonometry per vector). */
void pdb_rope_angles(const pdb_rope *r, int64_t pos, float *cs);
void pdb_rope_apply_cs(const pdb_rope *r, const float *cs, float *x);

#ifdef __cplusplus
}
#endif

#endif
