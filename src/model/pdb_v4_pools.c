/* pdb_v4_pools: the layout of the DeepSeek-V4 decoder's cache as store pools (DESIGN §4,
 * docs/v4.md §3), and the copy of one block between a pdb_v4_cache and a block buffer. The pools'
 * contents are defined by pdb_v4_cache_feed (pdb_v4.c); this file says where they go in a block.
 *   win       STATE  all layers  [W, head_dim]            K=V rows, position q at row q % W
 *   comp_csa  APPEND CSA layers  stride 4,  head_dim       compressed entries
 *   ikeys     APPEND CSA layers  stride 4,  index_head_dim indexer keys
 *   ov_kv, ov_gate    STATE CSA  [4, head_dim]             overlap halves of the last window
 *   iov_kv, iov_gate  STATE CSA  [4, index_head_dim]       the indexer compressor's
 *   comp_hca  APPEND HCA layers  stride rate_hca, head_dim compressed entries
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

typedef struct v4_pool_def {
    const char *name;
    pdb_store_pool_kind kind;
    layer_sel sel;
    size_t field;   /* offsetof(pdb_v4_layer_cache, <float *>) */
    int width_idx;  /* 0 head_dim, 1 index_head_dim */
} v4_pool_def;

static const v4_pool_def V4_POOLS[] = {
    {"win", PDB_STORE_POOL_STATE, SEL_ALL, offsetof(pdb_v4_layer_cache, win), 0},
    {"comp_csa", PDB_STORE_POOL_APPEND, SEL_CSA, offsetof(pdb_v4_layer_cache, comp), 0},
    {"ikeys", PDB_STORE_POOL_APPEND, SEL_CSA, offsetof(pdb_v4_layer_cache, ikeys), 1},
    {"ov_kv", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, ov_kv), 0},
    {"ov_gate", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, ov_gate), 0},
    {"iov_kv", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, iov_kv), 1},
    {"iov_gate", PDB_STORE_POOL_STATE, SEL_CSA, offsetof(pdb_v4_layer_cache, iov_gate), 1},
    {"comp_hca", PDB_STORE_POOL_APPEND, SEL_HCA, offsetof(pdb_v4_layer_cache, comp), 0},
};
enum { N_V4_POOLS = sizeof V4_POOLS / sizeof V4_POOLS[0] };

static int sel_has(const pdb_config *c, layer_sel sel, int64_t l) {
    return sel == SEL_ALL || (sel == SEL_CSA && c->v4_attn[l] == PDB_V4_ATTN_CSA) ||
           (sel == SEL_HCA && c->v4_attn[l] == PDB_V4_ATTN_HCA);
}

/* The store pool of def d for config c (n_layers 0 when the model has no such layer). */
static pdb_store_pool pool_of(const pdb_config *c, const v4_pool_def *d) {
    int64_t n = 0;
    for (int64_t l = 0; l < c->num_layers; l++) n += sel_has(c, d->sel, l);
    int64_t rate = d->sel == SEL_HCA ? c->compress_rate_hca : c->compress_rate_csa;
    pdb_store_pool p = {.name = d->name, .kind = d->kind, .n_layers = n, .width = d->width_idx ? c->index_head_dim : c->head_dim,
                        .dtype = PDB_DT_F32};
    if (d->kind == PDB_STORE_POOL_APPEND) p.stride = rate;
    else p.rows = d->sel == SEL_ALL ? c->sliding_window : rate;
    return p;
}

pdb_status pdb_v4_pools_layout(const pdb_config *cfg, pdb_arch_layout *out) {
    memset(out, 0, sizeof *out);
    int n = 0;
    for (int i = 0; i < N_V4_POOLS; i++) {
        pdb_store_pool p = pool_of(cfg, &V4_POOLS[i]);
        if (p.n_layers) out->pools[n++] = p;
    }
    out->layout = (pdb_store_layout){.n_pools = n, .pools = out->pools};
    return PDB_OK;
}

/* Copy block b between cache c and buf (dir 0: cache -> buf, 1: buf -> cache). */
static void v4_copy_block(const pdb_config *c, pdb_v4_cache *cc, int64_t b, int64_t bs, char *buf, int to_cache) {
    for (int i = 0; i < N_V4_POOLS; i++) {
        const v4_pool_def *d = &V4_POOLS[i];
        pdb_store_pool p = pool_of(c, d);
        if (!p.n_layers) continue;
        int64_t rows = pdb_store_pool_rows(&p, bs), first = d->kind == PDB_STORE_POOL_APPEND ? b * rows : 0;
        size_t bytes = sizeof(float) * (size_t)(rows * p.width);
        for (int64_t l = 0, k = 0; l < c->num_layers; l++) {
            if (!sel_has(c, d->sel, l)) continue;
            float *base = *(float **)((char *)&cc->layers[l] + d->field) + first * p.width;
            char *blk = buf + (size_t)k++ * bytes;
            if (to_cache) memcpy(base, blk, bytes);
            else memcpy(blk, base, bytes);
        }
        buf += (size_t)p.n_layers * bytes;
    }
}

void pdb_v4_pools_get_block(const pdb_config *cfg, const pdb_v4_cache *c, int64_t b, int64_t bs, void *buf) {
    v4_copy_block(cfg, (pdb_v4_cache *)c, b, bs, buf, 0);
}

void pdb_v4_pools_put_block(const pdb_config *cfg, pdb_v4_cache *c, int64_t b, int64_t bs, const void *buf) {
    v4_copy_block(cfg, c, b, bs, (char *)buf, 1);
}
