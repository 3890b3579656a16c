/* pdb_arch: the registry (the one place that lists every architecture) and the helpers over a
 * definition. Invariant: REGISTRY holds each pdb_arch_def once; lookups never fail silently. */
#include "pdb_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pdb_arch_def *const REGISTRY[] = {&pdb_arch_deepseek_v2, &pdb_arch_deepseek_v4};
enum { N_ARCH = sizeof REGISTRY / sizeof REGISTRY[0] };

const pdb_arch_def *pdb_arch_find(const char *model_type) {
    for (int i = 0; model_type && i < N_ARCH; i++)
        if (!strcmp(REGISTRY[i]->name, model_type)) return REGISTRY[i];
    return NULL;
}

const char *pdb_arch_names(char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_ARCH && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", REGISTRY[i]->name);
    return buf;
}

pdb_status pdb_arch_of(const pdb_config *cfg, const pdb_arch_def **out) {
    *out = NULL;
    for (int i = 0; i < N_ARCH; i++)
        if (REGISTRY[i]->id == cfg->arch) { *out = REGISTRY[i]; return PDB_OK; }
    char names[256];
    return pdb_err_set(PDB_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", cfg->model_type,
                       pdb_arch_names(names, sizeof names));
}

pdb_status pdb_arch_layout_of(const pdb_config *cfg, int sem, pdb_arch_layout *out) {
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(cfg, &a));
    return a->layout(cfg, sem, out);
}

pdb_status pdb_arch_pool_values(const pdb_config *cfg, int sem, const pdb_store_pool *pool, int64_t block_size, const void *data,
                                float **out, int64_t *n) {
    *out = NULL;
    *n = 0;
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(cfg, &a));
    int64_t rows = pool->n_layers * pdb_store_pool_rows(pool, block_size), dim = pool->width;
    if (pool->dtype != PDB_DT_F32) {
        if (!a->pool_decode)
            return pdb_err_set(PDB_UNSUPPORTED, "pool %s is %s and %s defines no values for it", pool->name, pdb_dtype_name(pool->dtype),
                               a->name);
        PDB_TRY(a->pool_decode(cfg, sem, pool, data, rows, NULL, &dim));
    }
    float *v = malloc(sizeof(float) * (size_t)(rows * dim > 0 ? rows * dim : 1));
    if (!v) return pdb_err_set(PDB_NOMEM, "pool %s: out of memory for %lld values", pool->name, (long long)(rows * dim));
    pdb_status s = PDB_OK;
    if (pool->dtype == PDB_DT_F32) memcpy(v, data, sizeof(float) * (size_t)(rows * dim));
    else s = a->pool_decode(cfg, sem, pool, data, rows, v, &dim);
    if (s) { free(v); return s; }
    *out = v;
    *n = rows * dim;
    return PDB_OK;
}

pdb_status pdb_arch_check_block_size(const pdb_config *cfg, int64_t bs) {
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(cfg, &a));
    return a->check_block_size(cfg, bs);
}

pdb_status pdb_arch_semantics_parse(const pdb_arch_def *a, const char *name, int *sem) {
    *sem = 0;
    if (!name) return PDB_OK;
    for (int i = 0; i < a->n_semantics; i++)
        if (!strcmp(a->semantics[i].name, name)) { *sem = i; return PDB_OK; }
    char names[256];
    size_t k = 0;
    names[0] = 0;
    for (int i = 0; i < a->n_semantics && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", a->semantics[i].name);
    return pdb_err_set(PDB_INVALID, "%s cache semantics '%s' is not one of %s", a->name, name, names);
}

const char *pdb_arch_semantics_name(const pdb_arch_def *a, int sem) {
    return a->semantics[sem >= 0 && sem < a->n_semantics ? sem : 0].name;
}

const char *pdb_arch_semantics_fingerprint(const pdb_arch_def *a, int sem) {
    return a->semantics[sem >= 0 && sem < a->n_semantics ? sem : 0].fingerprint;
}

void pdb_arch_block_pools(const pdb_store_layout *layout, int64_t bs, const void *block, const void **ptrs) {
    uint64_t off = 0;
    for (int p = 0; p < layout->n_pools; p++) {
        ptrs[p] = (const char *)block + off;
        off += pdb_store_pool_bytes(&layout->pools[p], bs);
    }
}

pdb_status pdb_arch_check_block_128(int64_t bs) {
    if (bs <= 0 || bs % 128) return pdb_err_set(PDB_INVALID, "block size %lld is not a positive multiple of 128", (long long)bs);
    return PDB_OK;
}
