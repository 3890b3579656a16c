/* pdb_block_compare: tensor-by-tensor comparison of block files and value arrays (see the
 * header). Invariants: bytes decide "identical"; ulp distances come from the sign-magnitude
 * bit patterns mapped to a monotonic integer line, so adjacent representable values are 1 apart
 * across zero too (+0 and -0 share the point 0); files are read through the core safetensors
 * reader (every offset validated) and, for strict metadata, the header's JSON is read again
 * with its 8-byte length bounded by the file size. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdb_block_compare.h"
#include "pdb_safetensors.h"

#define CMP_MAX_HEADER (100u << 20) /* the safetensors header limit we accept for metadata */

const char *pdb_block_compare_kind_str(pdb_block_cmp_kind k) {
    switch (k) {
    case PDB_BLOCK_CMP_SAME: return "identical";
    case PDB_BLOCK_CMP_VALUES: return "values differ";
    case PDB_BLOCK_CMP_DTYPE: return "dtype differs";
    case PDB_BLOCK_CMP_SHAPE: return "shape differs";
    case PDB_BLOCK_CMP_ONLY_A: return "only in A";
    case PDB_BLOCK_CMP_ONLY_B: return "only in B";
    }
    return "?";
}

/* ---- one element: its position on the ulp line, its value, whether it is NaN ---------------- */
typedef struct { double key; double val; int nan; } elem;

static uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Sign-magnitude bits of width `bits` -> signed position (magnitude as is, negated for sign). */
static double sm_key(uint64_t v, int bits) {
    uint64_t sign = 1ULL << (bits - 1);
    double mag = (double)(v & (sign - 1));
    return (v & sign) ? -mag : mag;
}

static elem elem_at(pdb_dtype dt, const uint8_t *p) {
    elem e = {0, 0, 0};
    switch (dt) {
    case PDB_DT_F32: {
        uint32_t u = (uint32_t)load_le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        e = (elem){sm_key(u, 32), f, isnan(f)};
        break;
    }
    case PDB_DT_F64: {
        uint64_t u = load_le(p, 8);
        double d;
        memcpy(&d, &u, 8);
        e = (elem){sm_key(u, 64), d, isnan(d)};
        break;
    }
    case PDB_DT_BF16: {
        uint16_t u = (uint16_t)load_le(p, 2);
        float f = pdb_bf16_to_f32(u);
        e = (elem){sm_key(u, 16), f, isnan(f)};
        break;
    }
    case PDB_DT_F16: {
        uint16_t u = (uint16_t)load_le(p, 2);
        float f = pdb_f16_to_f32(u);
        e = (elem){sm_key(u, 16), f, isnan(f)};
        break;
    }
    case PDB_DT_F8_E4M3: {
        float f = pdb_e4m3_to_f32(p[0]);
        e = (elem){sm_key(p[0], 8), f, isnan(f)};
        break;
    }
    case PDB_DT_F8_E8M0: {
        float f = pdb_e8m0_to_f32(p[0]);
        e = (elem){(double)p[0], f, isnan(f)};
        break;
    }
    case PDB_DT_U8: e = (elem){(double)p[0], (double)p[0], 0}; break;
    case PDB_DT_I8: e = (elem){(double)(int8_t)p[0], (double)(int8_t)p[0], 0}; break;
    case PDB_DT_I32: {
        int32_t v = (int32_t)(uint32_t)load_le(p, 4);
        e = (elem){(double)v, (double)v, 0};
        break;
    }
    case PDB_DT_I64: {
        int64_t v = (int64_t)load_le(p, 8);
        e = (elem){(double)v, (double)v, 0};
        break;
    }
    default: break;
    }
    return e;
}

pdb_status pdb_block_compare_values(pdb_dtype dt, const void *a, const void *b, int64_t n, pdb_block_cmp_stats *st) {
    PDB_ASSERT(st && (n == 0 || (a && b)) && n >= 0, "pdb_block_compare_values: bad arguments");
    if ((int)dt < 0 || dt >= PDB_DT_COUNT) return pdb_err_set(PDB_UNSUPPORTED, "compare: dtype %d has no ulp", (int)dt);
    size_t es = pdb_dtype_size(dt);
    const uint8_t *pa = a, *pb = b;
    st->n += n;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *xa = pa + (size_t)i * es, *xb = pb + (size_t)i * es;
        if (!memcmp(xa, xb, es)) continue;
        st->n_diff++;
        elem ea = elem_at(dt, xa), eb = elem_at(dt, xb);
        double ulps, abs_d, rel;
        if (ea.nan || eb.nan) {
            ulps = INFINITY;
            abs_d = INFINITY;
            rel = INFINITY;
        } else {
            ulps = fabs(ea.key - eb.key);
            abs_d = fabs(ea.val - eb.val);
            double m = fmax(fabs(ea.val), fabs(eb.val));
            rel = m > 0 ? abs_d / m : 0;
            if (isnan(abs_d)) abs_d = INFINITY; /* inf - inf of equal sign cannot differ in bytes: defensive */
        }
        if (dt == PDB_DT_F32 && ulps > 65536.0) st->n_beyond_bf16++;
        if (ulps > st->worst_ulps) st->worst_ulps = ulps;
        if (abs_d > st->worst_abs) st->worst_abs = abs_d;
        if (rel > st->worst_rel) st->worst_rel = rel;
    }
    if (dt == PDB_DT_F32) st->worst_bf16_ulps = st->worst_ulps / 65536.0;
    return PDB_OK;
}

void pdb_block_compare_merge_stats(pdb_block_cmp_stats *dst, const pdb_block_cmp_stats *src) {
    dst->n += src->n;
    dst->n_diff += src->n_diff;
    dst->n_beyond_bf16 += src->n_beyond_bf16;
    dst->worst_ulps = fmax(dst->worst_ulps, src->worst_ulps);
    dst->worst_bf16_ulps = fmax(dst->worst_bf16_ulps, src->worst_bf16_ulps);
    dst->worst_abs = fmax(dst->worst_abs, src->worst_abs);
    dst->worst_rel = fmax(dst->worst_rel, src->worst_rel);
}

/* ---- metadata (strict mode) ---------------------------------------------------------------- */
static pdb_status read_metadata(const char *path, json_t **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pdb_err_set(errno == ENOENT ? PDB_NOT_FOUND : PDB_IO, "%s: %s", path, strerror(errno));
    uint8_t lenb[8];
    struct stat sb;
    pdb_status s = PDB_OK;
    char *hdr = NULL;
    if (fstat(fileno(f), &sb) || fread(lenb, 1, 8, f) != 8) {
        s = pdb_err_set(PDB_CORRUPT, "%s: too short for a safetensors header", path);
    } else {
        uint64_t n = load_le(lenb, 8);
        if (n > CMP_MAX_HEADER || n > (uint64_t)sb.st_size - 8) {
            s = pdb_err_set(PDB_CORRUPT, "%s: header length %llu exceeds the file", path, (unsigned long long)n);
        } else if (!(hdr = malloc(n ? n : 1))) {
            s = pdb_err_set(PDB_NOMEM, "%s: header", path);
        } else if (fread(hdr, 1, n, f) != n) {
            s = pdb_err_set(PDB_IO, "%s: reading the header", path);
        } else {
            json_error_t je;
            json_t *root = json_loadb(hdr, n, 0, &je);
            json_t *meta = root ? json_object_get(root, "__metadata__") : NULL;
            if (!root) s = pdb_err_set(PDB_CORRUPT, "%s: header JSON: %s", path, je.text);
            else *out = meta && json_is_object(meta) ? json_incref(meta) : json_object();
            json_decref(root);
        }
    }
    free(hdr);
    fclose(f);
    return s;
}

static void note_meta_diff(pdb_block_cmp_report *r, const char *key) {
    if (!r->n_meta_diff++) snprintf(r->first_meta_diff, sizeof r->first_meta_diff, "%s", key);
}

static pdb_status compare_metadata(const char *pa, const char *pb, pdb_block_cmp_report *r) {
    json_t *ma, *mb;
    PDB_TRY(read_metadata(pa, &ma));
    pdb_status s = read_metadata(pb, &mb);
    if (s) { json_decref(ma); return s; }
    const char *k;
    json_t *v;
    json_object_foreach(ma, k, v) {
        json_t *w = json_object_get(mb, k);
        if (!w || !json_equal(v, w)) note_meta_diff(r, k);
    }
    json_object_foreach(mb, k, v)
        if (!json_object_get(ma, k)) note_meta_diff(r, k);
    json_decref(ma);
    json_decref(mb);
    return PDB_OK;
}

/* ---- files ---------------------------------------------------------------------------------- */
static int same_shape(const pdb_tensor_view *a, const pdb_tensor_view *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

pdb_status pdb_block_compare_files(const char *path_a, const char *path_b, int strict_meta, pdb_block_cmp_report *out) {
    PDB_ASSERT(path_a && path_b && out, "pdb_block_compare_files: NULL argument");
    memset(out, 0, sizeof *out);
    pdb_st *sa = NULL, *sb = NULL;
    pdb_status s = pdb_st_open(path_a, &sa);
    if (!s) s = pdb_st_open(path_b, &sb);
    if (s) goto done;
    int64_t na = pdb_st_count(sa), nb = pdb_st_count(sb);
    out->tensors = calloc((size_t)(na + nb) + 1, sizeof *out->tensors);
    if (!out->tensors) { s = pdb_err_set(PDB_NOMEM, "compare %s %s", path_a, path_b); goto done; }
    for (int64_t i = 0; i < na; i++) {
        const pdb_tensor_view *ta = pdb_st_at(sa, i), *tb = pdb_st_find(sb, ta->name);
        pdb_block_cmp_tensor *t = &out->tensors[out->n_tensors++];
        snprintf(t->name, sizeof t->name, "%s", ta->name);
        t->dtype_a = ta->dtype;
        t->dtype_b = tb ? tb->dtype : ta->dtype;
        if (!tb) t->kind = PDB_BLOCK_CMP_ONLY_A;
        else if (ta->dtype != tb->dtype) t->kind = PDB_BLOCK_CMP_DTYPE;
        else if (!same_shape(ta, tb)) t->kind = PDB_BLOCK_CMP_SHAPE;
        else {
            if ((s = pdb_block_compare_values(ta->dtype, ta->data, tb->data, ta->numel, &t->stats))) goto done;
            t->kind = t->stats.n_diff ? PDB_BLOCK_CMP_VALUES : PDB_BLOCK_CMP_SAME;
            pdb_block_compare_merge_stats(&out->total, &t->stats);
        }
    }
    for (int64_t i = 0; i < nb; i++) {
        const pdb_tensor_view *tb = pdb_st_at(sb, i);
        if (pdb_st_find(sa, tb->name)) continue;
        pdb_block_cmp_tensor *t = &out->tensors[out->n_tensors++];
        snprintf(t->name, sizeof t->name, "%s", tb->name);
        t->dtype_a = t->dtype_b = tb->dtype;
        t->kind = PDB_BLOCK_CMP_ONLY_B;
    }
    if (strict_meta && (s = compare_metadata(path_a, path_b, out))) goto done;
    out->identical = out->n_meta_diff == 0;
    for (int i = 0; i < out->n_tensors; i++)
        if (out->tensors[i].kind != PDB_BLOCK_CMP_SAME) out->identical = 0;
done:
    pdb_st_close(sa);
    pdb_st_close(sb);
    if (s) pdb_block_compare_free_report(out);
    return s;
}

void pdb_block_compare_free_report(pdb_block_cmp_report *r) {
    if (!r) return;
    free(r->tensors);
    r->tensors = NULL;
    r->n_tensors = 0;
}
