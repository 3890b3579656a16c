/* pdb_v4_pools: the layout of the DeepSeek-V4 decoder's cache as store pools (DESIGN §4,
 * docs/v4.md §3), and the copy of one block between a pdb_v4_cache and a block buffer. The pools'
 * contents are defined by pdb_v4_cache_feed (pdb_v4.c); this file says where they go in a block.
 *   win       STATE  all layers  [W]  kv rows            K=V rows, position q at row q % W
 *   comp_csa  APPEND CSA layers  stride 4, kv rows       compressed entries
 *   ikeys     APPEND CSA layers  stride 4, ikey rows     indexer keys
 *   ov_kv, ov_gate    STATE CSA  [4, head_dim] f32       overlap halves of the last window
 *   iov_kv, iov_gate  STATE CSA  [4, index_head_dim] f32 the indexer compressor's
 *   comp_hca  APPEND HCA layers  stride rate_hca, kv rows compressed entries
 * kv / ikey rows are pdb_v4_rows' formats of (config, semantics): under official the compact
 * FP8 / FP4 rows (a pool of U8, width = the row's bytes), under exact f32 (F32, width = the dim),
 * byte for byte the cache's own rows, so a block copy is a memcpy per layer either way.
 * (pools of a layer type the model lacks are left out; a pool's layer i is the i-th layer of
 * its type). Invariant: a block ends at a multiple of 128 and of every rate, so the
 * compressors' unfinished-window buffers are empty there and are not stored (their stale
 * slots are always rewritten before an entry reads them). The decoder (its own blocks) and the
 * prefill engine's capture hook (bridged blocks) both copy through these two functions, so a
 * bridged block and a native block are the same bytes by construction. */
#include <stddef.h>
#include <string.h>

#include "pdb_v4.h"

typedef enum { SEL_ALL, SEL_CSA, SEL_HCA } layer_sel;

typedef enum { ROW_F32_HD, ROW_F32_IHD, ROW_KV, ROW_IKEY } row_kind;

typedef struct v4_pool_def {
    const char *name;
    pdb_store_pool_kind kind;
    layer_sel sel;
    size_t field;   /* offsetof(pdb_v4_layer_cache, <pointer>) */
    row_kind row;
} v4_pool_def;

static const v4_pool_def V4_POOLS[] = {
    {"win", PDB_STORE_POOL_STATE, SEL_ALL, offsetof(pdb_v4_layer_cache, win), ROW_KV},
    {"comp_csa", PDB_STORE_POOL_APPEND, SEL_CSA, offsetof(pdb_v4_layer_cache, comp), ROW_KV},
    {"ikeys", PDB_STORE_POOL_APPEND, SEL_CSA, offsetof(pdb_v4_layer_cache, ikeys), ROW_IKEY},
    {"ov_kv", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, ov_kv), ROW_F32_HD},
    {"ov_gate", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, ov_gate), ROW_F32_HD},
    {"iov_kv", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, iov_kv), ROW_F32_IHD},
    {"iov_gate", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, iov_gate), ROW_F32_IHD},
    {"comp_hca", PDB_STORE_POOL_APPEND, SEL_HCA, offsetof(pdb_v4_layer_cache, comp), ROW_KV},
};
enum { N_V4_POOLS = sizeof V4_POOLS / sizeof V4_POOLS[0] };

static int sel_has(const pdb_config *c, layer_sel sel, int64_t l) {
    return sel == SEL_ALL || (sel == SEL_CSA && c->v4_attn[l] == PDB_V4_ATTN_CSA) ||
           (sel == SEL_HCA && c->v4_attn[l] == PDB_V4_ATTN_HCA);
}

/* A pool's row: width and dtype in the store, bytes per row. */
static void row_of(const pdb_config *c, int sem, row_kind k, int64_t *width, pdb_dtype *dt, int64_t *bytes) {
    if (k == ROW_F32_HD || k == ROW_F32_IHD) {
        *width = k == ROW_F32_HD ? c->head_dim : c->index_head_dim;
        *dt = PDB_DT_F32;
        *bytes = 4 * *width;
        return;
    }
    pdb_v4_row r = k == ROW_KV ? pdb_v4_row_kv(c, sem) : pdb_v4_row_ikey(c, sem);
    *bytes = r.bytes;
    if (r.fmt == PDB_V4_ROW_F32) { *width = r.dim; *dt = PDB_DT_F32; }
    else { *width = r.bytes; *dt = PDB_DT_U8; }
}

/* The store pool of def d for config c under semantics sem (n_layers 0 when the model has no such
 * layer); *row_bytes: the bytes of one of its rows. */
static pdb_store_pool pool_of(const pdb_config *c, int sem, const v4_pool_def *d, int64_t *row_bytes) {
    int64_t n = 0;
    for (int64_t l = 0; l < c->num_layers; l++) n += sel_has(c, d->sel, l);
    int64_t rate = d->sel == SEL_HCA ? c->compress_rate_hca : c->compress_rate_csa;
    pdb_store_pool p = {.name = d->name, .kind = d->kind, .n_layers = n};
    row_of(c, sem, d->row, &p.width, &p.dtype, row_bytes);
    if (d->kind == PDB_STORE_POOL_APPEND) p.stride = rate;
    else p.rows = d->sel == SEL_ALL ? c->sliding_window : rate;
    return p;
}

pdb_status pdb_v4_pools_layout(const pdb_config *cfg, int sem, pdb_arch_layout *out) {
    memset(out, 0, sizeof *out);
    int n = 0;
    for (int i = 0; i < N_V4_POOLS; i++) {
        int64_t rb;
        pdb_store_pool p = pool_of(cfg, sem, &V4_POOLS[i], &rb);
        if (p.n_layers) out->pools[n++] = p;
    }
    out->layout = (pdb_store_layout){.n_pools = n, .pools = out->pools};
    return PDB_OK;
}

/* Copy block b between cache c and buf (dir 0: cache -> buf, 1: buf -> cache). */
static void v4_copy_block(const pdb_config *c, pdb_v4_cache *cc, int64_t b, int64_t bs, char *buf, int to_cache) {
    for (int i = 0; i < N_V4_POOLS; i++) {
        const v4_pool_def *d = &V4_POOLS[i];
        int64_t rb;
        pdb_store_pool p = pool_of(c, (int)cc->sem, d, &rb);
        if (!p.n_layers) continue;
        int64_t rows = pdb_store_pool_rows(&p, bs), first = d->kind == PDB_STORE_POOL_APPEND ? b * rows : 0;
        size_t bytes = (size_t)(rb * rows);
        for (int64_t l = 0, k = 0; l < c->num_layers; l++) {
            if (!sel_has(c, d->sel, l)) continue;
            char *base = *(char **)((char *)&cc->layers[l] + d->field) + first * rb;
            char *blk = buf + (size_t)k++ * bytes;
            if (to_cache) memcpy(base, blk, bytes);
            else memcpy(blk, base, bytes);
        }
        buf += (size_t)p.n_layers * bytes;
    }
}

pdb_status pdb_v4_pools_decode(const pdb_config *cfg, int sem, const pdb_store_pool *pool, const void *rows, int64_t n_rows,
                               float *out, int64_t *dim) {
    for (int i = 0; i < N_V4_POOLS; i++) {
        const v4_pool_def *d = &V4_POOLS[i];
        if (strcmp(d->name, pool->name) || (d->row != ROW_KV && d->row != ROW_IKEY)) continue;
        pdb_v4_row r = d->row == ROW_KV ? pdb_v4_row_kv(cfg, sem) : pdb_v4_row_ikey(cfg, sem);
        if (pool->dtype != PDB_DT_U8 || pool->width != r.bytes) break;
        *dim = r.dim;
        if (out) pdb_v4_row_decode_rows(&r, rows, NULL, n_rows, out);
        return PDB_OK;
    }
    return pdb_err_set(PDB_UNSUPPORTED, "deepseek_v4 pool %s (%s, width %lld) is not one of its compact row pools", pool->name,
                       pdb_dtype_name(pool->dtype), (long long)pool->width);
}

void pdb_v4_pools_get_block(const pdb_config *cfg, const pdb_v4_cache *c, int64_t b, int64_t bs, void *buf) {
    v4_copy_block(cfg, (pdb_v4_cache *)c, b, bs, buf, 0);
}

void pdb_v4_pools_put_block(const pdb_config *cfg, pdb_v4_cache *c, int64_t b, int64_t bs, const void *buf) {
    v4_copy_block(cfg, c, b, bs, (char *)buf, 1);
}
