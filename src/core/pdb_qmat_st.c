/* pdb_qmat_st: checkpoint tensors as pdb_qmat views (see the header for the formats and the
 * invariant that every element equals pdb_st_load_f32's value). */
#include "pdb_qmat_st.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_dtype.h"

static int ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int pdb_qmat_st_fp8_scales(const pdb_st *st, const pdb_tensor_view *v, uint8_t **out) {
    *out = NULL;
    if (v->dtype != PDB_DT_F8_E4M3 || v->ndim != 2 || v->shape[1] % 32) return 0;
    int64_t R = v->shape[0], C = v->shape[1], rb = (R + 127) / 128, cb = (C + 127) / 128;
    size_t n = strlen(v->name);
    char *nm = malloc(n + 16);
    if (!nm) return 0;
    snprintf(nm, n + 16, "%s_scale_inv", v->name);
    const pdb_tensor_view *s = pdb_st_find(st, nm);
    if (!s && ends(v->name, ".weight")) {
        snprintf(nm, n + 16, "%.*s.scale", (int)(n - 7), v->name);
        s = pdb_st_find(st, nm);
    }
    if (!s) {
        snprintf(nm, n + 16, "%s.scale", v->name);
        s = pdb_st_find(st, nm);
    }
    free(nm);
    if (!s || s->ndim != 2 || s->shape[0] != rb || s->shape[1] != cb) return 0;
    uint8_t *bs = malloc((size_t)(rb * cb)), *sc = malloc((size_t)(R * C / 32 > 0 ? R * C / 32 : 1));
    float *f = malloc(sizeof(float) * (size_t)(rb * cb));
    int ok = bs && sc && f;
    if (ok && s->dtype == PDB_DT_F8_E8M0) memcpy(bs, s->data, (size_t)(rb * cb));
    else if (ok && (s->dtype == PDB_DT_F32 || s->dtype == PDB_DT_BF16) && !pdb_dtype_to_f32(s->dtype, s->data, rb * cb, f))
        for (int64_t i = 0; ok && i < rb * cb; i++) { /* a power of two exactly, inside e8m0's range */
            bs[i] = pdb_f32_to_e8m0(f[i]);
            ok = bs[i] != 0xFF && pdb_e8m0_to_f32(bs[i]) == f[i];
        }
    else ok = 0;
    for (int64_t r = 0; ok && r < R; r++)
        for (int64_t g = 0; g < C / 32; g++) sc[r * (C / 32) + g] = bs[(r / 128) * cb + g * 32 / 128];
    free(bs);
    free(f);
    if (!ok) { free(sc); return 0; }
    *out = sc;
    return 1;
}

int64_t pdb_qmat_st_bytes(const pdb_qmat *q) {
    int64_t n = q->rows * q->cols;
    switch (q->fmt) {
    case PDB_QF_F32: return 4 * n;
    case PDB_QF_BF16: return 2 * n;
    case PDB_QF_MXFP8: return n + n / 32;
    case PDB_QF_MXFP4: return n / 2 + n / 32;
    }
    return 0;
}

pdb_status pdb_qmat_st_load(const pdb_st *st, const char *name, int nd, const int64_t *shape, pdb_ptrs *owned,
                            pdb_qmat *q, int64_t *bytes) {
    PDB_ASSERT(nd >= 1 && nd <= 3, "pdb_qmat_st_load: 1 to 3 dims");
    memset(q, 0, sizeof *q);
    q->cols = shape[nd - 1];
    q->rows = 1;
    for (int i = 0; i < nd - 1; i++) q->rows *= shape[i];
    if (bytes) *bytes = 0;
    const pdb_tensor_view *v = pdb_st_find(st, name), *mq = NULL, *sc = NULL;
    if (!v) {
        const pdb_tensor_view *any = pdb_st_count(st) ? pdb_st_at(st, 0) : NULL;
        return pdb_err_set(PDB_NOT_FOUND, "%s: tensor '%s' is missing", any ? any->file : "checkpoint", name);
    }
    if (nd == 2) {
        int mx4 = 0;
        PDB_TRY(pdb_st_get_mx(st, name, shape[0], shape[1], &mq, &sc, &mx4));
        if (sc) { /* MX as stored (ours, or DeepSeek's FP4 experts) */
            q->fmt = mx4 ? PDB_QF_MXFP4 : PDB_QF_MXFP8;
            q->data = mq->data;
            q->scales = sc->data;
            pdb_qmat_scan_nan(q); /* lets the decode kernel skip the NaN fix-up: same results, less work */
            if (bytes) *bytes = pdb_qmat_st_bytes(q);
            return PDB_OK;
        }
    }
    PDB_TRY(pdb_st_get(st, name, nd, shape, &v));
    uint8_t *rep = NULL;
    if (nd == 2 && pdb_qmat_st_fp8_scales(st, v, &rep)) { /* DeepSeek's block FP8: MXFP8 without loss */
        PDB_TRY(pdb_ptrs_push(owned, rep));
        q->fmt = PDB_QF_MXFP8;
        q->data = v->data;
        q->scales = rep;
        pdb_qmat_scan_nan(q);
        if (bytes) *bytes = pdb_qmat_st_bytes(q);
        return PDB_OK;
    }
    if (v->dtype == PDB_DT_BF16 || (v->dtype == PDB_DT_F32 && !((uintptr_t)v->data & 3))) {
        q->fmt = v->dtype == PDB_DT_BF16 ? PDB_QF_BF16 : PDB_QF_F32;
        q->data = v->data;
        if (bytes) *bytes = pdb_qmat_st_bytes(q);
        return PDB_OK;
    }
    float *f = NULL;
    PDB_TRY(pdb_st_load_f32(st, name, nd, shape, &f));
    PDB_TRY(pdb_ptrs_push(owned, f));
    q->fmt = PDB_QF_F32;
    q->data = f;
    if (bytes) *bytes = pdb_qmat_st_bytes(q);
    return PDB_OK;
}
