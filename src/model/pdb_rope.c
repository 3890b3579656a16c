/* pdb_rope: default and YaRN inverse frequencies and the interleaved-pair rotation.
 * Invariant: pdb_rope_apply is a pure function of (table, x, pos): prefill, decode, the capture
 * hook and the decoder all call it, so their rotated values agree bit for bit. */
#include "pdb_rope.h"

#include <math.h>
#include <stdlib.h>

static double yarn_get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

static double correction_dim(double rot, int64_t dim, double base, double max_pos) {
    return ((double)dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

pdb_status pdb_rope_init(pdb_rope *r, const pdb_rope_params *p, int64_t dim) {
    PDB_ASSERT(dim > 0 && dim % 2 == 0, "rope dim must be even");
    r->dim = dim;
    r->inv_freq = malloc(sizeof(float) * (size_t)(dim / 2));
    if (!r->inv_freq) return pdb_err_set(PDB_NOMEM, "rope table");
    r->attn_factor = 1.0f;
    for (int64_t i = 0; i < dim / 2; i++) {
        float pos_freq = (float)pow(p->theta, (double)(float)(2 * i) / (double)dim);
        r->inv_freq[i] = 1.0f / pos_freq;
    }
    if (p->type != PDB_ROPE_YARN) return PDB_OK;

    double factor = p->factor;
    double af = p->attention_factor;
    if (af < 0) {
        if (p->mscale != 0 && p->mscale_all_dim != 0)
            af = yarn_get_mscale(factor, p->mscale) / yarn_get_mscale(factor, p->mscale_all_dim);
        else
            af = yarn_get_mscale(factor, 1.0);
    }
    r->attn_factor = (float)af;
    double low = correction_dim(p->beta_fast, dim, p->theta, (double)p->original_max_pos);
    double high = correction_dim(p->beta_slow, dim, p->theta, (double)p->original_max_pos);
    if (p->truncate) { low = floor(low); high = ceil(high); }
    if (low < 0) low = 0;
    if (high > dim - 1) high = (double)(dim - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < dim / 2; i++) {
        float pos_freq = (float)pow(p->theta, (double)(float)(2 * i) / (double)dim);
        float extra = 1.0f / pos_freq;
        float inter = 1.0f / ((float)factor * pos_freq);
        float ramp = (float)(((float)i - (float)low) / (float)(high - low));
        if (ramp < 0) ramp = 0;
        if (ramp > 1) ramp = 1;
        float extra_factor = 1.0f - ramp;
        r->inv_freq[i] = inter * (1.0f - extra_factor) + extra * extra_factor;
    }
    return PDB_OK;
}

void pdb_rope_free(pdb_rope *r) {
    free(r->inv_freq);
    r->inv_freq = NULL;
}

/* The rotation of one pair by (c, s): the one formula every rope path uses. */
static inline void rope_rotate(float *x, float c, float s) {
    float a = x[0], b = x[1];
    x[0] = a * c - b * s;
    x[1] = a * s + b * c;
}

void pdb_rope_apply(const pdb_rope *r, float *x, int64_t pos) {
    for (int64_t i = 0; i < r->dim / 2; i++) {
        float ang = r->inv_freq[i] * (float)pos;
        rope_rotate(x + 2 * i, cosf(ang) * r->attn_factor, sinf(ang) * r->attn_factor);
    }
}

void pdb_rope_angles(const pdb_rope *r, int64_t pos, float *cs) {
    for (int64_t i = 0; i < r->dim / 2; i++) {
        float ang = r->inv_freq[i] * (float)pos;
        cs[2 * i] = cosf(ang) * r->attn_factor;
        cs[2 * i + 1] = sinf(ang) * r->attn_factor;
    }
}

void pdb_rope_apply_cs(const pdb_rope *r, const float *cs, float *x) {
    for (int64_t i = 0; i < r->dim / 2; i++) rope_rotate(x + 2 * i, cs[2 * i], cs[2 * i + 1]);
}
