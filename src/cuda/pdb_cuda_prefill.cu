/* pdb_cuda_prefill: the CUDA prefill backend for DeepSeek-V2. Reading order: create (device,
 * cuBLAS, engine weights as bf16 or f32, decoder hook weights as exact f32) -> begin (paged
 * cache, scratch) -> forward (per layer: norm, hook, q, latent rows, attention, o_proj, MoE),
 * the hook's finished rows copied into the pinned block being captured -> get_block; hook_chunk
 * (the hook alone from given attention inputs, for pool-validate).
 * Invariants: (1) capture rows are pdb_v2_ops_latent_rows' definition: kva by pdb_cuda_hook_dot
 * (pdb_qmat_dot's order) from this engine's attention input, then pdb_math_rmsnorm's and
 * pdb_rope_apply's arithmetic on the device (pdb_cuda_hook_finish, host roundings, the decoder's
 * rope angles from the host) — so from identical xn they are bit-identical to the CPU's;
 * (2) every device buffer is sized at create/begin from the config and the sub-chunk bound, and
 * forward passes never exceed sub_chunk tokens; (3) every CUDA/cuBLAS call is checked, a failure
 * returns PDB_CUDA and leaves the backend destroyable. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_util.h"

extern "C" {
#include "pdb_cuda_prefill.h"
#include "pdb_dtype.h"
#include "pdb_rope.h"
#include "pdb_v2_names.h"
#include "pdb_v2_ops.h"
}

/* ======================================= state ============================================== */

typedef struct cu_layer {
    float *attn_norm, *ffn_norm, *q_a_norm, *kv_a_norm; /* device f32 [H], [H], [qlr], [kvl] */
    void *q_proj, *q_a, *q_b, *kv_a, *o_proj;            /* dt: [nh*qk, H], [qlr, H], [nh*qk, qlr], [row, H], [H, nh*vd] */
    void *kv_b;                                          /* dt [nh*(nope+vd), kvl]: W_UK_h then W_UV_h per head */
    float *ukt;                                          /* exact engine: f32 [nh, kvl, nope], W_UK_h transposed */
    int is_moe;
    void *gate, *up, *down;                              /* dt dense [I, H], [I, H], [H, I] */
    float *router;                                       /* f32 [E, H] */
    void *eg, *eu, *ed;                                  /* dt [E, Im, H], [E, Im, H], [E, H, Im] */
    void *sg, *su, *sd;                                  /* dt [Is, H], [Is, H], [H, Is] */
    float *dec_kva;                                      /* f32 [row, H]: the DECODER's kv_a, exactly dequantized */
    float *dec_norm;                                     /* f32 [kvl]: the decoder's kv_a_layernorm */
} cu_layer;

typedef pdb_cuda_dlist cu_list;

typedef struct pdb_cuda_prefill {
    pdb_config cfg;
    pdb_cuda_dt dt;
    int exact;                  /* PDB_CUDA_PREC_EXACT: dot32 products and the exact attention */
    int attn_tc;                /* bf16 cache: absorbed attention on the tensor cores (pdb_cuda_mla_tc.cu) */
    int attn_mha;               /* bf16 cache: the MHA form on the tensor cores (takes precedence) */
    int moe_tc;                 /* bf16: routed experts on the device layout: cuBLAS row tiles (pdb_cuda_moe_tiles,
                                   the default) or, with moe_kernel, the own grouped GEMM (pdb_cuda_moe_tc.cu) */
    int moe_kernel;             /* opts.moe_kernel */
    int64_t Rmax;               /* gathered expert rows a pass may need (padded per expert in moe_tc; row tiles:
                                   ntpad tiles) */
    int64_t ntpad;              /* row tiles: the buffers' tiles (pdb_cuda_moe_tiles_pad) */
    const void **ptrs;          /* row tiles: device [8, ntpad] their operands */
    int32_t *h_tiles;           /* row tiles: pinned [ntpad] the layout's tile experts */
    int64_t dqp, qstride;       /* MHA form: padded q/k width, Qb rows per head */
    int kv_recompute;           /* MHA form: opts.mha_kv_recompute */
    int64_t kv_layers;          /* MHA form: layers of K/V kept (nl: each pass expands its own positions; 1: all again) */
    size_t esz;                 /* bytes per dt element */
    int64_t sub_cfg, sub_max, page; /* configured / current pass bound (tokens), page size */
    int64_t gemm_rows;          /* M-invariant GEMM tile (0: whole M) */
    int device;
    cudaStream_t s;
    int have_stream;
    cudaStream_t s_cap;         /* the capture rows' device -> host copies, overlapping the next layers */
    cudaEvent_t *ev_rows;       /* [nl]: layer l's rows finished on s */
    int n_ev_rows;
    pdb_cuda_blas blas;
    int have_blas;
    pdb_v2_qweights dec;        /* host: decoder kv_a_norm and rope (the capture row math) */
    int have_dec;
    pdb_rope rope;              /* engine rope table (inv_freq, attention factor) */
    float scale;
    void *embed, *lm_head;      /* dt [V, H] */
    float *final_norm;          /* [H] */
    cu_layer *L;
    cu_list wts, seq;           /* device allocations: weights (freed at destroy), sequence (at end) */
    /* dims */
    int64_t H, nh, nope, rope_d, qk, vd, kvl, row, qlr, E, K, Im, Is, I, V, nl;
    /* sequence */
    int64_t max_tokens, len, n_pages, rowpad;
    void *cache;                /* dt [L, n_pages, page, rowpad] */
    int32_t *ptab;              /* device [n_pages] */
    float *h, *xn, *q, *qa, *kva, *qlat, *olat, *attn, *probs, *rsc, *topk_w, *g, *u, *xe, *ye, *sh, *cs, *logits;
    float *hook;                /* [nl, S, row]: each layer's finished capture rows until s_cap copied them */
    float *kvx;                 /* MHA form: [MHA_SPAN, nh*(nope+vd)] expanded keys/values of a span of positions */
    void *qb, *kb, *vb;         /* MHA form: bf16 Q [nh, S, dqp], K [kv_layers, nh, max_tokens, dqp], V [.., vd] */
    int32_t *ids, *topk_idx, *row_src, *slot_row, *tile_e;
    int32_t *lay;               /* moe_tc: [S*K + 2E] the device layout's ranks, counts and starts */
    void *cvt;                  /* dt staging for GEMM A operands */
    /* pinned host */
    float *h_cs, *h_dcs;        /* [S, rope]: engine cos/sin (halves), the decoder's rope pairs (pdb_rope_angles) */
    float *dcs;                 /* device [S, rope]: h_dcs */
    int32_t *h_ids, *h_topk, *h_rows; /* [S], [S*K], [Rmax + S*K] */
    int64_t *h_cnt;             /* [E] */
    /* the capture: the block being assembled (host [L, bs, row], the decoder's "latent" pool of
     * one block) holds the rows of positions (hooked / bs) * bs .. hooked - 1 */
    float *blk;
    int64_t bs, hooked;
    /* hook_chunk staging */
    float *cr_x, *cr_kva;
    int prof;                   /* opts.profile */
    pdb_cuda_prof pf;           /* the stage profile: at most 16 marks per layer and a few around */
} pdb_cuda_prefill;
typedef pdb_cuda_prefill cu_prefill;

enum { CR_ROWS = 256 };

/* Profile stages (opts.profile): a mark records an event that ends the named stage. */
enum { ST_EMBED, ST_NORM, ST_HOOK, ST_QKV, ST_EXPAND, ST_ATTN, ST_OPROJ, ST_ROUTER, ST_SHARED, ST_LAYOUT,
       ST_EXPERTS, ST_COMBINE, ST_DENSE, ST_HEAD, ST_N };
static const char *const stage_name[ST_N] = {"embed",  "norm",    "hook",   "qkv",        "kv_expand",
                                             "attention", "o_proj", "router", "shared",   "layout"    ,
                                             "experts", "combine", "dense_mlp", "lm_head"};

static pdb_status mark(cu_prefill *c, int st) { return pdb_cuda_prof_mark(&c->pf, c->s, st); }

extern "C" void pdb_cuda_prefill_profile_take(cu_prefill *c, char *buf, size_t n) {
    if (buf && n) buf[0] = 0;
    if (c) pdb_cuda_prof_take(&c->pf, buf, n);
}
/* MHA form: positions whose keys and values are expanded per cuBLAS call (f32 scratch of MHA_SPAN x nh x (nope + v));
 * every layer's expanded K and V are kept when that leaves MHA_KEEP_SPARE bytes of the GPU free */
enum { MHA_SPAN = 8192 };
static const size_t MHA_KEEP_SPARE = (size_t)4 << 30;

static void list_free(cu_list *l) { pdb_cuda_dlist_free(l); }

template <typename T> static pdb_status dalloc(cu_list *l, T **p, size_t bytes) {
    return pdb_cuda_dalloc(l, p, bytes, "v2 engine buffer");
}

/* ======================================= weights ============================================ */

/* Upload an f32 host array as dt into dst (device, preallocated). */
static pdb_status upload_dt(cu_prefill *c, void *dst, const float *src, int64_t count) {
    if (c->dt == PDB_CUDA_DT_F32) return pdb_cuda_to_device(dst, src, sizeof(float) * (size_t)count, "weights");
    uint16_t *tmp = (uint16_t *)malloc(2 * (size_t)count);
    if (!tmp) return pdb_err_set(PDB_NOMEM, "bf16 staging of %lld values", (long long)count);
    pdb_status s = pdb_dtype_from_f32(PDB_DT_BF16, src, count, tmp);
    if (!s) s = pdb_cuda_to_device(dst, tmp, 2 * (size_t)count, "weights");
    free(tmp);
    return s;
}

/* Load tensor `name` of shape [d0, d1] (d1 == 0: 1-D) from the engine checkpoint (any float dtype,
 * FP8 block-scaled included) into dst + offset elements, as dt (or f32 when as_f32). */
static pdb_status load_into(cu_prefill *c, const pdb_st *st, const char *name, int64_t d0, int64_t d1, void *dst,
                            int64_t offset, int as_f32) {
    int64_t shape[2] = {d0, d1};
    float *f = NULL;
    PDB_TRY(pdb_st_load_f32(st, name, d1 ? 2 : 1, shape, &f));
    int64_t count = d0 * (d1 ? d1 : 1);
    pdb_status s = as_f32 ? pdb_cuda_to_device((float *)dst + offset, f, sizeof(float) * (size_t)count, name)
                          : upload_dt(c, (char *)dst + (size_t)offset * c->esz, f, count);
    free(f);
    return s ? pdb_err_wrap(s, "tensor '%s': ", name) : PDB_OK;
}

/* Role `role` (pdb_v2_names) of layer l / expert e: a weight in the engine dtype, a vector in f32. */
static pdb_status load_w(cu_prefill *c, const pdb_st *st, void **dst, int64_t d0, int64_t d1, int role, int64_t l,
                         int64_t e) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(role, l, e, name);
    PDB_TRY(dalloc(&c->wts, dst, c->esz * (size_t)(d0 * d1)));
    return load_into(c, st, name, d0, d1, *dst, 0, 0);
}

static pdb_status load_v(cu_prefill *c, const pdb_st *st, float **dst, int64_t d0, int64_t d1, int role, int64_t l,
                         int64_t e) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(role, l, e, name);
    PDB_TRY(dalloc(&c->wts, dst, sizeof(float) * (size_t)(d0 * (d1 ? d1 : 1))));
    return load_into(c, st, name, d0, d1, *dst, 0, 1);
}

/* The exact engine's W_UK_h^T ([kvl, nope] per head, as the CPU's w_uk_t), from kv_b. */
static pdb_status load_ukt(cu_prefill *c, const pdb_st *st, cu_layer *L, int l) {
    char name[PDB_NAMES_MAX_LEN];
    pdb_v2_names_format(PDB_V2_T_KV_B_PROJ, l, 0, name);
    int64_t nh = c->nh, nope = c->nope, vd = c->vd, kvl = c->kvl, shape[2] = {nh * (nope + vd), kvl};
    float *kvb = NULL, *t = (float *)malloc(sizeof(float) * (size_t)(nh * kvl * nope));
    if (!t) return pdb_err_set(PDB_NOMEM, "W_UK transpose");
    pdb_status s = pdb_st_load_f32(st, name, 2, shape, &kvb);
    if (!s) {
        for (int64_t h = 0; h < nh; h++)
            for (int64_t k = 0; k < kvl; k++)
                for (int64_t i = 0; i < nope; i++) t[(h * kvl + k) * nope + i] = kvb[(h * (nope + vd) + i) * kvl + k];
        s = dalloc(&c->wts, &L->ukt, sizeof(float) * (size_t)(nh * kvl * nope));
    }
    if (!s) s = pdb_cuda_to_device(L->ukt, t, sizeof(float) * (size_t)(nh * kvl * nope), "W_UK^T");
    free(kvb);
    free(t);
    return s;
}

static pdb_status load_layer(cu_prefill *c, const pdb_st *st, int l) {
    cu_layer *L = &c->L[l];
    int64_t H = c->H;
    PDB_TRY(load_v(c, st, &L->attn_norm, H, 0, PDB_V2_T_ATTN_NORM, l, 0));
    PDB_TRY(load_v(c, st, &L->ffn_norm, H, 0, PDB_V2_T_FFN_NORM, l, 0));
    if (c->qlr == 0) {
        PDB_TRY(load_w(c, st, &L->q_proj, c->nh * c->qk, H, PDB_V2_T_Q_PROJ, l, 0));
    } else {
        PDB_TRY(load_w(c, st, &L->q_a, c->qlr, H, PDB_V2_T_Q_A_PROJ, l, 0));
        PDB_TRY(load_v(c, st, &L->q_a_norm, c->qlr, 0, PDB_V2_T_Q_A_NORM, l, 0));
        PDB_TRY(load_w(c, st, &L->q_b, c->nh * c->qk, c->qlr, PDB_V2_T_Q_B_PROJ, l, 0));
    }
    PDB_TRY(load_w(c, st, &L->kv_a, c->row, H, PDB_V2_T_KV_A_PROJ, l, 0));
    PDB_TRY(load_v(c, st, &L->kv_a_norm, c->kvl, 0, PDB_V2_T_KV_A_NORM, l, 0));
    PDB_TRY(load_w(c, st, &L->kv_b, c->nh * (c->nope + c->vd), c->kvl, PDB_V2_T_KV_B_PROJ, l, 0));
    if (c->exact) PDB_TRY(load_ukt(c, st, L, l));
    PDB_TRY(load_w(c, st, &L->o_proj, H, c->nh * c->vd, PDB_V2_T_O_PROJ, l, 0));
    L->is_moe = pdb_config_layer_is_moe(&c->cfg, l);
    if (!L->is_moe) {
        PDB_TRY(load_w(c, st, &L->gate, c->I, H, PDB_V2_T_MLP_GATE, l, 0));
        PDB_TRY(load_w(c, st, &L->up, c->I, H, PDB_V2_T_MLP_UP, l, 0));
        return load_w(c, st, &L->down, H, c->I, PDB_V2_T_MLP_DOWN, l, 0);
    }
    char name[PDB_NAMES_MAX_LEN];
    if (pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_EXPERTS_GATE_UP, l, 0, name)))
        return pdb_err_set(PDB_UNSUPPORTED, "checkpoint: fused expert tensor '%s' (the CUDA backend reads per-expert "
                           "tensors)", name);
    PDB_TRY(load_v(c, st, &L->router, c->E, H, PDB_V2_T_ROUTER, l, 0));
    int64_t per = c->Im * H;
    PDB_TRY(dalloc(&c->wts, &L->eg, c->esz * (size_t)(c->E * per)));
    PDB_TRY(dalloc(&c->wts, &L->eu, c->esz * (size_t)(c->E * per)));
    PDB_TRY(dalloc(&c->wts, &L->ed, c->esz * (size_t)(c->E * per)));
    for (int64_t e = 0; e < c->E; e++) {
        pdb_v2_names_format(PDB_V2_T_EXPERT_GATE, l, e, name);
        PDB_TRY(load_into(c, st, name, c->Im, H, L->eg, e * per, 0));
        pdb_v2_names_format(PDB_V2_T_EXPERT_UP, l, e, name);
        PDB_TRY(load_into(c, st, name, c->Im, H, L->eu, e * per, 0));
        pdb_v2_names_format(PDB_V2_T_EXPERT_DOWN, l, e, name);
        PDB_TRY(load_into(c, st, name, H, c->Im, L->ed, e * per, 0));
    }
    if (c->cfg.n_shared_experts > 0) {
        PDB_TRY(load_w(c, st, &L->sg, c->Is, H, PDB_V2_T_SHARED_GATE, l, 0));
        PDB_TRY(load_w(c, st, &L->su, c->Is, H, PDB_V2_T_SHARED_UP, l, 0));
        PDB_TRY(load_w(c, st, &L->sd, H, c->Is, PDB_V2_T_SHARED_DOWN, l, 0));
    }
    return PDB_OK;
}

/* The decoder's kv_a of every layer, dequantized row by row with pdb_qmat_row_f32 (exact). */
static pdb_status load_hook(cu_prefill *c) {
    float *buf = (float *)malloc(sizeof(float) * (size_t)(c->row * c->H));
    if (!buf) return pdb_err_set(PDB_NOMEM, "hook weight staging");
    pdb_status s = PDB_OK;
    for (int64_t l = 0; l < c->nl && !s; l++) {
        const pdb_qmat *w = &c->dec.layers[l].kv_a;
        for (int64_t r = 0; r < c->row; r++) pdb_qmat_row_f32(w, r, buf + r * c->H);
        s = dalloc(&c->wts, &c->L[l].dec_kva, sizeof(float) * (size_t)(c->row * c->H));
        if (!s) s = pdb_cuda_to_device(c->L[l].dec_kva, buf, sizeof(float) * (size_t)(c->row * c->H), "hook weights");
        if (!s) s = dalloc(&c->wts, &c->L[l].dec_norm, sizeof(float) * (size_t)c->kvl);
        if (!s) s = pdb_cuda_to_device(c->L[l].dec_norm, c->dec.layers[l].kv_a_norm, sizeof(float) * (size_t)c->kvl, "hook norm");
    }
    free(buf);
    return s;
}

/* ======================================= sequence =========================================== */

static void seq_free(cu_prefill *c) {
    list_free(&c->seq);
    cudaFreeHost(c->h_cs);
    cudaFreeHost(c->h_ids);
    cudaFreeHost(c->h_topk);
    cudaFreeHost(c->h_rows);
    cudaFreeHost(c->h_tiles);
    c->h_tiles = NULL;
    free(c->h_cnt);
    cudaFreeHost(c->blk);
    c->blk = NULL;
    cudaFreeHost(c->h_dcs);
    c->h_dcs = NULL;
    c->bs = c->hooked = 0;
    c->h_cs = NULL;
    c->h_ids = c->h_topk = c->h_rows = NULL;
    c->h_cnt = NULL;
    c->cache = NULL;
    c->max_tokens = c->len = 0;
}

template <typename T> static pdb_status hpin(T **p, size_t bytes) {
    void *v = NULL;
    if (bytes == 0) bytes = 16;
    PDB_CU(cudaMallocHost(&v, bytes));
    *p = (T *)v;
    return PDB_OK;
}

extern "C" pdb_status pdb_cuda_prefill_begin(cu_prefill *c, int64_t max_tokens, int64_t bs) {
    seq_free(c);
    if (max_tokens <= 0 || max_tokens > ((int64_t)1 << 31) || bs <= 0)
        return pdb_err_set(PDB_INVALID, "cuda begin: max_tokens %lld outside 1..2^31 or block size %lld", (long long)max_tokens,
                           (long long)bs);
    /* pinned: the device's finished rows are copied straight into it */
    if (cudaMallocHost((void **)&c->blk, sizeof(float) * (size_t)(c->nl * bs * c->row)) != cudaSuccess) {
        cudaGetLastError();
        c->blk = NULL;
        return pdb_err_set(PDB_NOMEM, "cuda begin: pinned capture block of %lld tokens", (long long)bs);
    }
    c->bs = bs;
    PDB_CU(cudaSetDevice(c->device));
    int64_t S = max_tokens < c->sub_cfg ? max_tokens : c->sub_cfg, K = c->K ? c->K : 1, E = c->E ? c->E : 1;
    c->n_pages = (max_tokens + c->page - 1) / c->page;
    c->rowpad = (c->row + 7) / 8 * 8;
    size_t sz = sizeof(float);
    PDB_TRY(dalloc(&c->seq, &c->cache, c->esz * (size_t)(c->nl * c->n_pages * c->page * c->rowpad)));
    PDB_TRY(dalloc(&c->seq, &c->ptab, sizeof(int32_t) * (size_t)c->n_pages));
    {
        int32_t *tab = (int32_t *)malloc(sizeof(int32_t) * (size_t)c->n_pages);
        if (!tab) return pdb_err_set(PDB_NOMEM, "page table");
        for (int64_t i = 0; i < c->n_pages; i++) tab[i] = (int32_t)i; /* one sequence: identity */
        pdb_status s = pdb_cuda_to_device(c->ptab, tab, sizeof(int32_t) * (size_t)c->n_pages, "page table");
        free(tab);
        PDB_TRY(s);
    }
    int64_t Imax = c->I;
    if (K * c->Im > Imax) Imax = K * c->Im;
    if (c->Is > Imax) Imax = c->Is;
    PDB_TRY(dalloc(&c->seq, &c->h, sz * (size_t)(S * c->H)));
    PDB_TRY(dalloc(&c->seq, &c->xn, sz * (size_t)(S * c->H)));
    PDB_TRY(dalloc(&c->seq, &c->q, sz * (size_t)(S * c->nh * c->qk)));
    PDB_TRY(dalloc(&c->seq, &c->qa, sz * (size_t)(S * (c->qlr ? c->qlr : 1))));
    PDB_TRY(dalloc(&c->seq, &c->kva, sz * (size_t)(S * c->row)));
    PDB_TRY(dalloc(&c->seq, &c->qlat, sz * (size_t)(S * c->nh * c->row)));
    PDB_TRY(dalloc(&c->seq, &c->olat, sz * (size_t)(S * c->nh * c->kvl)));
    PDB_TRY(dalloc(&c->seq, &c->attn, sz * (size_t)(S * c->nh * c->vd)));
    PDB_TRY(dalloc(&c->seq, &c->probs, sz * (size_t)(S * E)));
    PDB_TRY(dalloc(&c->seq, &c->rsc, sz * (size_t)(S * E)));
    PDB_TRY(dalloc(&c->seq, &c->topk_w, sz * (size_t)(S * K)));
    PDB_TRY(dalloc(&c->seq, &c->topk_idx, sizeof(int32_t) * (size_t)(S * K)));
    c->Rmax = S * K + (c->moe_tc ? E * PDB_CUDA_MOE_TILE : 0);
    if (c->moe_tc && !c->moe_kernel) {
        c->ntpad = pdb_cuda_moe_tiles_pad(pdb_cuda_moe_max_tiles(S * K, E));
        c->Rmax = c->ntpad * PDB_CUDA_MOE_TILE;
        PDB_TRY(dalloc(&c->seq, &c->ptrs, sizeof(void *) * (size_t)(8 * c->ntpad)));
        PDB_TRY(hpin(&c->h_tiles, sizeof(int32_t) * (size_t)c->ntpad));
    }
    int64_t Rm = c->Rmax, wide = c->H > c->Im ? c->H : c->Im;
    PDB_TRY(dalloc(&c->seq, &c->row_src, sizeof(int32_t) * (size_t)Rm));
    PDB_TRY(dalloc(&c->seq, &c->tile_e, sizeof(int32_t) * (size_t)(Rm / PDB_CUDA_MOE_TILE + 1)));
    if (c->moe_tc) PDB_TRY(dalloc(&c->seq, &c->lay, sizeof(int32_t) * (size_t)(S * K + 2 * E)));
    PDB_TRY(dalloc(&c->seq, &c->slot_row, sizeof(int32_t) * (size_t)(S * K)));
    if (Rm * c->Im > S * Imax) Imax = (Rm * c->Im + S - 1) / S;
    PDB_TRY(dalloc(&c->seq, &c->g, sz * (size_t)(S * Imax)));
    PDB_TRY(dalloc(&c->seq, &c->u, sz * (size_t)(S * Imax)));
    /* xe: the gathered rows, f32 [S*K, H] or (moe_tc) bf16 [Rmax, H] and then the experts' bf16 activations */
    size_t xe_f32 = sz * (size_t)(S * K * c->H), xe_bf = 2 * (size_t)(Rm * wide);
    PDB_TRY(dalloc(&c->seq, &c->xe, xe_f32 > xe_bf ? xe_f32 : xe_bf));
    PDB_TRY(dalloc(&c->seq, &c->ye, sz * (size_t)(Rm * c->H)));
    PDB_TRY(dalloc(&c->seq, &c->sh, sz * (size_t)(S * c->H)));
    PDB_TRY(dalloc(&c->seq, &c->hook, sz * (size_t)(c->nl * S * c->row)));
    PDB_TRY(dalloc(&c->seq, &c->cs, sz * (size_t)(S * c->rope_d)));
    PDB_TRY(dalloc(&c->seq, &c->logits, sz * (size_t)c->V));
    PDB_TRY(dalloc(&c->seq, &c->ids, sizeof(int32_t) * (size_t)S));
    if (c->attn_mha) {
        c->qstride = S;
        PDB_TRY(dalloc(&c->seq, &c->kvx, sz * (size_t)(MHA_SPAN * c->nh * (c->nope + c->vd))));
        PDB_TRY(dalloc(&c->seq, &c->qb, 2 * (size_t)(c->nh * S * c->dqp)));
        const size_t kv1 = 2 * (size_t)(c->nh * max_tokens * (c->dqp + c->vd));
        size_t free_b = 0, total_b = 0;
        PDB_CU(cudaMemGetInfo(&free_b, &total_b));
        c->kv_layers = !c->kv_recompute && free_b > (size_t)c->nl * kv1 + MHA_KEEP_SPARE ? c->nl : 1;
        PDB_TRY(dalloc(&c->seq, &c->kb, 2 * (size_t)(c->kv_layers * c->nh * max_tokens * c->dqp)));
        PDB_TRY(dalloc(&c->seq, &c->vb, 2 * (size_t)(c->kv_layers * c->nh * max_tokens * c->vd)));
    }
    int64_t cmax = S * c->H; /* largest A operand staged in dt */
    int64_t cand[] = {S * c->nh * c->qk, S * c->nh * c->kvl, S * c->nh * c->vd, S * K * c->H, S * Imax, S * c->qlr};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) cmax = cand[i] > cmax ? cand[i] : cmax;
    PDB_TRY(dalloc(&c->seq, &c->cvt, c->esz * (size_t)cmax));
    int64_t ncs = S > CR_ROWS ? S : CR_ROWS; /* forward passes and hook_chunk's pieces */
    PDB_TRY(hpin(&c->h_dcs, sz * (size_t)(ncs * c->rope_d)));
    PDB_TRY(dalloc(&c->seq, &c->dcs, sz * (size_t)(ncs * c->rope_d)));
    PDB_TRY(hpin(&c->h_cs, sz * (size_t)(S * c->rope_d)));
    PDB_TRY(hpin(&c->h_ids, sizeof(int32_t) * (size_t)S));
    PDB_TRY(hpin(&c->h_topk, sizeof(int32_t) * (size_t)(S * K)));
    PDB_TRY(hpin(&c->h_rows, sizeof(int32_t) * (size_t)(Rm + S * K)));
    c->h_cnt = (int64_t *)calloc((size_t)E + 1, sizeof(int64_t));
    if (!c->h_cnt) return pdb_err_set(PDB_NOMEM, "expert counts");
    c->max_tokens = max_tokens;
    c->len = 0;
    c->sub_max = S;
    return PDB_OK;
}

extern "C" void pdb_cuda_prefill_end(cu_prefill *c) {
    cudaStreamSynchronize(c->s);
    cudaStreamSynchronize(c->s_cap);
    cudaGetLastError();
    seq_free(c);
}

/* ======================================= forward ============================================ */

/* A operand in dt: the f32 activation itself (f32 engine) or its bf16 copy in the staging buffer. */
static pdb_status as_dt(cu_prefill *c, const float *x, int64_t count, const void **out) {
    if (c->dt == PDB_CUDA_DT_F32) { *out = x; return PDB_OK; }
    PDB_TRY(pdb_cuda_convert(c->s, x, count, c->dt, c->cvt));
    *out = c->cvt;
    return PDB_OK;
}

/* C [M, N] (ldc; beta 1: +=) = A [M, K] (lda, of type dt) . W [N, K]^T (ldw), batched with
 * strides sa, sw, sc: cuBLAS, or on the exact engine pdb_cuda_dot32 (A and W are f32 there). */
static pdb_status mm(cu_prefill *c, pdb_cuda_dt dt, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                     int64_t sa, const void *W, int64_t ldw, int64_t sw, float beta, float *C, int64_t ldc, int64_t sc,
                     int64_t batch) {
    if (c->exact)
        return pdb_cuda_dot32(c->s, M, N, K, (const float *)A, lda, sa, (const float *)W, ldw, sw, C, ldc, sc, batch,
                              beta != 0.0f);
    return pdb_cuda_gemm(&c->blas, dt, 1, M, N, K, 1.0f, A, lda, sa, W, ldw, sw, beta, C, ldc, sc, batch);
}

/* y [n, N] (+)= x [n, K] @ W[N, K]^T with x f32 (staged to dt). */
static pdb_status linear(cu_prefill *c, const float *x, int64_t n, int64_t Kd, const void *W, int64_t N, float beta,
                         float *y) {
    const void *A;
    PDB_TRY(as_dt(c, x, n * Kd, &A));
    return mm(c, c->dt, n, N, Kd, A, Kd, 0, W, Kd, 0, beta, y, N, 0, 1);
}

static pdb_cuda_pages layer_pages(cu_prefill *c, int64_t l) {
    pdb_cuda_pages pg;
    pg.base = (char *)c->cache + c->esz * (size_t)(l * c->n_pages * c->page * c->rowpad);
    pg.ptab = c->ptab;
    pg.page = c->page;
    pg.rowpad = c->rowpad;
    pg.dt = c->dt;
    return pg;
}

/* RMSNorm of n rows: the exact engine in pdb_math_rmsnorm's order, the others a warp per row */
static pdb_status norm(cu_prefill *c, const float *x, int64_t ldx, const float *w, float *y, int64_t ldy, int64_t n,
                       int64_t C) {
    if (c->exact) return pdb_cuda_rmsnorm(c->s, x, ldx, w, y, ldy, n, C, c->cfg.rms_norm_eps);
    return pdb_cuda_rmsnorm_warp(c->s, x, ldx, w, y, ldy, n, C, c->cfg.rms_norm_eps);
}

static pdb_status attention(cu_prefill *c, const cu_layer *L, int64_t l, int64_t p0, int64_t n) {
    int64_t nh = c->nh, qk = c->qk, kvl = c->kvl, row = c->row, nope = c->nope, vd = c->vd;
    if (c->qlr == 0) {
        PDB_TRY(linear(c, c->xn, n, c->H, L->q_proj, nh * qk, 0.0f, c->q));
    } else {
        PDB_TRY(linear(c, c->xn, n, c->H, L->q_a, c->qlr, 0.0f, c->qa));
        PDB_TRY(norm(c, c->qa, c->qlr, L->q_a_norm, c->qa, c->qlr, n, c->qlr));
        PDB_TRY(linear(c, c->qa, n, c->qlr, L->q_b, nh * qk, 0.0f, c->q));
    }
    PDB_TRY(linear(c, c->xn, n, c->H, L->kv_a, row, 0.0f, c->kva));
    pdb_cuda_pages pg = layer_pages(c, l);
    PDB_TRY(pdb_cuda_latent_write(c->s, c->kva, L->kv_a_norm, c->cs, &pg, p0, n, kvl, c->rope_d, c->q, nh, nope,
                                  c->qlat, c->cfg.rms_norm_eps));
    if (c->attn_mha) { /* K and V expanded from the latent rows (spans of MHA_SPAN), then attention: with every
                          layer's kept, only this pass's positions; else every key's again */
        const int64_t lk = c->kv_layers > 1 ? l : 0, mt = c->max_tokens;
        void *Kl = (char *)c->kb + 2 * (size_t)(lk * nh * mt * c->dqp), *Vl = (char *)c->vb + 2 * (size_t)(lk * nh * mt * vd);
        PDB_TRY(pdb_cuda_mha_pack_q(c->s, c->q, c->qlat, n, nh, nope, c->rope_d, kvl, row, c->qstride, c->qb));
        PDB_TRY(mark(c, ST_QKV));
        for (int64_t s0 = c->kv_layers > 1 ? p0 : 0; s0 < p0 + n; s0 += MHA_SPAN) {
            int64_t m = p0 + n - s0 < MHA_SPAN ? p0 + n - s0 : MHA_SPAN;
            PDB_TRY(pdb_cuda_gemm(&c->blas, c->dt, 1, m, nh * (nope + vd), kvl, 1.0f,
                                  (const char *)pg.base + c->esz * (size_t)(s0 * c->rowpad), c->rowpad, 0, L->kv_b, kvl, 0,
                                  0.0f, c->kvx, nh * (nope + vd), 0, 1));
            PDB_TRY(pdb_cuda_mha_pack_kv(c->s, c->kvx, &pg, s0, m, nh, nope, vd, kvl, c->rope_d, mt, Kl, Vl));
        }
        PDB_TRY(mark(c, ST_EXPAND));
        PDB_TRY(pdb_cuda_attention_mha(c->s, c->qb, Kl, Vl, c->qstride, mt, p0, n, nh, nope, c->rope_d, vd,
                                       c->scale, c->attn));
        PDB_TRY(mark(c, ST_ATTN));
        PDB_TRY(linear(c, c->attn, n, nh * vd, L->o_proj, c->H, 1.0f, c->h)); /* h += o_proj(attn) */
        return mark(c, ST_OPROJ);
    }
    /* qlat[t, h, :kvl] = q_nope[t, h] @ W_UK_h ([nope, kvl] rows of kv_b), batched over heads */
    const void *A;
    PDB_TRY(as_dt(c, c->q, n * nh * qk, &A));
    int64_t hs = (nope + vd) * kvl;
    PDB_TRY(mark(c, ST_QKV));
    if (c->exact) {
        PDB_TRY(mm(c, c->dt, n, kvl, nope, A, nh * qk, qk, L->ukt, nope, kvl * nope, 0.0f, c->qlat, nh * row, row, nh));
        PDB_TRY(pdb_cuda_attention_exact(c->s, c->qlat, &pg, p0, n, nh, kvl, row, c->scale, c->olat));
    } else {
        PDB_TRY(pdb_cuda_gemm(&c->blas, c->dt, 0, n, kvl, nope, 1.0f, A, nh * qk, qk, L->kv_b, kvl, hs, 0.0f, c->qlat,
                              nh * row, row, nh));
        if (c->attn_tc) PDB_TRY(pdb_cuda_attention_tc(c->s, c->qlat, &pg, p0, n, nh, kvl, row, c->scale, c->olat));
        else PDB_TRY(pdb_cuda_attention(c->s, c->qlat, &pg, p0, n, nh, kvl, row, c->scale, c->olat));
    }
    PDB_TRY(mark(c, ST_ATTN));
    /* attn[t, h] = olat[t, h] @ W_UV_h^T ([vd, kvl] rows of kv_b) */
    PDB_TRY(as_dt(c, c->olat, n * nh * kvl, &A));
    PDB_TRY(mm(c, c->dt, n, vd, kvl, A, nh * kvl, kvl, (char *)L->kv_b + c->esz * (size_t)(nope * kvl), kvl, hs, 0.0f,
               c->attn, nh * vd, vd, nh));
    PDB_TRY(linear(c, c->attn, n, nh * vd, L->o_proj, c->H, 1.0f, c->h)); /* h += o_proj(attn) */
    return mark(c, ST_OPROJ);
}

/* out [n, H] = down(silu(x gate^T) * (x up^T)), beta: 1 accumulates into out. */
static pdb_status mlp(cu_prefill *c, const float *x, int64_t n, const void *gate, const void *up, const void *down,
                      int64_t I, float beta, float *out) {
    PDB_TRY(linear(c, x, n, c->H, gate, I, 0.0f, c->g));
    PDB_TRY(linear(c, x, n, c->H, up, I, 0.0f, c->u));
    PDB_TRY(pdb_cuda_silu_mul(c->s, c->g, c->u, c->g, n * I));
    return linear(c, c->g, n, I, down, c->H, beta, out);
}

/* The routed experts on the grouped tensor-core GEMM: the device lays every expert's rows out
 * from a multiple of PDB_CUDA_MOE_TILE (padding rows gathered as zeros), in slot order inside an
 * expert as the cuBLAS path does, and lists each row tile's expert (pdb_cuda_moe_layout); gate,
 * up and down are then one launch each, sized for the most tiles any routing of n tokens needs
 * (the blocks of tiles past the layout's last return at once), so nothing waits for the host. */
static pdb_status moe_grouped(cu_prefill *c, const cu_layer *L, int64_t n) {
    const int64_t H = c->H, Im = c->Im, nt = pdb_cuda_moe_max_tiles(n * c->K, c->E), R = nt * PDB_CUDA_MOE_TILE;
    PDB_TRY(pdb_cuda_moe_layout(c->s, c->topk_idx, n, c->K, c->E, c->lay, c->row_src, c->slot_row, c->tile_e));
    PDB_TRY(pdb_cuda_moe_gather_bf16(c->s, c->xn, c->row_src, R, H, c->xe));
    PDB_TRY(mark(c, ST_LAYOUT));
    PDB_TRY(pdb_cuda_moe_gemm(c->s, c->xe, L->eg, c->g, c->tile_e, nt, Im, H));
    PDB_TRY(pdb_cuda_moe_gemm(c->s, c->xe, L->eu, c->u, c->tile_e, nt, Im, H));
    PDB_TRY(pdb_cuda_silu_mul_bf16(c->s, c->g, c->u, c->xe, R * Im)); /* xe's rows are consumed: reused */
    PDB_TRY(pdb_cuda_moe_gemm(c->s, c->xe, L->ed, c->ye, c->tile_e, nt, H, Im));
    PDB_TRY(mark(c, ST_EXPERTS));
    return PDB_OK;
}

/* The same layout's tiles as cuBLAS row-tile products (pdb_cuda_moe_tiles, the default): g and u bf16
 * (cuBLAS rounds each f32 sum once as it stores it), the SiLU-mul into xe, f32 ye. */
static pdb_status moe_tiles(cu_prefill *c, const cu_layer *L, int64_t n) {
    const int64_t H = c->H, Im = c->Im, nt = pdb_cuda_moe_max_tiles(n * c->K, c->E), R = nt * PDB_CUDA_MOE_TILE;
    PDB_TRY(pdb_cuda_moe_layout(c->s, c->topk_idx, n, c->K, c->E, c->lay, c->row_src, c->slot_row, c->tile_e));
    PDB_TRY(pdb_cuda_moe_gather_bf16(c->s, c->xn, c->row_src, R, H, c->xe));
    PDB_TRY(mark(c, ST_LAYOUT));
    const pdb_cuda_moe_tiles mt = {&c->blas, PDB_CUDA_DT_BF16, PDB_CUDA_DT_BF16, PDB_CUDA_DT_F32, c->E, H, Im, c->ntpad,
                                   c->xe, c->g, c->u, c->ye, c->ptrs, c->h_tiles};
    int64_t used = 0;
    PDB_TRY(pdb_cuda_moe_tiles_up(&mt, c->tile_e, nt, L->eg, L->eu, L->ed, &used));
    PDB_TRY(pdb_cuda_silu_mul_bf16in(c->s, c->g, c->u, c->xe, used * PDB_CUDA_MOE_TILE * Im)); /* xe's rows are consumed */
    PDB_TRY(pdb_cuda_moe_tiles_down(&mt, used));
    return mark(c, ST_EXPERTS);
}

/* The routed experts as cuBLAS calls per expert (f32, exact and the comparison path). */
static pdb_status moe_per_expert(cu_prefill *c, const cu_layer *L, int64_t n, const int64_t *cnt) {
    int64_t H = c->H, E = c->E, K = c->K, Im = c->Im;
    int32_t *row_src = c->h_rows, *slot_row = c->h_rows + c->Rmax;
    int64_t *fill = (int64_t *)malloc(sizeof(int64_t) * (size_t)E);
    if (!fill) return pdb_err_set(PDB_NOMEM, "moe fill");
    memcpy(fill, cnt, sizeof(int64_t) * (size_t)E);
    for (int64_t sl = 0; sl < n * K; sl++) { /* rows of an expert in slot order: fixed */
        int64_t r = fill[c->h_topk[sl]]++;
        row_src[r] = (int32_t)(sl / K);
        slot_row[sl] = (int32_t)r;
    }
    free(fill);
    PDB_CU(cudaMemcpyAsync(c->row_src, row_src, sizeof(int32_t) * (size_t)(n * K), cudaMemcpyHostToDevice, c->s));
    PDB_CU(cudaMemcpyAsync(c->slot_row, slot_row, sizeof(int32_t) * (size_t)(n * K), cudaMemcpyHostToDevice, c->s));
    PDB_TRY(pdb_cuda_gather(c->s, c->xn, c->row_src, n * K, H, c->xe));
    PDB_TRY(mark(c, ST_LAYOUT));
    const void *A;
    PDB_TRY(as_dt(c, c->xe, n * K * H, &A));
    int64_t per = Im * H;
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = cnt[e], m = cnt[e + 1] - cnt[e];
        if (!m) continue;
        const char *a = (const char *)A + c->esz * (size_t)(r0 * H);
        PDB_TRY(mm(c, c->dt, m, Im, H, a, H, 0, (char *)L->eg + c->esz * (size_t)(e * per), H, 0, 0.0f, c->g + r0 * Im,
                   Im, 0, 1));
        PDB_TRY(mm(c, c->dt, m, Im, H, a, H, 0, (char *)L->eu + c->esz * (size_t)(e * per), H, 0, 0.0f, c->u + r0 * Im,
                   Im, 0, 1));
    }
    PDB_TRY(pdb_cuda_silu_mul(c->s, c->g, c->u, c->g, n * K * Im));
    PDB_TRY(as_dt(c, c->g, n * K * Im, &A));
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = cnt[e], m = cnt[e + 1] - cnt[e];
        if (!m) continue;
        PDB_TRY(mm(c, c->dt, m, H, Im, (const char *)A + c->esz * (size_t)(r0 * Im), Im, 0,
                   (char *)L->ed + c->esz * (size_t)(e * per), Im, 0, 0.0f, c->ye + r0 * H, H, 0, 1));
    }
    return mark(c, ST_EXPERTS);
}

static pdb_status moe(cu_prefill *c, const cu_layer *L, int64_t n) {
    int64_t H = c->H, E = c->E, K = c->K;
    /* router in f32 in pdb_qmat_dot's order (dot32, every engine): from the same xn, the decoder's router
     * logits bit for bit, and a row's logits depend on that row alone */
    PDB_TRY(pdb_cuda_dot32(c->s, n, E, H, c->xn, H, 0, L->router, H, 0, c->probs, E, 0, 1, 0));
    pdb_cuda_route_cfg rc;
    rc.E = (int)E;
    rc.K = (int)K;
    rc.n_group = (int)(c->cfg.n_group > 0 ? c->cfg.n_group : 1);
    rc.topk_group = (int)c->cfg.topk_group;
    rc.group_limited = c->cfg.topk_method == PDB_TOPK_GROUP_LIMITED;
    rc.norm_topk_prob = c->cfg.norm_topk_prob;
    rc.routed_scaling_factor = (float)c->cfg.routed_scaling_factor;
    PDB_TRY(pdb_cuda_route(c->s, c->probs, c->rsc, c->topk_idx, c->topk_w, n, &rc));
    if (!c->moe_tc) PDB_CU(cudaMemcpyAsync(c->h_topk, c->topk_idx, sizeof(int32_t) * (size_t)(n * K), cudaMemcpyDeviceToHost, c->s));
    PDB_TRY(mark(c, ST_ROUTER));
    /* shared experts (device); the per-expert path's host orders the slots by expert meanwhile */
    if (c->cfg.n_shared_experts > 0) PDB_TRY(mlp(c, c->xn, n, L->sg, L->su, L->sd, c->Is, 0.0f, c->sh));
    PDB_TRY(mark(c, ST_SHARED));
    if (c->moe_tc) {
        PDB_TRY(c->moe_kernel ? moe_grouped(c, L, n) : moe_tiles(c, L, n));
    } else {
        PDB_CU(cudaStreamSynchronize(c->s));
        int64_t *cnt = c->h_cnt;
        memset(cnt, 0, sizeof(int64_t) * (size_t)(E + 1));
        for (int64_t sl = 0; sl < n * K; sl++) {
            int32_t e = c->h_topk[sl];
            if (e < 0 || e >= E) return pdb_err_set(PDB_CUDA, "moe: routed expert %d out of range (device fault?)", e);
            cnt[e + 1]++;
        }
        for (int64_t e = 0; e < E; e++) cnt[e + 1] += cnt[e]; /* cnt[e] = first slot-ordered row of expert e */
        PDB_TRY(moe_per_expert(c, L, n, cnt));
    }
    PDB_TRY(pdb_cuda_moe_combine(c->s, c->ye, c->slot_row, c->topk_w, c->cfg.n_shared_experts > 0 ? c->sh : NULL, n, K,
                                 H, c->h));
    return mark(c, ST_COMBINE);
}

/* The decoder's rope for positions p0..p0+n-1 (pdb_rope_angles: the cos/sin pdb_rope_apply uses),
 * to the device for pdb_cuda_hook_finish. */
static pdb_status upload_dec_rope(cu_prefill *c, int64_t p0, int64_t n) {
    for (int64_t i = 0; i < n; i++) pdb_rope_angles(&c->dec.rope, p0 + i, c->h_dcs + i * c->rope_d);
    PDB_CU(cudaMemcpyAsync(c->dcs, c->h_dcs, sizeof(float) * (size_t)(n * c->rope_d), cudaMemcpyHostToDevice, c->s));
    return PDB_OK;
}

/* One pass of n <= sub_max tokens at p0; capture rows to capture[(l * ncap + coff + i) * row]. */
static pdb_status forward_pass(cu_prefill *c, const int32_t *ids, int64_t p0, int64_t n, float *capture, int64_t ncap,
                               int64_t coff, float *logits) {
    int64_t H = c->H, half = c->rope_d / 2;
    memcpy(c->h_ids, ids, sizeof(int32_t) * (size_t)n);
    for (int64_t t = 0; t < n; t++) { /* cos/sin exactly as pdb_rope_apply computes them */
        float *cs = c->h_cs + t * c->rope_d;
        for (int64_t i = 0; i < half; i++) {
            float ang = c->rope.inv_freq[i] * (float)(p0 + t);
            cs[i] = cosf(ang) * c->rope.attn_factor;
            cs[half + i] = sinf(ang) * c->rope.attn_factor;
        }
    }
    PDB_CU(cudaMemcpyAsync(c->ids, c->h_ids, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, c->s));
    PDB_CU(cudaMemcpyAsync(c->cs, c->h_cs, sizeof(float) * (size_t)(n * c->rope_d), cudaMemcpyHostToDevice, c->s));
    if (capture) PDB_TRY(upload_dec_rope(c, p0, n));
    c->pf.n = 0;
    PDB_TRY(mark(c, ST_EMBED));
    PDB_TRY(pdb_cuda_embed(c->s, c->ids, c->embed, c->dt, n, H, c->h));
    PDB_TRY(mark(c, ST_EMBED));
    for (int64_t l = 0; l < c->nl; l++) {
        const cu_layer *L = &c->L[l];
        PDB_TRY(norm(c, c->h, H, L->attn_norm, c->xn, H, n, H));
        PDB_TRY(mark(c, ST_NORM));
        if (capture) { /* the decoder's finished rows, straight into the pinned capture block */
            float *rows = c->hook + l * c->sub_max * c->row;
            PDB_TRY(pdb_cuda_hook_dot(c->s, c->xn, L->dec_kva, n, c->row, H, rows));
            PDB_TRY(pdb_cuda_hook_finish(c->s, rows, n, c->row, c->kvl, c->rope_d, L->dec_norm, c->dcs,
                                         c->cfg.rms_norm_eps));
            /* the copy runs on s_cap once the rows are done, while the next layers compute */
            PDB_CU(cudaEventRecord(c->ev_rows[l], c->s));
            PDB_CU(cudaStreamWaitEvent(c->s_cap, c->ev_rows[l], 0));
            PDB_CU(cudaMemcpyAsync(capture + (l * ncap + coff) * c->row, rows, sizeof(float) * (size_t)(n * c->row),
                                   cudaMemcpyDeviceToHost, c->s_cap));
            PDB_TRY(mark(c, ST_HOOK));
        }
        PDB_TRY(attention(c, L, l, p0, n));
        PDB_TRY(norm(c, c->h, H, L->ffn_norm, c->xn, H, n, H));
        PDB_TRY(mark(c, ST_NORM));
        if (L->is_moe) PDB_TRY(moe(c, L, n));
        else {
            PDB_TRY(mlp(c, c->xn, n, L->gate, L->up, L->down, c->I, 1.0f, c->h));
            PDB_TRY(mark(c, ST_DENSE));
        }
    }
    if (logits) {
        PDB_TRY(norm(c, c->h + (n - 1) * H, H, c->final_norm, c->xn, H, 1, H));
        const void *A; /* one row in every pass, so one cuBLAS call: M never varies */
        PDB_TRY(as_dt(c, c->xn, H, &A));
        if (c->exact) PDB_TRY(mm(c, c->dt, 1, c->V, H, A, H, 0, c->lm_head, H, 0, 0.0f, c->logits, c->V, 0, 1));
        else PDB_TRY(pdb_cuda_gemm_whole(&c->blas, c->dt, 1, 1, c->V, H, 1.0f, A, H, 0, c->lm_head, H, 0, 0.0f, c->logits,
                                         c->V, 0, 1));
        PDB_CU(cudaMemcpyAsync(logits, c->logits, sizeof(float) * (size_t)c->V, cudaMemcpyDeviceToHost, c->s));
        PDB_TRY(mark(c, ST_HEAD));
    }
    PDB_CU(cudaStreamSynchronize(c->s));
    if (capture) PDB_CU(cudaStreamSynchronize(c->s_cap)); /* the block's rows are on the host */
    return pdb_cuda_prof_collect(&c->pf);
}

/* A captured span: inside one block, right after the rows captured so far or at a block's start. */
static pdb_status check_hook_span(const cu_prefill *c, int64_t pos0, int64_t n) {
    if (!c->blk || n <= 0 || pos0 / c->bs != (pos0 + n - 1) / c->bs || (pos0 != c->hooked && pos0 % c->bs))
        return pdb_err_set(PDB_INVALID, "cuda: capture of %lld..%lld (captured to %lld, blocks of %lld)", (long long)pos0,
                           (long long)(pos0 + n), (long long)c->hooked, (long long)c->bs);
    return PDB_OK;
}

extern "C" pdb_status pdb_cuda_prefill_forward(cu_prefill *c, const int32_t *ids, int64_t pos0, int64_t n, int capture_on,
                                               float *logits_last) {
    if (!c->cache) return pdb_err_set(PDB_INVALID, "cuda forward: no sequence (call begin first)");
    if (n <= 0) return pdb_err_set(PDB_INVALID, "cuda forward: no tokens");
    if (pos0 != c->len)
        return pdb_err_set(PDB_INVALID, "cuda forward: pos0 %lld but %lld positions already run", (long long)pos0,
                           (long long)c->len);
    if (pos0 + n > c->max_tokens)
        return pdb_err_set(PDB_TOO_LARGE, "cuda forward: %lld + %lld positions exceed the sequence's %lld",
                           (long long)pos0, (long long)n, (long long)c->max_tokens);
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= c->V)
            return pdb_err_set(PDB_INVALID, "cuda forward: token id %d at %lld outside the vocabulary (%lld)", ids[t],
                               (long long)t, (long long)c->V);
    if (capture_on) PDB_TRY(check_hook_span(c, pos0, n));
    /* rows of layer l, chunk row i go to blk[(l * bs + pos0 % bs + i) * row] */
    float *capture = capture_on ? c->blk + (pos0 % c->bs) * c->row : NULL;
    PDB_CU(cudaSetDevice(c->device));
    for (int64_t off = 0; off < n; off += c->sub_max) {
        int64_t m = n - off < c->sub_max ? n - off : c->sub_max;
        pdb_status s = forward_pass(c, ids + off, pos0 + off, m, capture, c->bs, off, off + m == n ? logits_last : NULL);
        if (s) return s;
        c->len += m;
    }
    if (capture_on) c->hooked = pos0 + n;
    return PDB_OK;
}

/* The hook alone on xn [L, n, H]: per layer, kva and the row math on the GPU in CR_ROWS pieces. */
extern "C" pdb_status pdb_cuda_prefill_hook_chunk(cu_prefill *c, const float *xn, int64_t pos0, int64_t n) {
    PDB_TRY(check_hook_span(c, pos0, n));
    PDB_CU(cudaSetDevice(c->device));
    for (int64_t l = 0; l < c->nl; l++)
        for (int64_t off = 0; off < n; off += CR_ROWS) {
            int64_t m = n - off < CR_ROWS ? n - off : CR_ROWS;
            const float *x = xn + (l * n + off) * c->H;
            PDB_CU(cudaMemcpyAsync(c->cr_x, x, sizeof(float) * (size_t)(m * c->H), cudaMemcpyHostToDevice, c->s));
            PDB_TRY(upload_dec_rope(c, pos0 + off, m));
            PDB_TRY(pdb_cuda_hook_dot(c->s, c->cr_x, c->L[l].dec_kva, m, c->row, c->H, c->cr_kva));
            PDB_TRY(pdb_cuda_hook_finish(c->s, c->cr_kva, m, c->row, c->kvl, c->rope_d, c->L[l].dec_norm, c->dcs,
                                         c->cfg.rms_norm_eps));
            PDB_CU(cudaMemcpyAsync(c->blk + (l * c->bs + (pos0 + off) % c->bs) * c->row, c->cr_kva,
                                   sizeof(float) * (size_t)(m * c->row), cudaMemcpyDeviceToHost, c->s));
            PDB_CU(cudaStreamSynchronize(c->s)); /* cr_x and dcs are reused by the next piece */
        }
    c->hooked = pos0 + n;
    return PDB_OK;
}

extern "C" int pdb_cuda_prefill_exact(const cu_prefill *c) { return c->exact; }

extern "C" pdb_status pdb_cuda_prefill_get_block(cu_prefill *c, int64_t b, void *buf) {
    if (!c->blk || c->hooked != (b + 1) * c->bs)
        return pdb_err_set(PDB_INVALID, "cuda: block %lld asked with %lld positions captured", (long long)b, (long long)c->hooked);
    memcpy(buf, c->blk, sizeof(float) * (size_t)(c->nl * c->bs * c->row));
    return PDB_OK;
}

/* ======================================= create / destroy =================================== */

extern "C" void pdb_cuda_prefill_free(cu_prefill *c) {
    if (c) {
        if (c->have_stream) cudaStreamSynchronize(c->s);
        if (c->have_stream) cudaStreamSynchronize(c->s_cap);
        cudaGetLastError();
        seq_free(c);
        for (int i = 0; i < c->n_ev_rows; i++) cudaEventDestroy(c->ev_rows[i]);
        free(c->ev_rows);
        list_free(&c->wts);
        if (c->have_blas) pdb_cuda_blas_close(&c->blas);
        if (c->have_stream) cudaStreamDestroy(c->s);
        if (c->have_stream) cudaStreamDestroy(c->s_cap);
        if (c->have_dec) pdb_v2_qweights_free(&c->dec);
        pdb_cuda_prof_free(&c->pf);
        pdb_rope_free(&c->rope);
        free(c->L);
        free(c);
    }
}

static pdb_status create_inner(cu_prefill *c, const pdb_config *cf, const pdb_st *engine, const pdb_st *decoder,
                               int device) {
    PDB_TRY(pdb_cuda_use_device(device, "cuda backend"));
    c->device = device;
    PDB_CU(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking));
    if (cudaStreamCreateWithFlags(&c->s_cap, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        cudaStreamDestroy(c->s);
        return pdb_err_set(PDB_CUDA, "cuda backend: capture stream");
    }
    c->have_stream = 1;
    c->ev_rows = (cudaEvent_t *)calloc((size_t)c->nl, sizeof(cudaEvent_t));
    if (!c->ev_rows) return pdb_err_set(PDB_NOMEM, "capture events");
    for (; c->n_ev_rows < c->nl; c->n_ev_rows++)
        PDB_CU(cudaEventCreateWithFlags(&c->ev_rows[c->n_ev_rows], cudaEventDisableTiming));
    PDB_TRY(pdb_cuda_blas_open(&c->blas, c->s));
    c->have_blas = 1;
    c->blas.tile_rows = c->gemm_rows;
    PDB_TRY(pdb_rope_init(&c->rope, &cf->rope, c->rope_d));
    c->scale = (float)pdb_config_softmax_scale(cf);
    PDB_TRY(pdb_v2_qweights_load(&c->dec, cf, decoder, 1));
    c->have_dec = 1;
    c->L = (cu_layer *)calloc((size_t)c->nl, sizeof(cu_layer));
    if (!c->L) return pdb_err_set(PDB_NOMEM, "layers");
    const pdb_st *st = engine;
    PDB_TRY(load_w(c, st, &c->embed, c->V, c->H, PDB_V2_T_EMBED, -1, 0));
    PDB_TRY(load_v(c, st, &c->final_norm, c->H, 0, PDB_V2_T_FINAL_NORM, -1, 0));
    char head[PDB_NAMES_MAX_LEN];
    if (cf->tie_word_embeddings && !pdb_st_find(st, pdb_v2_names_format(PDB_V2_T_LM_HEAD, -1, 0, head)))
        c->lm_head = c->embed;
    else PDB_TRY(load_w(c, st, &c->lm_head, c->V, c->H, PDB_V2_T_LM_HEAD, -1, 0));
    for (int l = 0; l < c->nl; l++) PDB_TRY(load_layer(c, st, l));
    PDB_TRY(load_hook(c));
    PDB_TRY(dalloc(&c->wts, &c->cr_x, sizeof(float) * (size_t)(CR_ROWS * c->H)));
    PDB_TRY(dalloc(&c->wts, &c->cr_kva, sizeof(float) * (size_t)(CR_ROWS * c->row)));
    PDB_TRY(pdb_cuda_prof_init(&c->pf, c->prof ? 16 * (int)c->nl + 8 : 0, stage_name, ST_N));
    return PDB_OK;
}

extern "C" pdb_status pdb_cuda_prefill_create(const pdb_config *cf, const pdb_st *engine, const pdb_st *decoder,
                                              int device, const pdb_cuda_prefill_opts *co, pdb_cuda_prefill **out) {
    *out = NULL;
    if (!cf || !engine || !decoder) return pdb_err_set(PDB_INVALID, "cuda backend: missing options");
    int64_t row = cf->kv_lora_rank + cf->qk_rope_head_dim;
    if (cf->kv_lora_rank > PDB_CUDA_MAX_KVL || row > PDB_CUDA_MAX_ROW || row % 4 || cf->qk_rope_head_dim % 2 ||
        cf->n_routed_experts > PDB_CUDA_MAX_EXPERTS || cf->n_group > 256)
        return pdb_err_set(PDB_UNSUPPORTED, "cuda backend: kv_lora_rank %lld (max %d), latent row %lld (max %d, a "
                           "multiple of 4), %lld experts (max %d) or %lld groups (max 256) outside its kernels",
                           (long long)cf->kv_lora_rank, PDB_CUDA_MAX_KVL, (long long)row, PDB_CUDA_MAX_ROW,
                           (long long)cf->n_routed_experts, PDB_CUDA_MAX_EXPERTS, (long long)cf->n_group);
    cu_prefill *c = (cu_prefill *)calloc(1, sizeof *c);
    if (!c) return pdb_err_set(PDB_NOMEM, "cuda backend");
    c->cfg = *cf;
    int prec = co ? (int)co->prec : PDB_CUDA_PREC_BF16;
    c->exact = prec == PDB_CUDA_PREC_EXACT;
    c->dt = prec == PDB_CUDA_PREC_F32 || c->exact ? PDB_CUDA_DT_F32 : PDB_CUDA_DT_BF16;
    c->esz = pdb_cuda_dt_size(c->dt);
    c->sub_cfg = co && co->sub_chunk > 0 ? co->sub_chunk : 8192;
    c->page = co && co->page_tokens > 0 ? co->page_tokens : 64;
    c->prof = co && co->profile;
    c->kv_recompute = co && co->mha_kv_recompute;
    c->moe_tc = prec == PDB_CUDA_PREC_BF16 && !(co && co->moe_cublas) && pdb_cuda_moe_tc_fits(cf->hidden_size,
                                                                                             cf->moe_intermediate_size);
    c->moe_kernel = co && co->moe_kernel;
    c->gemm_rows = !co || co->gemm_rows == 0 ? PDB_CUDA_GEMM_ROWS_DEFAULT : co->gemm_rows < 0 ? 0 : co->gemm_rows;
    c->H = cf->hidden_size; c->nh = cf->num_heads; c->nope = cf->qk_nope_head_dim; c->rope_d = cf->qk_rope_head_dim;
    c->qk = c->nope + c->rope_d; c->vd = cf->v_head_dim; c->kvl = cf->kv_lora_rank; c->row = row;
    c->qlr = cf->q_lora_rank; c->E = cf->n_routed_experts; c->K = cf->num_experts_per_tok;
    c->Im = cf->moe_intermediate_size; c->Is = c->Im * cf->n_shared_experts; c->I = cf->intermediate_size;
    c->V = cf->vocab_size; c->nl = cf->num_layers;
    pdb_status s = create_inner(c, cf, engine, decoder, device);
    if (s) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pdb_err_msg());
        pdb_cuda_prefill_free(c);
        return pdb_err_set(s, "%s", msg);
    }
    /* after create_inner selected the device: the tile's shared memory is checked against it */
    pdb_cuda_attn am = co ? co->attn : PDB_CUDA_ATTN_AUTO;
    c->attn_mha = prec == PDB_CUDA_PREC_BF16 && am == PDB_CUDA_ATTN_AUTO && pdb_cuda_mha_tc_fits(c->nope, c->rope_d, c->vd);
    c->attn_tc = prec == PDB_CUDA_PREC_BF16 && am != PDB_CUDA_ATTN_CUDA_CORES && pdb_cuda_mla_tc_fits(c->kvl, row);
    c->dqp = (c->nope + c->rope_d + 15) / 16 * 16;
    *out = c;
    return PDB_OK;
}
