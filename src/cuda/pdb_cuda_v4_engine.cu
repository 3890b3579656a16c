/* pdb_cuda_v4_engine: the device-resident DeepSeek-V4 prefill engine. Reading order: state ->
 * weights (create: from a loaded model, or seeded on the device as make-model's bf16 stream) ->
 * begin (the sequence's cache and scratch) -> one pass (per layer: hyper-connection pre-site ->
 * hook copy -> fused input products -> queries, K=V rows, compressors, indexer -> attention ->
 * grouped output products -> post-site; then the MoE sub-block the same way) -> forward (passes,
 * the hook fed as each layer's copy lands) -> head.
 * State and invariants:
 *   - every weight is on the device in dt (bf16 or f32) for the engine's life; activations are f32
 *     but for the products an elementwise kernel reads once (q_b, the experts' gate / up: dt, gdt),
 *     which a bf16 engine has cuBLAS store as bf16; per layer the
 *     products reading the attention input x are ONE matrix wa = [wq_a | wkv | comp.wkv |
 *     comp.wgate | icomp.wkv | icomp.wgate | idx_wproj] (rows in that order) and those reading
 *     the query latent ONE matrix wb = [wq_b | idx_wq_b];
 *   - the sequence's cache per layer: tail [W-1, hd] (the last W-1 K=V rows before the pass),
 *     hist [F, NA] (the fused products of the last F = 2 * max rate positions, what a compressor
 *     window straddling two passes reads), comp [cap/rate + 1, hd] and ikeys [cap/rate + 1, ihd]
 *     (entries in order), and for the bf16 attention comp16, comp's bf16 mirror; a pass puts hist
 *     in front of its own rows (xa row F + t is position p0 + t) and the tail in front of its K=V
 *     rows, and saves both after the layer;
 *   - within a pass nothing returns to the host but the hook's copies (pinned ring of HOOK_SLOTS
 *     layers, each reused only after the host ran the hook on it; with set_hook the decoder's
 *     hook products in pdb_qmat's order instead of the attention input, and the hook run by a
 *     thread of the pass, layers in order), the MoE's row-tile count (one
 *     synchronisation per MoE layer: the cuBLAS calls are issued from it) and the last logits;
 *   - all math is row-local or over a row's own cache rows (pdb_cuda_v4_kernels.h), the GEMMs run
 *     in M-invariant tiles (gemm_rows) and every grouped-expert call has one shape, so a
 *     position's values do not depend on how the prompt is cut into passes (tested bit for bit). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_util.h"
#include "pdb_cuda_v4_kernels.h"

extern "C" {
#include "pdb_cuda_v4_engine.h"
#include "pdb_dtype.h"
#include "pdb_make_model.h"
#include "pdb_rope.h"
#include "pdb_v4_names.h"
}

/* ======================================== state ======================================== */

/* HC_MIX_ROWS: the hc mixes' cuBLAS tile where pdb_cuda_v4_hc_mix does not fit; ROUTER_ROWS: the router's
 * f32 tile (cuBLAS runs it a tile per call, with split K: at 1024 rows a pass's router takes 0.76x the time of
 * 512-row tiles, the same bits, issue21_session18) */
enum { HOOK_SLOTS = 4, HC_MIX_ROWS = 1024, ROUTER_ROWS = 1024 };
/* the indexer's dot products per sub-block of tokens: at most this many bytes of f32 */
static const size_t IDX_DOTS_BYTES = (size_t)1 << 30;
/* the fused (tensor-core) indexer's score rows per sub-block: at most this many bytes */
static const size_t IDX_SCORE_BYTES = (size_t)256 << 20;

typedef struct v4_dlayer {
    int kind, hash, rope_c;      /* PDB_V4_ATTN_*, hash-routed MoE, uses the compress rope */
    int64_t rate, coff, D, ID, nihl, NA, NB; /* compressor rate / overlap, its width, the indexer's, fused widths */
    float *attn_norm, *ffn_norm, *q_norm, *kv_norm, *sink;
    float *hca_fn, *hca_base, *hca_scale, *hcf_fn, *hcf_base, *hcf_scale;
    float *c_ape, *c_norm, *ic_ape, *ic_norm;
    void *wa, *wb, *wo_a, *wo_b;
    float *gate, *gate_bias;     /* gate: the f32 engine's router */
    void *gate16;                /* bf16 engine: the router as pdb_cuda_split_bf16's [hi; lo], bf16 [2, E, H] */
    int gate_lo;                 /* some lo of gate16 is not zero (else the router was bf16 values: lo unused) */
    int32_t *tid2eid;
    void *w1, *w3, *w2, *sw1, *sw3, *sw2;
    float *hw;                   /* the capture hook's weights, f32 [NH, H]: the decoder's wkv | comp.wkv | comp.wgate |
                                    icomp.wkv | icomp.wgate (pdb_cuda_v4_engine_set_hook) */
    float *tail, *hist, *comp, *ikeys; /* sequence */
    void *comp16;                      /* bf16 mirror of comp (the bf16-keys attention) */
} v4_dlayer;

struct pdb_cuda_v4_engine {
    pdb_config cfg;
    pdb_cuda_dt dt;
    size_t esz;
    int attn_tc, attn_tc16, attn_wg, idx_tc, idx_mma_sync, prof, moe_kernel; /* tensor-core attention (f32 / bf16 key rows), indexer scores;
                                                           opts.moe_kernel */
    int device;
    cudaStream_t s, s_cap;
    int have_s, have_scap;
    pdb_cuda_blas blas;
    int have_blas;
    pdb_rope rope_main, rope_comp;
    int have_ropes;
    /* dims */
    int64_t H, hc, nh, hd, rd, qlr, G, olr, gin, W, nih, ihd, Ktop, E, Kx, I, V, L, F, NAmax, NBmax, rmax;
    int64_t sub_cfg, S, cap, len;
    int sub_auto; /* sub_cfg is the default: begin halves it, down to PDB_CUDA_V4_PASS_FALLBACK, while it does not fit */
    int64_t weight_bytes;
    void *embed, *head;
    float *norm, *hch_fn, *hch_base, *hch_scale;
    v4_dlayer *Ls;
    pdb_cuda_dlist wts, seq;
    /* sequence scratch (device) */
    float *hs, *x, *post, *comb, *rawmix, *xa, *qn, *q, *keys, *iq, *iw, *dots, *score, *o, *a, *out;
    float *lg, *wt, *sh, *ylast, *logits;
    /* products read once, by an elementwise kernel (the q heads' norm + rope, the SwiGLUs): of the engine's dt
     * (a bf16 engine has cuBLAS round them to bf16 as it stores them, half the bytes written and read), the
     * routed experts' g, u of gdt (dt, but f32 from the own grouped kernel, opts.moe_kernel) */
    void *qb, *g, *u, *gs, *us;
    pdb_cuda_dt gdt;
    /* the routed experts' output rows ye [Rmax, H], of ydt: bf16 where the cuBLAS tiles make them in a bf16
     * engine (cuBLAS rounds each f32 sum once as it stores it; read once, by the MoE post-site), else f32 */
    void *ye;
    pdb_cuda_dt ydt;
    float *cs_main, *cs_comp;    /* rope tables [cs_cap, rd], kept across sequences (rope_tables) */
    int64_t cs_cap;
    void *cvt, *xe, *ikb, *keys16; /* keys16: the pass's keys as bf16 (the bf16-keys attention) */
    void *x16;                     /* bf16 engine: x's bf16 copy from the pre-site, the operand of wa, the experts, shared */
    void *x16lo;                   /* bf16 engine: bf16(x - x16) from the MoE's pre-site, the router's second term */
    int32_t *ids, *sel, *nsel, *idx, *lay, *row_src, *slot_row, *tile_e;
    int64_t *lrow;
    int64_t Rmax, ntmax, ntpad, tb_max, cvt_n;
    const void **ptrs;           /* [8, ntpad] the expert tiles' operands (pdb_cuda_moe_tiles) */
    /* host */
    float *h_x[HOOK_SLOTS];
    cudaEvent_t ev_x[HOOK_SLOTS], ev_ready[HOOK_SLOTS]; /* slot's host copy done / device copy done */
    float *xh;                   /* device [HOOK_SLOTS, S, H]: the hooked inputs awaiting their copy */
    int have_ev;
    int hookless;                /* opts.hookless: no hook slots (xh, h_x, ph, h_p) */
    /* the hook's products on the device (set_hook): exact-order f32 on s_cap, a device and a pinned slot per hook slot */
    int hook_w;
    int64_t NHmax;
    float *ph, *h_p[HOOK_SLOTS];
    int32_t *h_ids, *h_tiles;
    pdb_cuda_prof pf;            /* opts.profile: 16 marks per layer and a few around */
};
typedef pdb_cuda_v4_engine eng;

enum { ST_EMBED, ST_HC, ST_HOOK, ST_QKV, ST_KVC, ST_INDEX, ST_ATTN, ST_OPROJ, ST_ROUTER, ST_EXPERTS, ST_SHARED,
       ST_HEAD, ST_N };
static const char *const stage_name[ST_N] = {"embed", "hc", "hook", "qkv", "kv_comp", "indexer", "attention",
                                             "o_proj", "router", "experts", "shared", "head"};

static pdb_status mark(eng *e, int st) { return pdb_cuda_prof_mark(&e->pf, e->s, st); }

extern "C" void pdb_cuda_v4_engine_profile_take(eng *e, char *buf, size_t n) {
    if (buf && n) buf[0] = 0;
    if (e) pdb_cuda_prof_take(&e->pf, buf, n);
}

/* ======================================== weights ======================================== */

/* Where a weight's values come from: a loaded qmat (dequantized exactly on the host) or
 * make-model's bf16 stream of (tensor name, seed) generated on the device. */
typedef struct wsrc {
    const pdb_qmat *q;       /* loaded */
    uint64_t s0;             /* seeded: the tensor's stream */
    double mean, std;
} wsrc;

/* make-model's normal stream (pdb_make_model.c): element pair i, i+1 (i even) from draws i + 1 and
 * i + 2 of splitmix64 started at s0, Box-Muller in double, rounded to f32 then bf16. The device's
 * log / cos / sin are within an ulp of glibc's, so an element differs from the file's only where
 * that ulp crosses a bf16 rounding boundary (measured: bench/results). */
__device__ static uint64_t mm_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void k_seed_fill(uint64_t s0, int64_t n, double mean, double std, int64_t off, int f32, void *dst) {
    const uint64_t STEP = 0x9E3779B97F4A7C15ull;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; 2 * p < n; p += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = 2 * p;
        uint64_t st = s0 + (uint64_t)i * STEP;
        double u1 = ((double)(mm_mix(st + STEP) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        double u2 = ((double)(mm_mix(st + 2 * STEP) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        double rad = sqrt(-2 * log(u1));
        float v[2] = {(float)(mean + std * rad * cos(2 * M_PI * u2)), (float)(mean + std * rad * sin(2 * M_PI * u2))};
        for (int k = 0; k < 2 && i + k < n; k++) {
            __nv_bfloat16 b = __float2bfloat16_rn(v[k]);
            if (f32) ((float *)dst)[off + i + k] = __bfloat162float(b);
            else ((__nv_bfloat16 *)dst)[off + i + k] = b;
        }
    }
}

/* dst (device, dt or f32 when as_f32) elements [off, off + rows * cols) = the source's values. */
static pdb_status put_w(eng *e, void *dst, int64_t off, const wsrc *w, int64_t rows, int64_t cols, int as_f32) {
    int f32 = as_f32 || e->dt == PDB_CUDA_DT_F32;
    size_t es = f32 ? 4 : 2;
    if (!w->q) {
        int64_t n = rows * cols, blocks = ((n + 1) / 2 + 255) / 256;
        k_seed_fill<<<(unsigned)(blocks < 65535 * 4 ? blocks : 65535 * 4), 256, 0, e->s>>>(w->s0, n, w->mean, w->std, off, f32, dst);
        PDB_CU_LAUNCH("seeded weights");
        return PDB_OK;
    }
    if (w->q->rows != rows || w->q->cols != cols)
        return pdb_err_set(PDB_INVALID, "v4 engine: a weight is [%lld, %lld], the config says [%lld, %lld]",
                           (long long)w->q->rows, (long long)w->q->cols, (long long)rows, (long long)cols);
    if (!f32 && w->q->fmt == PDB_QF_BF16) /* stored as the engine holds it: the bytes as they are */
        return pdb_cuda_to_device((char *)dst + 2 * (size_t)off, w->q->data, 2 * (size_t)(rows * cols), "v4 engine weights");
    int64_t band = (int64_t)((64 << 20) / (sizeof(float) * (size_t)cols)) + 1;
    band = band > rows ? rows : band;
    float *f = (float *)malloc(sizeof(float) * (size_t)(band * cols));
    uint16_t *b = f32 ? NULL : (uint16_t *)malloc(2 * (size_t)(band * cols));
    if (!f || (!f32 && !b)) { free(f); free(b); return pdb_err_set(PDB_NOMEM, "v4 engine: weight staging"); }
    pdb_status s = PDB_OK;
    for (int64_t r0 = 0; r0 < rows && !s; r0 += band) {
        int64_t nr = rows - r0 < band ? rows - r0 : band;
        for (int64_t r = 0; r < nr; r++) pdb_qmat_row_f32(w->q, r0 + r, f + r * cols);
        if (!f32) s = pdb_dtype_from_f32(PDB_DT_BF16, f, nr * cols, b);
        if (!s) s = pdb_cuda_to_device((char *)dst + es * (size_t)(off + r0 * cols), f32 ? (void *)f : (void *)b,
                                       es * (size_t)(nr * cols), "v4 engine weights");
    }
    free(f);
    free(b);
    return s;
}

/* A small f32 vector from the host (loaded) or the seeded stream (widened bf16, as the loader gives). */
static pdb_status put_v(eng *e, float **dst, const float *host, const wsrc *w, int64_t n, const char *what) {
    PDB_TRY(pdb_cuda_dalloc(&e->wts, dst, sizeof(float) * (size_t)n, what));
    e->weight_bytes += 4 * n;
    if (host) return pdb_cuda_to_device(*dst, host, sizeof(float) * (size_t)n, what);
    return put_w(e, *dst, 0, w, n, 1, 1);
}

static pdb_status alloc_w(eng *e, void **dst, int64_t count, const char *what) {
    PDB_TRY(pdb_cuda_dalloc(&e->wts, dst, e->esz * (size_t)count, what));
    e->weight_bytes += (int64_t)e->esz * count;
    return PDB_OK;
}

/* A weight source for tensor `role` of layer l (expert ex): the model's qmat, or the seeded
 * stream of its saved name with make-model's parameters. */
typedef struct seedctx { uint64_t seed; } seedctx;

static wsrc src_q(const pdb_qmat *q) { wsrc w = {q, 0, 0, 0}; return w; }

static wsrc src_seed(const seedctx *sc, int role, int64_t l, int64_t ex, double mean, double std) {
    char n[PDB_NAMES_MAX_LEN];
    pdb_names_format_saved(&pdb_v4_names_table, role, l, ex, n);
    wsrc w = {NULL, pdb_make_model_stream(n, sc->seed), mean, std};
    return w;
}

#define LIN(cols) 0.0, 1.0 / sqrt((double)(cols))

/* The per-layer tensors of both sources in one place: m (loaded) or sc (seeded). */
static pdb_status load_layer(eng *e, const pdb_v4_model *m, const seedctx *sc, int64_t l) {
    const pdb_config *c = &e->cfg;
    v4_dlayer *D = &e->Ls[l];
    const pdb_v4_layer *L = m ? &m->layers[l] : NULL;
    int64_t H = e->H, hc = e->hc, mix = (2 + hc) * hc, hd = e->hd, qlr = e->qlr, ihd = e->ihd;
    D->kind = (int)c->v4_attn[l];
    D->hash = c->v4_hash_moe[l];
    D->rate = D->kind == PDB_V4_ATTN_SLIDING ? 0 : pdb_config_v4_rate(c, l);
    D->coff = D->kind == PDB_V4_ATTN_CSA ? 2 : 1;
    D->rope_c = D->rate > 0;
    if (L) D->rope_c = L->rope == &m->rope_compress;
    D->D = D->rate ? D->coff * hd : 0;
    D->ID = D->kind == PDB_V4_ATTN_CSA ? 2 * ihd : 0;
    D->nihl = D->kind == PDB_V4_ATTN_CSA ? e->nih : 0;
    D->NA = qlr + hd + 2 * D->D + 2 * D->ID + D->nihl;
    D->NB = e->nh * hd + D->nihl * ihd;
#define V(field, hostp, role, n, mean, std) \
    { wsrc w_ = sc ? src_seed(sc, PDB_V4_T_##role, l, 0, mean, std) : src_q(NULL); \
      PDB_TRY(put_v(e, &D->field, L ? (hostp) : NULL, &w_, n, #role)); }
    V(attn_norm, L->attn_norm, ATTN_NORM, H, 1.0, 0.05);
    V(ffn_norm, L->ffn_norm, FFN_NORM, H, 1.0, 0.05);
    V(hca_fn, L->hc_attn_fn, HC_ATTN_FN, mix * hc * H, 0, 1.0 / sqrt((double)(hc * H)));
    V(hca_base, L->hc_attn_base, HC_ATTN_BASE, mix, 0, 0.1);
    V(hca_scale, L->hc_attn_scale, HC_ATTN_SCALE, 3, 1, 0.05);
    V(hcf_fn, L->hc_ffn_fn, HC_FFN_FN, mix * hc * H, 0, 1.0 / sqrt((double)(hc * H)));
    V(hcf_base, L->hc_ffn_base, HC_FFN_BASE, mix, 0, 0.1);
    V(hcf_scale, L->hc_ffn_scale, HC_FFN_SCALE, 3, 1, 0.05);
    V(q_norm, L->q_norm, Q_NORM, qlr, 1.0, 0.05);
    V(kv_norm, L->kv_norm, KV_NORM, hd, 1.0, 0.05);
    V(sink, L->sink, ATTN_SINK, e->nh, 0, 0.5);
    if (D->rate) {
        V(c_ape, L->comp.ape, COMP_APE, D->rate * D->D, 0, 0.1);
        V(c_norm, L->comp.norm, COMP_NORM, hd, 1.0, 0.05);
    }
    if (D->ID) {
        V(ic_ape, L->icomp.ape, IDX_COMP_APE, D->rate * D->ID, 0, 0.1);
        V(ic_norm, L->icomp.norm, IDX_COMP_NORM, ihd, 1.0, 0.05);
    }
#define W(dst, off, qm, role, ex, rows, cols) \
    { wsrc w_ = sc ? src_seed(sc, PDB_V4_T_##role, l, ex, LIN(cols)) : src_q(qm); \
      PDB_TRY(put_w(e, dst, off, &w_, rows, cols, 0)); }
    /* wa: the products of x */
    PDB_TRY(alloc_w(e, &D->wa, D->NA * H, "wa"));
    int64_t r = 0;
    W(D->wa, r * H, L ? &L->wq_a : NULL, WQ_A, 0, qlr, H); r += qlr;
    W(D->wa, r * H, L ? &L->wkv : NULL, WKV, 0, hd, H); r += hd;
    if (D->D) {
        W(D->wa, r * H, L ? &L->comp.wkv : NULL, COMP_WKV, 0, D->D, H); r += D->D;
        W(D->wa, r * H, L ? &L->comp.wgate : NULL, COMP_WGATE, 0, D->D, H); r += D->D;
    }
    if (D->ID) {
        W(D->wa, r * H, L ? &L->icomp.wkv : NULL, IDX_COMP_WKV, 0, D->ID, H); r += D->ID;
        W(D->wa, r * H, L ? &L->icomp.wgate : NULL, IDX_COMP_WGATE, 0, D->ID, H); r += D->ID;
        W(D->wa, r * H, L ? &L->idx_wproj : NULL, IDX_WPROJ, 0, e->nih, H); r += e->nih;
    }
    /* wb: the products of the query latent */
    PDB_TRY(alloc_w(e, &D->wb, D->NB * qlr, "wb"));
    W(D->wb, 0, L ? &L->wq_b : NULL, WQ_B, 0, e->nh * hd, qlr);
    if (D->ID) W(D->wb, e->nh * hd * qlr, L ? &L->idx_wq_b : NULL, IDX_WQ_B, 0, e->nih * ihd, qlr);
    PDB_TRY(alloc_w(e, &D->wo_a, e->G * e->olr * e->gin, "wo_a"));
    W(D->wo_a, 0, L ? &L->wo_a : NULL, WO_A, 0, e->G * e->olr, e->gin);
    PDB_TRY(alloc_w(e, &D->wo_b, H * e->G * e->olr, "wo_b"));
    W(D->wo_b, 0, L ? &L->wo_b : NULL, WO_B, 0, H, e->G * e->olr);
    /* MoE: the router in f32 (bf16 engine: split into bf16 hi and lo, the same 4 bytes a value), experts
     * stacked [E, I, H] / [E, H, I] */
    {
        wsrc w_ = sc ? src_seed(sc, PDB_V4_T_GATE, l, 0, LIN(H)) : src_q(L ? &L->gate : NULL);
        e->weight_bytes += 4 * e->E * H;
        if (e->dt == PDB_CUDA_DT_BF16) {
            PDB_TRY(pdb_cuda_dalloc(&e->wts, &D->gate16, 4 * (size_t)(e->E * H), "router (bf16 hi, lo)"));
            float *g32 = NULL;
            int *nz = NULL, hnz = 0;
            if (cudaMalloc((void **)&g32, sizeof(float) * (size_t)(e->E * H) + 16) != cudaSuccess)
                return pdb_err_set(PDB_NOMEM, "v4 engine: router staging (%lld values)", (long long)(e->E * H));
            nz = (int *)(g32 + e->E * H);
            pdb_status s = cudaMemsetAsync(nz, 0, sizeof(int), e->s) == cudaSuccess ? PDB_OK : pdb_err_set(PDB_CUDA, "router flag");
            if (!s) s = put_w(e, g32, 0, &w_, e->E, H, 1);
            if (!s) s = pdb_cuda_split_bf16(e->s, g32, e->E * H, D->gate16, (char *)D->gate16 + 2 * (size_t)(e->E * H), nz);
            if (!s && cudaMemcpyAsync(&hnz, nz, sizeof(int), cudaMemcpyDeviceToHost, e->s) != cudaSuccess)
                s = pdb_err_set(PDB_CUDA, "v4 engine: router split flag");
            if (!s && cudaStreamSynchronize(e->s) != cudaSuccess) s = pdb_err_set(PDB_CUDA, "v4 engine: router split");
            cudaFree(g32);
            PDB_TRY(s);
            D->gate_lo = hnz != 0;
        } else {
            PDB_TRY(pdb_cuda_dalloc(&e->wts, &D->gate, sizeof(float) * (size_t)(e->E * H), "router"));
            PDB_TRY(put_w(e, D->gate, 0, &w_, e->E, H, 1));
        }
    }
    if (D->hash) {
        int32_t *t = (int32_t *)malloc(sizeof(int32_t) * (size_t)(e->V * e->Kx));
        if (!t) return pdb_err_set(PDB_NOMEM, "v4 engine: tid2eid");
        if (L) memcpy(t, L->tid2eid, sizeof(int32_t) * (size_t)(e->V * e->Kx));
        else {
            char n[PDB_NAMES_MAX_LEN];
            pdb_names_format_saved(&pdb_v4_names_table, PDB_V4_T_GATE_TID2EID, l, 0, n);
            pdb_make_model_picks_fill(pdb_make_model_stream(n, sc->seed), e->V, e->Kx, e->E, t);
        }
        pdb_status s = pdb_cuda_dalloc(&e->wts, &D->tid2eid, sizeof(int32_t) * (size_t)(e->V * e->Kx), "tid2eid");
        if (!s) s = pdb_cuda_to_device(D->tid2eid, t, sizeof(int32_t) * (size_t)(e->V * e->Kx), "tid2eid");
        free(t);
        PDB_TRY(s);
        e->weight_bytes += 4 * e->V * e->Kx;
    } else
        V(gate_bias, L->gate_bias, GATE_BIAS, e->E, 0, 0.01);
    int64_t I = e->I;
    PDB_TRY(alloc_w(e, &D->w1, e->E * I * H, "experts w1"));
    PDB_TRY(alloc_w(e, &D->w3, e->E * I * H, "experts w3"));
    PDB_TRY(alloc_w(e, &D->w2, e->E * H * I, "experts w2"));
    for (int64_t x = 0; x < e->E; x++) {
        W(D->w1, x * I * H, L ? &L->w1[x] : NULL, EXPERT_W1, x, I, H);
        W(D->w3, x * I * H, L ? &L->w3[x] : NULL, EXPERT_W3, x, I, H);
        W(D->w2, x * H * I, L ? &L->w2[x] : NULL, EXPERT_W2, x, H, I);
    }
    if (c->n_shared_experts) {
        PDB_TRY(alloc_w(e, &D->sw1, I * H, "shared w1"));
        PDB_TRY(alloc_w(e, &D->sw3, I * H, "shared w3"));
        PDB_TRY(alloc_w(e, &D->sw2, H * I, "shared w2"));
        W(D->sw1, 0, L ? &L->sh_w1 : NULL, SHARED_W1, 0, I, H);
        W(D->sw3, 0, L ? &L->sh_w3 : NULL, SHARED_W3, 0, I, H);
        W(D->sw2, 0, L ? &L->sh_w2 : NULL, SHARED_W2, 0, H, I);
    }
#undef W
#undef V
    return PDB_OK;
}

static pdb_status load_globals(eng *e, const pdb_v4_model *m, const seedctx *sc) {
    int64_t H = e->H, hc = e->hc, V = e->V, l = -1;
#define V_(field, hostp, role, n, mean, std) \
    { wsrc w_ = sc ? src_seed(sc, PDB_V4_T_##role, l, 0, mean, std) : src_q(NULL); \
      PDB_TRY(put_v(e, &e->field, m ? (hostp) : NULL, &w_, n, #role)); }
    V_(norm, m->norm, NORM, H, 1.0, 0.05);
    V_(hch_fn, m->hc_head_fn, HC_HEAD_FN, hc * hc * H, 0, 1.0 / sqrt((double)(hc * H)));
    V_(hch_base, m->hc_head_base, HC_HEAD_BASE, hc, 0, 0.1);
    V_(hch_scale, m->hc_head_scale, HC_HEAD_SCALE, 1, 1, 0.05);
#undef V_
    wsrc we = sc ? src_seed(sc, PDB_V4_T_EMBED, l, 0, 0, 1) : src_q(&m->embed);
    PDB_TRY(alloc_w(e, &e->embed, V * H, "embedding"));
    PDB_TRY(put_w(e, e->embed, 0, &we, V, H, 0));
    if (m && m->head.data == m->embed.data) { e->head = e->embed; return PDB_OK; }
    wsrc wh = sc ? src_seed(sc, PDB_V4_T_HEAD, l, 0, LIN(H)) : src_q(&m->head);
    PDB_TRY(alloc_w(e, &e->head, V * H, "head"));
    return put_w(e, e->head, 0, &wh, V, H, 0);
}

/* ======================================== create / free ======================================== */

static void seq_free(eng *e) {
    pdb_cuda_dlist_free(&e->seq);
    for (int i = 0; i < HOOK_SLOTS; i++) {
        if (e->h_x[i]) cudaFreeHost(e->h_x[i]);
        if (e->h_p[i]) cudaFreeHost(e->h_p[i]);
        e->h_x[i] = e->h_p[i] = NULL;
    }
    if (e->h_ids) cudaFreeHost(e->h_ids);
    if (e->h_tiles) cudaFreeHost(e->h_tiles);
    e->h_ids = NULL;
    e->h_tiles = NULL;
    if (e->Ls)
        for (int64_t l = 0; l < e->L; l++) {
            e->Ls[l].tail = e->Ls[l].hist = e->Ls[l].comp = e->Ls[l].ikeys = NULL;
            e->Ls[l].comp16 = NULL;
        }
    e->cap = e->len = 0;
}

extern "C" void pdb_cuda_v4_engine_free(eng *e) {
    if (!e) return;
    if (e->have_s) cudaStreamSynchronize(e->s);
    seq_free(e);
    pdb_cuda_dlist_free(&e->wts);
    cudaFree(e->cs_main);
    cudaFree(e->cs_comp);
    free(e->Ls);
    if (e->have_blas) pdb_cuda_blas_close(&e->blas);
    if (e->have_ev)
        for (int i = 0; i < HOOK_SLOTS; i++) { cudaEventDestroy(e->ev_x[i]); cudaEventDestroy(e->ev_ready[i]); }
    pdb_cuda_prof_free(&e->pf);
    if (e->have_scap) cudaStreamDestroy(e->s_cap);
    if (e->have_s) cudaStreamDestroy(e->s);
    if (e->have_ropes) {
        pdb_rope_free(&e->rope_main);
        pdb_rope_free(&e->rope_comp);
    }
    cudaGetLastError();
    free(e);
}

static pdb_status create_inner(eng *e, const pdb_config *c, const pdb_v4_model *m, const seedctx *sc, int device,
                               const pdb_cuda_v4_engine_opts *o) {
    pdb_cuda_v4_engine_opts def = {PDB_CUDA_PREC_BF16, 0, 0, 0, 0, 0};
    if (!o) o = &def;
    if (o->prec == PDB_CUDA_PREC_EXACT)
        return pdb_err_set(PDB_INVALID, "v4 engine: precision exact is the provider path (pdb_cuda_v4), not this engine");
    if (c->arch != PDB_ARCH_DEEPSEEK_V4) return pdb_err_set(PDB_INVALID, "v4 engine: the model is not DeepSeek-V4");
    if (m && m->part != PDB_V4_PART_ALL)
        return pdb_err_set(PDB_INVALID, "v4 engine: the model holds only the capture hook's weights (pdb_v4_load_part)");
    e->cfg = *c;
    e->dt = o->prec == PDB_CUDA_PREC_F32 ? PDB_CUDA_DT_F32 : PDB_CUDA_DT_BF16;
    e->esz = pdb_cuda_dt_size(e->dt);
    e->prof = o->profile;
    e->hookless = o->hookless;
    e->moe_kernel = o->moe_kernel;
    e->gdt = e->dt == PDB_CUDA_DT_BF16 && !e->moe_kernel ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32;
    e->ydt = e->gdt == PDB_CUDA_DT_BF16 && c->hc_mult == 4 && c->hidden_size % 4 == 0 ? PDB_CUDA_DT_BF16 : PDB_CUDA_DT_F32;
    e->device = device;
    e->sub_cfg = o->sub_chunk > 0 ? o->sub_chunk : PDB_CUDA_V4_PASS_DEFAULT;
    e->sub_auto = o->sub_chunk <= 0;
    e->H = c->hidden_size; e->hc = c->hc_mult; e->nh = c->num_heads; e->hd = c->head_dim;
    e->rd = c->qk_rope_head_dim; e->qlr = c->q_lora_rank; e->G = c->o_groups; e->olr = c->o_lora_rank;
    e->gin = e->nh * e->hd / (e->G ? e->G : 1); e->W = c->sliding_window; e->nih = c->index_n_heads;
    e->ihd = c->index_head_dim; e->Ktop = c->index_topk; e->E = c->n_routed_experts; e->Kx = c->num_experts_per_tok;
    e->I = c->moe_intermediate_size; e->V = c->vocab_size; e->L = c->num_layers;
    if (e->hc > 8 || e->G <= 0 || e->nh * e->hd % e->G || e->W < 1 || e->E > PDB_CUDA_MAX_EXPERTS || e->Kx > 16 ||
        e->rd > e->hd || e->rd % 2 || (e->rd > e->ihd && e->nih))
        return pdb_err_set(PDB_UNSUPPORTED, "v4 engine: hc_mult %lld (<= 8), o_groups %lld, experts %lld (<= %d), "
                           "experts per token %lld (<= 16) or rotary dims %lld are outside what the kernels take",
                           (long long)e->hc, (long long)e->G, (long long)e->E, PDB_CUDA_MAX_EXPERTS, (long long)e->Kx,
                           (long long)e->rd);
    if (c->n_shared_experts > 1)
        return pdb_err_set(PDB_UNSUPPORTED, "v4 engine: n_shared_experts %lld (one is supported)", (long long)c->n_shared_experts);
    e->attn_tc = e->dt == PDB_CUDA_DT_BF16 && pdb_cuda_v4_attention_tc_fits(e->hd);
    e->attn_tc16 = e->dt == PDB_CUDA_DT_BF16 && !o->attn_f32_keys && pdb_cuda_v4_attention_tc16_fits(e->hd);
    e->attn_wg = e->attn_tc16 && !o->attn_mma_sync && pdb_cuda_v4_attention_wg_fits(e->hd);
    e->idx_mma_sync = o->attn_mma_sync;
    e->idx_tc = e->dt == PDB_CUDA_DT_BF16 && e->nih > 0 && pdb_cuda_v4_index_scores_tc_fits(e->nih, e->ihd);
    PDB_TRY(pdb_cuda_use_device(device, "v4 engine"));
    PDB_CU(cudaStreamCreateWithFlags(&e->s, cudaStreamNonBlocking));
    e->have_s = 1;
    PDB_CU(cudaStreamCreateWithFlags(&e->s_cap, cudaStreamNonBlocking));
    e->have_scap = 1;
    for (int i = 0; i < HOOK_SLOTS; i++) {
        PDB_CU(cudaEventCreateWithFlags(&e->ev_x[i], cudaEventDisableTiming));
        PDB_CU(cudaEventCreateWithFlags(&e->ev_ready[i], cudaEventDisableTiming));
    }
    e->have_ev = 1;
    PDB_TRY(pdb_cuda_blas_open(&e->blas, e->s));
    e->have_blas = 1;
    e->blas.tile_rows = o->gemm_rows < 0 ? 0 : o->gemm_rows > 0 ? o->gemm_rows : PDB_CUDA_V4_GEMM_ROWS_DEFAULT;
    e->blas.tiles_sequential = o->gemm_tiles_sequential;
    PDB_TRY(pdb_cuda_prof_init(&e->pf, e->prof ? 16 * (int)e->L + 16 : 0, stage_name, ST_N));
    PDB_TRY(pdb_rope_init(&e->rope_main, &c->rope, e->rd));
    pdb_status rs = pdb_rope_init(&e->rope_comp, &c->rope_compress, e->rd);
    if (rs) { pdb_rope_free(&e->rope_main); return rs; }
    e->have_ropes = 1;
    e->Ls = (v4_dlayer *)calloc((size_t)e->L, sizeof *e->Ls);
    if (!e->Ls) return pdb_err_set(PDB_NOMEM, "v4 engine: layers");
    PDB_TRY(load_globals(e, m, sc));
    for (int64_t l = 0; l < e->L; l++) {
        pdb_status s = load_layer(e, m, sc, l);
        if (s) return pdb_err_wrap(s, "v4 engine: layer %lld", (long long)l);
        const v4_dlayer *D = &e->Ls[l];
        if (D->rate > e->rmax) e->rmax = D->rate;
        if (D->NA > e->NAmax) e->NAmax = D->NA;
        if (D->NB > e->NBmax) e->NBmax = D->NB;
    }
    e->F = 2 * e->rmax;
    PDB_CU(cudaStreamSynchronize(e->s));
    return PDB_OK;
}

static pdb_status create_common(const pdb_config *c, const pdb_v4_model *m, const seedctx *sc, int device,
                                const pdb_cuda_v4_engine_opts *o, eng **out) {
    *out = NULL;
    eng *e = (eng *)calloc(1, sizeof *e);
    if (!e) return pdb_err_set(PDB_NOMEM, "v4 engine");
    pdb_status s = create_inner(e, c, m, sc, device, o);
    if (s) { pdb_cuda_v4_engine_free(e); return s; }
    *out = e;
    return PDB_OK;
}

extern "C" pdb_status pdb_cuda_v4_engine_create(const pdb_v4_model *m, int device, const pdb_cuda_v4_engine_opts *o,
                                                eng **out) {
    return create_common(&m->cfg, m, NULL, device, o, out);
}

extern "C" pdb_status pdb_cuda_v4_engine_create_seeded(const pdb_config *cfg, uint64_t seed, int device,
                                                       const pdb_cuda_v4_engine_opts *o, eng **out) {
    seedctx sc = {seed};
    return create_common(cfg, NULL, &sc, device, o, out);
}

extern "C" int64_t pdb_cuda_v4_engine_len(const eng *e) { return e->len; }
extern "C" int64_t pdb_cuda_v4_engine_pass_tokens(const eng *e) { return e->cap ? e->S : 0; }
extern "C" int64_t pdb_cuda_v4_engine_weight_bytes(const eng *e) { return e->weight_bytes; }
extern "C" void pdb_cuda_v4_engine_gemm_forms(const eng *e, int64_t *checked, int64_t *rejected) {
    *checked = e->blas.forms_checked, *rejected = e->blas.forms_rejected;
}

/* ======================================== the capture hook's products ======================================== */

__global__ void k_widen_bf16(const __nv_bfloat16 *src, int64_t n, float *dst) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* The hook's widths of layer l: wkv, the compressor's and the indexer compressor's (pdb_v4_feed_rows). */
static int64_t hook_width(const eng *e, const v4_dlayer *D) { return e->hd + 2 * D->D + 2 * D->ID; }

extern "C" pdb_status pdb_cuda_v4_engine_set_hook(eng *e, const pdb_v4_model *dm) {
    if (e->cap) return pdb_err_set(PDB_INVALID, "v4 engine: set_hook during a sequence (end it first)");
    if (dm) {
        const pdb_config *c = &dm->cfg;
        int same = c->num_layers == e->L && c->hidden_size == e->H && c->head_dim == e->hd && c->index_head_dim == e->ihd;
        for (int64_t l = 0; same && l < e->L; l++)
            same = (int)c->v4_attn[l] == e->Ls[l].kind && dm->layers[l].rate == e->Ls[l].rate;
        if (!same)
            return pdb_err_set(PDB_INVALID, "v4 engine: the decoder's model (%lld layers, hidden %lld) is not the engine's shape "
                               "(%lld layers, hidden %lld, the same layer kinds and rates)", (long long)c->num_layers,
                               (long long)c->hidden_size, (long long)e->L, (long long)e->H);
    }
    PDB_CU(cudaSetDevice(e->device));
    const int64_t H = e->H, hd = e->hd;
    for (int64_t l = 0; l < e->L; l++) {
        v4_dlayer *D = &e->Ls[l];
        int64_t NH = hook_width(e, D);
        if (!D->hw) {
            PDB_TRY(pdb_cuda_dalloc(&e->wts, &D->hw, sizeof(float) * (size_t)(NH * H), "hook weights"));
            e->weight_bytes += 4 * NH * H;
        }
        if (!dm) { /* the engine's own (the fused wa's rows after wq_a are the hook's, in its order) */
            if (e->dt == PDB_CUDA_DT_F32)
                PDB_CU(cudaMemcpyAsync(D->hw, (const float *)D->wa + e->qlr * H, sizeof(float) * (size_t)(NH * H),
                                       cudaMemcpyDeviceToDevice, e->s));
            else {
                k_widen_bf16<<<1024, 256, 0, e->s>>>((const __nv_bfloat16 *)D->wa + e->qlr * H, NH * H, D->hw);
                PDB_CU_LAUNCH("hook weights");
            }
        } else {
            const pdb_v4_layer *L = &dm->layers[l];
            const pdb_qmat *parts[5] = {&L->wkv, &L->comp.wkv, &L->comp.wgate, &L->icomp.wkv, &L->icomp.wgate};
            const int64_t rows[5] = {hd, D->D, D->D, D->ID, D->ID};
            for (int k = 0, r = 0; k < 5; r += (int)rows[k], k++) {
                if (!rows[k]) continue;
                wsrc w = src_q(parts[k]);
                pdb_status st = put_w(e, D->hw, r * H, &w, rows[k], H, 1);
                if (st) return pdb_err_wrap(st, "v4 engine: the decoder's hook weights, layer %lld", (long long)l);
            }
        }
        if (NH > e->NHmax) e->NHmax = NH;
    }
    PDB_CU(cudaStreamSynchronize(e->s));
    e->hook_w = 1;
    return PDB_OK;
}

/* Layer l's hook products of x [n, H] (device) into the device slot p (the parts back to back,
 * each [n, width]) on s_cap, in pdb_qmat's order (the CPU hook's bits, at any n: chunked = one
 * shot), then to the pinned host slot hp. */
static pdb_status hook_products(eng *e, const v4_dlayer *D, const float *x, int64_t n, float *p, float *hp) {
    const int64_t H = e->H, w[5] = {e->hd, D->D, D->D, D->ID, D->ID};
    for (int k = 0, r = 0; k < 5; r += (int)w[k], k++)
        if (w[k])
            PDB_TRY(pdb_cuda_v4_mm_exact(e->s_cap, x, H, D->hw + r * H, p + n * r, w[k], n, w[k], H));
    PDB_CU(cudaMemcpyAsync(hp, p, sizeof(float) * (size_t)(n * hook_width(e, D)), cudaMemcpyDeviceToHost, e->s_cap));
    return PDB_OK;
}

/* The feed rows of a host slot holding hook_products' parts for n rows. */
static pdb_v4_feed_rows hook_rows(const eng *e, const v4_dlayer *D, float *hp, int64_t n) {
    pdb_v4_feed_rows r;
    r.kv = hp;
    r.kvp = hp + n * e->hd;
    r.gp = r.kvp + n * D->D;
    r.ikvp = r.gp + n * D->D;
    r.igp = r.ikvp + n * D->ID;
    return r;
}

extern "C" pdb_status pdb_cuda_v4_engine_hook_products(eng *e, int64_t l, const float *x, int64_t n, pdb_v4_feed_rows *out) {
    if (!e->hook_w || !e->cap || e->hookless)
        return pdb_err_set(PDB_INVALID, "v4 engine: hook products without set_hook and begin, or on a hookless engine");
    if (l < 0 || l >= e->L || n <= 0 || n > e->S)
        return pdb_err_set(PDB_INVALID, "v4 engine: hook products of layer %lld, %lld rows (at most %lld)", (long long)l,
                           (long long)n, (long long)e->S);
    PDB_CU(cudaSetDevice(e->device));
    const v4_dlayer *D = &e->Ls[l];
    PDB_CU(cudaMemcpyAsync(e->xh, x, sizeof(float) * (size_t)(n * e->H), cudaMemcpyHostToDevice, e->s_cap));
    PDB_TRY(hook_products(e, D, e->xh, n, e->ph, e->h_p[0]));
    PDB_CU(cudaStreamSynchronize(e->s_cap));
    *out = hook_rows(e, D, e->h_p[0], n);
    return PDB_OK;
}

/* ======================================== begin ======================================== */

template <typename T> static pdb_status hpin(T **p, size_t bytes) {
    void *v = NULL;
    PDB_CU(cudaMallocHost(&v, bytes ? bytes : 16));
    *p = (T *)v;
    return PDB_OK;
}

/* cos/sin tables of a rope for positions 0..n-1 (pdb_rope_angles: pdb_rope_apply's factors). */
static pdb_status rope_table(eng *e, const pdb_rope *r, int64_t n, float **dst) {
    PDB_CU(cudaMalloc((void **)dst, sizeof(float) * (size_t)(n * e->rd)));
    float *h = (float *)malloc(sizeof(float) * (size_t)(n * e->rd));
    if (!h) return pdb_err_set(PDB_NOMEM, "v4 engine: rope table");
    for (int64_t p = 0; p < n; p++) pdb_rope_angles(r, p, h + p * e->rd);
    pdb_status s = pdb_cuda_to_device(*dst, h, sizeof(float) * (size_t)(n * e->rd), "rope table");
    free(h);
    return s;
}

/* Both ropes' tables for at least cap positions: kept from sequence to sequence (they depend on
 * the position alone), made again only for a longer sequence. */
static pdb_status rope_tables(eng *e, int64_t cap) {
    if (cap <= e->cs_cap) return PDB_OK;
    cudaFree(e->cs_main);
    cudaFree(e->cs_comp);
    e->cs_main = e->cs_comp = NULL;
    e->cs_cap = 0;
    PDB_TRY(rope_table(e, &e->rope_main, cap, &e->cs_main));
    PDB_TRY(rope_table(e, &e->rope_comp, cap, &e->cs_comp));
    e->cs_cap = cap;
    return PDB_OK;
}

static pdb_status begin_inner(eng *e, int64_t cap, int64_t sub) {
    PDB_CU(cudaSetDevice(e->device));
    e->cap = cap;
    int64_t S = cap < sub ? cap : sub, H = e->H, hd = e->hd, I = e->I, Kx = e->Kx, E = e->E;
    e->S = S;
    const size_t f = sizeof(float);
    pdb_cuda_dlist *q = &e->seq;
    PDB_TRY(rope_tables(e, cap));
    for (int64_t l = 0; l < e->L; l++) {
        v4_dlayer *D = &e->Ls[l];
        PDB_TRY(pdb_cuda_dalloc(q, &D->tail, f * (size_t)((e->W - 1 > 0 ? e->W - 1 : 1) * hd), "window tail"));
        if (D->rate) {
            int64_t ne = cap / D->rate + 1;
            PDB_TRY(pdb_cuda_dalloc(q, &D->hist, f * (size_t)(e->F * D->NA), "compressor history"));
            PDB_TRY(pdb_cuda_dalloc(q, &D->comp, f * (size_t)(ne * hd), "compressed entries"));
            PDB_CU(cudaMemsetAsync(D->hist, 0, f * (size_t)(e->F * D->NA), e->s));
            PDB_CU(cudaMemsetAsync(D->comp, 0, f * (size_t)(ne * hd), e->s));
            if (e->attn_tc16) {
                PDB_TRY(pdb_cuda_dalloc(q, &D->comp16, 2 * (size_t)(ne * hd), "compressed entries (bf16)"));
                PDB_CU(cudaMemsetAsync(D->comp16, 0, 2 * (size_t)(ne * hd), e->s));
            }
            if (D->ID) {
                PDB_TRY(pdb_cuda_dalloc(q, &D->ikeys, f * (size_t)(ne * e->ihd), "indexer keys"));
                PDB_CU(cudaMemsetAsync(D->ikeys, 0, f * (size_t)(ne * e->ihd), e->s));
            }
        }
    }
    PDB_TRY(pdb_cuda_dalloc(q, &e->hs, f * (size_t)(S * e->hc * H), "streams"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->x, f * (size_t)(S * H), "x"));
    if (e->dt == PDB_CUDA_DT_BF16) {
        PDB_TRY(pdb_cuda_dalloc(q, &e->x16, 2 * (size_t)(S * H), "x (bf16)"));
        PDB_TRY(pdb_cuda_dalloc(q, &e->x16lo, 2 * (size_t)(S * H), "x (bf16 low half)"));
    }
    PDB_TRY(pdb_cuda_dalloc(q, &e->post, f * (size_t)(S * e->hc), "post"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->comb, f * (size_t)(S * e->hc * e->hc), "comb"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->rawmix, f * (size_t)(S * (2 + e->hc) * e->hc), "hc mixes"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->xa, f * (size_t)((e->F + S) * e->NAmax), "fused products"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->qn, f * (size_t)(S * e->qlr), "q latent"));
    const size_t psz = e->esz, gsz = pdb_cuda_dt_size(e->gdt);
    PDB_TRY(pdb_cuda_dalloc(q, &e->qb, psz * (size_t)(S * e->NBmax), "q products"));
    /* q: bf16 where the attention reads the bf16 mirrors (heads_norm_rope_bf16 writes its operand), else f32;
     * o: only where the attention writes f32 rows (the bf16 mirrors' kernels store O into the staging buffer) */
    PDB_TRY(pdb_cuda_dalloc(q, &e->q, (e->attn_tc16 ? 2 : f) * (size_t)(S * e->nh * hd), "q"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->keys, f * (size_t)((e->W - 1 + S) * hd), "keys"));
    if (e->attn_tc16) PDB_TRY(pdb_cuda_dalloc(q, &e->keys16, 2 * (size_t)((e->W - 1 + S) * hd), "keys (bf16)"));
    if (!e->attn_tc16) PDB_TRY(pdb_cuda_dalloc(q, &e->o, f * (size_t)(S * e->nh * hd), "attention out"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->a, psz * (size_t)(S * e->G * e->olr), "o_a")); /* of dt (wo_a's product) */
    PDB_TRY(pdb_cuda_dalloc(q, &e->out, f * (size_t)(S * H), "sub-block out"));
    if (e->nih) {
        int64_t nvmax = cap / 4 + 1;
        for (int64_t l = 0; l < e->L; l++)
            if (e->Ls[l].ID) nvmax = cap / e->Ls[l].rate + 1;
        /* sub-blocks of tokens: the dots buffer (GEMM path) or the score rows (fused path) within bounds */
        e->tb_max = (int64_t)((e->idx_tc ? IDX_SCORE_BYTES / f : IDX_DOTS_BYTES / f / (size_t)e->nih) / (size_t)nvmax);
        e->tb_max = e->tb_max < 1 ? 1 : e->tb_max > S ? S : e->tb_max;
        PDB_TRY(pdb_cuda_dalloc(q, &e->iq, f * (size_t)(S * e->nih * e->ihd), "index queries"));
        PDB_TRY(pdb_cuda_dalloc(q, &e->iw, f * (size_t)(S * e->nih), "index weights"));
        if (!e->idx_tc) PDB_TRY(pdb_cuda_dalloc(q, &e->dots, f * (size_t)(e->tb_max * e->nih * nvmax), "index dots"));
        PDB_TRY(pdb_cuda_dalloc(q, &e->score, f * (size_t)(e->tb_max * nvmax), "index scores"));
        PDB_TRY(pdb_cuda_dalloc(q, &e->sel, sizeof(int32_t) * (size_t)(S * e->Ktop), "index picks"));
        PDB_TRY(pdb_cuda_dalloc(q, &e->nsel, sizeof(int32_t) * (size_t)S, "index pick counts"));
        if (e->dt == PDB_CUDA_DT_BF16) PDB_TRY(pdb_cuda_dalloc(q, &e->ikb, 2 * (size_t)(nvmax * e->ihd), "index keys bf16"));
    }
    PDB_TRY(pdb_cuda_dalloc(q, &e->lg, f * (size_t)(S * E), "router logits"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->wt, f * (size_t)(S * Kx), "routing weights"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->idx, sizeof(int32_t) * (size_t)(S * Kx), "routing picks"));
    e->ntmax = pdb_cuda_moe_max_tiles(S * Kx, E);
    e->ntpad = pdb_cuda_moe_tiles_pad(e->ntmax);
    e->Rmax = e->ntpad * PDB_CUDA_MOE_TILE;
    PDB_TRY(pdb_cuda_dalloc(q, &e->ptrs, sizeof(void *) * (size_t)(8 * e->ntpad), "expert pointers"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->lay, sizeof(int32_t) * (size_t)(S * Kx + 2 * E), "moe layout scratch"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->row_src, sizeof(int32_t) * (size_t)e->Rmax, "moe rows"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->slot_row, sizeof(int32_t) * (size_t)(S * Kx), "moe slots"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->tile_e, sizeof(int32_t) * (size_t)e->ntmax, "moe tiles"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->g, gsz * (size_t)(e->Rmax * I), "expert gate"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->u, gsz * (size_t)(e->Rmax * I), "expert up"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->ye, pdb_cuda_dt_size(e->ydt) * (size_t)(e->Rmax * H), "expert out"));
    int64_t wide = H > I ? H : I;
    PDB_TRY(pdb_cuda_dalloc(q, &e->xe, (e->dt == PDB_CUDA_DT_F32 ? f : 2) * (size_t)(e->Rmax * wide), "expert rows"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->sh, f * (size_t)(S * H), "shared out"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->gs, psz * (size_t)(S * I), "shared gate"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->us, psz * (size_t)(S * I), "shared up"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->ylast, f * (size_t)H, "head input"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->logits, f * (size_t)e->V, "logits"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->ids, sizeof(int32_t) * (size_t)S, "ids"));
    PDB_TRY(pdb_cuda_dalloc(q, &e->lrow, sizeof(int64_t), "last row"));
    int64_t cand[] = {S * H, S * e->qlr, S * e->nh * hd, S * e->G * e->olr, S * I, S * e->nih * e->ihd};
    e->cvt_n = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) e->cvt_n = cand[i] > e->cvt_n ? cand[i] : e->cvt_n;
    if (e->dt == PDB_CUDA_DT_BF16) PDB_TRY(pdb_cuda_dalloc(q, &e->cvt, 2 * (size_t)e->cvt_n, "bf16 staging"));
    if (!e->hookless) {
        for (int i = 0; i < HOOK_SLOTS; i++) PDB_TRY(hpin(&e->h_x[i], f * (size_t)(S * H)));
        PDB_TRY(pdb_cuda_dalloc(q, &e->xh, f * (size_t)(HOOK_SLOTS * S * H), "hook slots"));
    }
    if (e->hook_w && !e->hookless) {
        PDB_TRY(pdb_cuda_dalloc(q, &e->ph, f * (size_t)(HOOK_SLOTS * S * e->NHmax), "hook products"));
        for (int i = 0; i < HOOK_SLOTS; i++) PDB_TRY(hpin(&e->h_p[i], f * (size_t)(S * e->NHmax)));
    }
    PDB_TRY(hpin(&e->h_ids, sizeof(int32_t) * (size_t)S));
    PDB_TRY(hpin(&e->h_tiles, sizeof(int32_t) * (size_t)e->ntpad));
    PDB_CU(cudaStreamSynchronize(e->s));
    e->len = 0;
    return PDB_OK;
}

extern "C" pdb_status pdb_cuda_v4_engine_begin(eng *e, int64_t max_tokens) {
    seq_free(e);
    if (max_tokens <= 0 || max_tokens > ((int64_t)1 << 31))
        return pdb_err_set(PDB_INVALID, "v4 engine: max_tokens %lld outside 1..2^31", (long long)max_tokens);
    int64_t bound = e->sub_cfg;
    pdb_status s = begin_inner(e, max_tokens, bound);
    while (s == PDB_CUDA && e->sub_auto && max_tokens > bound / 2 && bound / 2 >= PDB_CUDA_V4_PASS_FALLBACK) {
        seq_free(e); /* the larger pass's scratch did not fit: half the pass */
        cudaGetLastError();
        bound /= 2;
        s = begin_inner(e, max_tokens, bound);
    }
    if (s) seq_free(e);
    return s;
}

extern "C" void pdb_cuda_v4_engine_end(eng *e) {
    cudaStreamSynchronize(e->s);
    cudaStreamSynchronize(e->s_cap);
    cudaGetLastError();
    seq_free(e);
}

/* ======================================== one pass ======================================== */

/* A operand of type dt: x itself (f32 engine) or its bf16 copy in the staging buffer. */
static pdb_status as_dt(eng *e, const float *x, int64_t count, const void **out) {
    if (e->dt == PDB_CUDA_DT_F32) { *out = x; return PDB_OK; }
    if (count > e->cvt_n) return pdb_err_set(PDB_INVALID, "v4 engine: staging of %lld values", (long long)count);
    PDB_TRY(pdb_cuda_convert(e->s, x, count, e->dt, e->cvt));
    *out = e->cvt;
    return PDB_OK;
}

/* y [n, N] (ldy, of type yt: f32, or bf16 in a bf16 engine) = x [n, K] (ldx, f32) . W [N, K]^T (dt). */
static pdb_status linear_to(eng *e, const float *x, int64_t ldx, int64_t n, int64_t K, const void *W, int64_t N,
                            pdb_cuda_dt yt, void *y, int64_t ldy) {
    const void *A = x;
    if (e->dt != PDB_CUDA_DT_F32) {
        if (ldx != K) return pdb_err_set(PDB_INVALID, "v4 engine: strided bf16 operand");
        PDB_TRY(as_dt(e, x, n * K, &A));
    }
    return pdb_cuda_gemm_ct(&e->blas, e->dt, yt, 1, n, N, K, 1.0f, A, ldx, 0, W, K, 0, 0.0f, y, ldy, 0, 1);
}

/* The same into f32 y. */
static pdb_status linear(eng *e, const float *x, int64_t ldx, int64_t n, int64_t K, const void *W, int64_t N, float *y,
                         int64_t ldy) {
    return linear_to(e, x, ldx, n, K, W, N, PDB_CUDA_DT_F32, y, ldy);
}

static pdb_cuda_v4_hc hc_of(const eng *e) {
    pdb_cuda_v4_hc h;
    h.hc = e->hc;
    h.H = e->H;
    h.iters = (int)e->cfg.hc_sinkhorn_iters;
    h.hc_eps = (float)e->cfg.hc_eps;
    h.eps = e->cfg.rms_norm_eps;
    return h;
}

/* The lightning indexer of a CSA layer over the pass: iq roped, then per sub-block of tokens the
 * score rows and the top-k into sel / nsel. Scores: bf16, the fused tensor-core kernel over each
 * token's visible keys (pdb_cuda_v4_index_scores_tc); f32, a cuBLAS GEMM of dots then
 * index_reduce, the GEMM spanning the sequence's whole key capacity (nvc = cap / rate + 1
 * columns; those past a token's visible keys are never read) so that its shape, and hence
 * cuBLAS's kernel and every dot's bits, is the same whatever pass the token is in (chunked = one
 * shot). */
static pdb_status indexer(eng *e, const v4_dlayer *D, const float *cs, int64_t p0, int64_t n) {
    int64_t nih = e->nih, ihd = e->ihd, r = D->rate, K = e->Ktop, nvc = e->cap / r + 1, nv_all = (p0 + n) / r;
    const void *iqb = (const char *)e->qb + e->esz * (size_t)(e->nh * e->hd); /* the indexer's q_b */
    PDB_TRY(pdb_cuda_v4_heads_norm_rope(e->s, iqb, e->dt, D->NB, e->iq, nih * ihd, n, nih, ihd, e->rd, 0, NULL, cs, p0, 1,
                                        e->cfg.rms_norm_eps));
    PDB_CU(cudaMemcpy2DAsync(e->iw, sizeof(float) * (size_t)nih, e->xa + e->F * D->NA + (D->NA - nih), sizeof(float) * (size_t)D->NA,
                             sizeof(float) * (size_t)nih, (size_t)n, cudaMemcpyDeviceToDevice, e->s));
    const void *keys = D->ikeys;
    if (nv_all > K && e->dt == PDB_CUDA_DT_BF16) {
        PDB_TRY(pdb_cuda_convert(e->s, D->ikeys, (e->idx_tc ? nv_all : nvc) * ihd, e->dt, e->ikb));
        keys = e->ikb;
    }
    float sscale = (float)(1.0 / sqrt((double)ihd) / sqrt((double)nih));
    for (int64_t t0 = 0; t0 < n; t0 += e->tb_max) {
        int64_t tn = n - t0 < e->tb_max ? n - t0 : e->tb_max;
        if ((p0 + t0 + tn) / r > K) {
            if (e->idx_tc)
                PDB_TRY(pdb_cuda_v4_index_scores_tc(e->s, e->iq + t0 * nih * ihd, e->iw + t0 * nih, keys, tn, nih, ihd, p0 + t0, r, K,
                                                    sscale, e->score, nvc, e->idx_mma_sync));
            else {
                const void *A;
                PDB_TRY(as_dt(e, e->iq + t0 * nih * ihd, tn * nih * ihd, &A));
                PDB_TRY(pdb_cuda_gemm(&e->blas, e->dt, 1, tn * nih, nvc, ihd, 1.0f, A, ihd, 0, keys, ihd, 0, 0.0f, e->dots, nvc, 0, 1));
                PDB_TRY(pdb_cuda_v4_index_reduce(e->s, e->dots, nvc, e->iw + t0 * nih, tn, nih, p0 + t0, r, K, sscale, e->score, nvc));
            }
        }
        PDB_TRY(pdb_cuda_v4_topk(e->s, e->score, nvc, tn, p0 + t0, r, K, e->sel + t0 * K, e->nsel + t0));
    }
    return PDB_OK;
}

/* The attention sub-block of layer l on x [n, H] -> out [n, H]. */
static pdb_status attention(eng *e, v4_dlayer *D, int64_t p0, int64_t n) {
    const int64_t H = e->H, hd = e->hd, nh = e->nh, W = e->W, F = e->F, NA = D->NA, rd = e->rd;
    const float *cs = D->rope_c ? e->cs_comp : e->cs_main;
    const double eps = e->cfg.rms_norm_eps;
    float *xa = e->xa + F * NA; /* row t: position p0 + t; rows -F.. hold the history */
    if (D->rate) PDB_CU(cudaMemcpyAsync(e->xa, D->hist, sizeof(float) * (size_t)(F * NA), cudaMemcpyDeviceToDevice, e->s));
    if (e->dt == PDB_CUDA_DT_BF16) /* x's bf16 copy from the pre-site */
        PDB_TRY(pdb_cuda_gemm(&e->blas, e->dt, 1, n, NA, H, 1.0f, e->x16, H, 0, D->wa, H, 0, 0.0f, xa, NA, 0, 1));
    else PDB_TRY(linear(e, e->x, H, n, H, D->wa, NA, xa, NA));
    /* queries: q_norm, q_b (+ the indexer's), per-head unweighted norm, RoPE */
    PDB_TRY(pdb_cuda_rmsnorm_warp(e->s, xa, NA, D->q_norm, e->qn, e->qlr, n, e->qlr, eps));
    PDB_TRY(linear_to(e, e->qn, e->qlr, n, e->qlr, D->wb, D->NB, e->dt, e->qb, D->NB)); /* bf16 engine: bf16 products */
    if (e->attn_tc16) /* q as the attention kernel's bf16 operand (the bits it rounded f32 q to) */
        PDB_TRY(pdb_cuda_v4_heads_norm_rope_bf16(e->s, e->qb, e->dt, D->NB, e->q, nh * hd, n, nh, hd, rd, 1, NULL, cs, p0, 1,
                                                 eps));
    else
        PDB_TRY(pdb_cuda_v4_heads_norm_rope(e->s, e->qb, e->dt, D->NB, e->q, nh * hd, n, nh, hd, rd, 1, NULL, cs, p0, 1, eps));
    PDB_TRY(mark(e, ST_QKV));
    /* K=V rows behind the window's tail */
    int64_t lo = p0 - (W - 1) > 0 ? p0 - (W - 1) : 0;
    if (W > 1) PDB_CU(cudaMemcpyAsync(e->keys, D->tail, sizeof(float) * (size_t)((W - 1) * hd), cudaMemcpyDeviceToDevice, e->s));
    float *krow = e->keys + (W - 1) * hd;
    PDB_TRY(pdb_cuda_v4_heads_norm_rope(e->s, xa + e->qlr, PDB_CUDA_DT_F32, NA, krow, hd, n, 1, hd, rd, 2, D->kv_norm, cs, p0, 1, eps));
    /* compressed entries (and index keys) of the windows this pass completes */
    if (D->rate) {
        int64_t w0 = p0 / D->rate, w1 = (p0 + n) / D->rate;
        const float *ckv = e->xa + e->qlr + hd; /* buffer row 0: position p0 - F */
        if (w1 > w0) {
            PDB_TRY(pdb_cuda_v4_compress(e->s, ckv, ckv + D->D, NA, p0 - F, D->c_ape, D->c_norm, D->rate, hd, (int)D->coff,
                                         w0, w1, cs, rd, eps, D->comp));
            if (D->ID)
                PDB_TRY(pdb_cuda_v4_compress(e->s, ckv + 2 * D->D, ckv + 2 * D->D + D->ID, NA, p0 - F, D->ic_ape, D->ic_norm,
                                             D->rate, e->ihd, 2, w0, w1, cs, rd, eps, D->ikeys));
        }
    }
    PDB_TRY(mark(e, ST_KVC));
    if (D->ID) PDB_TRY(indexer(e, D, cs, p0, n));
    PDB_TRY(mark(e, ST_INDEX));
    const float *keys = e->keys + ((W - 1) - (p0 - lo)) * hd;
    float scale = (float)(1.0 / sqrt((double)hd));
    int csa = D->kind == PDB_V4_ATTN_CSA;
    int64_t hrate = D->kind == PDB_V4_ATTN_HCA ? D->rate : 0;
    const void *A = e->o; /* wo_a's operand: o with its rope dims rotated back, in the engine's type */
    if (e->attn_tc16) { /* bf16 mirrors of this pass's key rows and of the entries it completed */
        const int64_t kr = (W - 1) + n, w0 = D->rate ? p0 / D->rate : 0, w1 = D->rate ? (p0 + n) / D->rate : 0;
        PDB_TRY(pdb_cuda_convert(e->s, e->keys, kr * hd, PDB_CUDA_DT_BF16, e->keys16));
        if (w1 > w0)
            PDB_TRY(pdb_cuda_convert(e->s, D->comp + w0 * hd, (w1 - w0) * hd, PDB_CUDA_DT_BF16, (char *)D->comp16 + 2 * w0 * hd));
        const void *k16 = (const char *)e->keys16 + 2 * ((W - 1) - (p0 - lo)) * hd;
        /* (a bf16 engine's path) O rotated back and rounded in the kernel's store, straight into the
         * staging buffer: the bits heads_norm_rope then pdb_cuda_convert gave */
        if (n * nh * hd > e->cvt_n) return pdb_err_set(PDB_INVALID, "v4 engine: staging of %lld values", (long long)(n * nh * hd));
        const pdb_cuda_v4_attn_out out = {e->cvt, 1, cs, rd};
        PDB_TRY((e->attn_wg ? pdb_cuda_v4_attention_wg : pdb_cuda_v4_attention_tc16)(
            e->s, e->q, k16, lo, D->comp16, csa ? e->sel : NULL, csa ? e->nsel : NULL, e->Ktop, hrate, n, nh, hd, p0, W, D->sink,
            scale, &out));
        A = out.o;
    } else if (e->attn_tc)
        PDB_TRY(pdb_cuda_v4_attention_tc(e->s, e->q, keys, lo, D->comp, csa ? e->sel : NULL, csa ? e->nsel : NULL, e->Ktop,
                                         hrate, n, nh, hd, p0, W, D->sink, scale, e->o));
    else
        PDB_TRY(pdb_cuda_v4_attention(e->s, e->q, keys, lo, D->comp, csa ? e->sel : NULL, csa ? e->nsel : NULL, e->Ktop,
                                      hrate, n, nh, hd, p0, W, D->sink, scale, e->o));
    if (!e->attn_tc16) {
        PDB_TRY(pdb_cuda_v4_heads_norm_rope(e->s, e->o, PDB_CUDA_DT_F32, nh * hd, e->o, nh * hd, n, nh, hd, rd, 0, NULL, cs, p0, -1, eps));
        if (e->dt != PDB_CUDA_DT_F32) PDB_TRY(as_dt(e, e->o, n * nh * hd, &A));
    }
    PDB_TRY(mark(e, ST_ATTN));
    /* the state the next pass reads: the last W-1 K=V rows and the last F positions' products */
    if (W > 1) PDB_CU(cudaMemcpyAsync(D->tail, e->keys + n * hd, sizeof(float) * (size_t)((W - 1) * hd), cudaMemcpyDeviceToDevice, e->s));
    if (D->rate) PDB_CU(cudaMemcpyAsync(D->hist, e->xa + n * NA, sizeof(float) * (size_t)(F * NA), cudaMemcpyDeviceToDevice, e->s));
    /* grouped low-rank output: group g's heads -> olr, then all groups -> H. a is stored in the engine's
     * type (bf16: cuBLAS rounds each f32 sum to nearest even as it stores it, the bits pdb_cuda_convert
     * gave the f32 row), read once as wo_b's operand */
    PDB_TRY(pdb_cuda_gemm_ct(&e->blas, e->dt, e->dt, 1, n, e->olr, e->gin, 1.0f, A, nh * hd, e->gin, D->wo_a, e->gin,
                             e->olr * e->gin, 0.0f, e->a, e->G * e->olr, e->olr, e->G));
    PDB_TRY(pdb_cuda_gemm(&e->blas, e->dt, 1, n, H, e->G * e->olr, 1.0f, e->a, e->G * e->olr, 0, D->wo_b, e->G * e->olr, 0, 0.0f,
                          e->out, H, 0, 1));
    return mark(e, ST_OPROJ);
}

/* f32 rows of src by index (padding rows, index < 0, are zero): the f32 engine's expert rows. */
__global__ void k_gather_rows(const float *src, const int32_t *rows, int64_t R, int64_t H, float *dst) {
    int64_t r = blockIdx.x;
    if (r >= R) return;
    int32_t s = rows[r];
    for (int64_t d = threadIdx.x; d < H; d += blockDim.x) dst[r * H + d] = s >= 0 ? src[(int64_t)s * H + d] : 0.0f;
}

/* The routed experts as cuBLAS row-tile products (pdb_cuda_moe_tiles: M-invariant groups of tiles;
 * the tile count comes back to the host, one synchronisation per MoE layer). g and u are bf16 (gdt:
 * cuBLAS rounds each f32 sum once as it stores it), read once by the SwiGLU, and the output rows ye
 * likewise of ydt (bf16 at V4's hc 4), read once by the post-site (D49). */
static pdb_status experts_cublas(eng *e, const v4_dlayer *D, int64_t nt) {
    const pdb_cuda_moe_tiles mt = {&e->blas, e->dt, e->gdt, e->ydt, e->E, e->H, e->I, e->ntpad, e->xe, e->g, e->u, e->ye,
                                   e->ptrs, e->h_tiles};
    int64_t used = 0;
    PDB_TRY(pdb_cuda_moe_tiles_up(&mt, e->tile_e, nt, D->w1, D->w3, D->w2, &used));
    PDB_TRY(pdb_cuda_v4_swiglu(e->s, e->g, e->u, e->gdt, used * PDB_CUDA_MOE_TILE * e->I, (float)e->cfg.swiglu_limit, e->dt,
                               e->xe));
    return pdb_cuda_moe_tiles_down(&mt, used);
}

/* The MoE sub-block on x [n, H]: the routed experts' rows and the shared expert's, which the post-site combines. */
static pdb_status moe(eng *e, const v4_dlayer *D, int64_t n, pdb_cuda_v4_moe_rows *rows) {
    const int64_t H = e->H, I = e->I, E = e->E, Kx = e->Kx;
    const float limit = (float)e->cfg.swiglu_limit;
    const int64_t tile = e->blas.tile_rows;
    if (tile > 0) e->blas.tile_rows = ROUTER_ROWS;
    pdb_status rs;
    if (e->dt == PDB_CUDA_DT_BF16) { /* x . gate^T at near-f32 precision on the tensor cores, small terms first:
                                      * lo(x) . hi(g) [+ hi(x) . lo(g)] + hi(x) . hi(g) (D48) */
        const void *gh = D->gate16, *gl = (const char *)D->gate16 + 2 * (size_t)(E * H);
        rs = pdb_cuda_gemm(&e->blas, e->dt, 1, n, E, H, 1.0f, e->x16lo, H, 0, gh, H, 0, 0.0f, e->lg, E, 0, 1);
        if (!rs && D->gate_lo) rs = pdb_cuda_gemm(&e->blas, e->dt, 1, n, E, H, 1.0f, e->x16, H, 0, gl, H, 0, 1.0f, e->lg, E, 0, 1);
        if (!rs) rs = pdb_cuda_gemm(&e->blas, e->dt, 1, n, E, H, 1.0f, e->x16, H, 0, gh, H, 0, 1.0f, e->lg, E, 0, 1);
    } else
        rs = pdb_cuda_gemm(&e->blas, PDB_CUDA_DT_F32, 1, n, E, H, 1.0f, e->x, H, 0, D->gate, H, 0, 0.0f, e->lg, E, 0, 1);
    e->blas.tile_rows = tile;
    PDB_TRY(rs);
    PDB_TRY(pdb_cuda_v4_route(e->s, e->lg, e->ids, D->hash ? D->tid2eid : NULL, D->hash ? NULL : D->gate_bias, n, (int)E,
                              (int)Kx, (int)e->cfg.scoring_func, (float)e->cfg.routed_scaling_factor, e->idx, e->wt));
    PDB_TRY(pdb_cuda_moe_layout(e->s, e->idx, n, Kx, E, e->lay, e->row_src, e->slot_row, e->tile_e));
    PDB_TRY(mark(e, ST_ROUTER));
    const int64_t nt = pdb_cuda_moe_max_tiles(n * Kx, E), R = nt * PDB_CUDA_MOE_TILE, T = PDB_CUDA_MOE_TILE;
    if (e->dt == PDB_CUDA_DT_BF16 && !e->moe_kernel) {
        PDB_TRY(pdb_cuda_moe_gather_rows16(e->s, e->x16, e->row_src, R, H, e->xe));
        PDB_TRY(experts_cublas(e, D, nt));
    } else if (e->dt == PDB_CUDA_DT_BF16) {
        PDB_TRY(pdb_cuda_moe_gather_rows16(e->s, e->x16, e->row_src, R, H, e->xe));
        PDB_TRY(pdb_cuda_moe_gemm(e->s, e->xe, D->w1, (float *)e->g, e->tile_e, nt, I, H)); /* f32 g, u (gdt) */
        PDB_TRY(pdb_cuda_moe_gemm(e->s, e->xe, D->w3, (float *)e->u, e->tile_e, nt, I, H));
        PDB_TRY(pdb_cuda_v4_swiglu(e->s, e->g, e->u, e->gdt, R * I, limit, e->dt, e->xe)); /* xe's rows are consumed: reused */
        PDB_TRY(pdb_cuda_moe_gemm(e->s, e->xe, D->w2, (float *)e->ye, e->tile_e, nt, H, I)); /* f32 ye (ydt) */
    } else { /* f32: one cuBLAS product per row tile, its expert read back */
        float *xe = (float *)e->xe, *g = (float *)e->g, *u = (float *)e->u;
        k_gather_rows<<<(unsigned)R, 256, 0, e->s>>>(e->x, e->row_src, R, H, xe);
        PDB_CU_LAUNCH("expert rows");
        PDB_CU(cudaMemcpyAsync(e->h_tiles, e->tile_e, sizeof(int32_t) * (size_t)nt, cudaMemcpyDeviceToHost, e->s));
        PDB_CU(cudaStreamSynchronize(e->s));
        for (int64_t i = 0; i < nt; i++) {
            int32_t x = e->h_tiles[i];
            if (x < 0) continue;
            if (x >= E) return pdb_err_set(PDB_CUDA, "v4 engine: expert %d of tile %lld out of range", x, (long long)i);
            const float *w1 = (const float *)D->w1 + x * I * H, *w3 = (const float *)D->w3 + x * I * H;
            PDB_TRY(pdb_cuda_gemm_whole(&e->blas, e->dt, 1, T, I, H, 1.0f, xe + i * T * H, H, 0, w1, H, 0, 0.0f, g + i * T * I, I, 0, 1));
            PDB_TRY(pdb_cuda_gemm_whole(&e->blas, e->dt, 1, T, I, H, 1.0f, xe + i * T * H, H, 0, w3, H, 0, 0.0f, u + i * T * I, I, 0, 1));
        }
        PDB_TRY(pdb_cuda_v4_swiglu(e->s, g, u, e->gdt, R * I, limit, e->dt, g));
        for (int64_t i = 0; i < nt; i++) {
            int32_t x = e->h_tiles[i];
            if (x < 0) continue;
            PDB_TRY(pdb_cuda_gemm_whole(&e->blas, e->dt, 1, T, H, I, 1.0f, g + i * T * I, I, 0, (const float *)D->w2 + x * H * I, I, 0,
                                        0.0f, (float *)e->ye + i * T * H, H, 0, 1));
        }
    }
    PDB_TRY(mark(e, ST_EXPERTS));
    const float *sh = NULL;
    if (e->cfg.n_shared_experts) {
        const void *A = e->x16; /* x as the operand once for both products: its bf16 copy, or itself */
        if (e->dt == PDB_CUDA_DT_F32) PDB_TRY(as_dt(e, e->x, n * H, &A));
        /* gs, us of dt (bf16 engine: bf16, read once by the SwiGLU) */
        PDB_TRY(pdb_cuda_gemm_ct(&e->blas, e->dt, e->dt, 1, n, I, H, 1.0f, A, H, 0, D->sw1, H, 0, 0.0f, e->gs, I, 0, 1));
        PDB_TRY(pdb_cuda_gemm_ct(&e->blas, e->dt, e->dt, 1, n, I, H, 1.0f, A, H, 0, D->sw3, H, 0, 0.0f, e->us, I, 0, 1));
        void *act = e->dt == PDB_CUDA_DT_BF16 ? e->cvt : e->gs; /* the SwiGLU in the operand type */
        PDB_TRY(pdb_cuda_v4_swiglu(e->s, e->gs, e->us, e->dt, n * I, limit, e->dt, act));
        PDB_TRY(pdb_cuda_gemm(&e->blas, e->dt, 1, n, H, I, 1.0f, act, I, 0, D->sw2, I, 0, 0.0f, e->sh, H, 0, 1));
        sh = e->sh;
    }
    *rows = (pdb_cuda_v4_moe_rows){e->ye, e->ydt, e->slot_row, e->wt, sh, Kx}; /* combined by the post-site */
    return mark(e, ST_SHARED);
}

/* A hyper-connection pre-site over the pass: the mixing products (rawmix = hs . fn^T, N = (2+hc)*hc
 * small and K = hc*H long) on pdb_cuda_v4_hc_mix where it fits (a pass over hs at the copy bandwidth,
 * M-invariant by construction), else one f32 cuBLAS GEMM in M-invariant tiles of HC_MIX_ROWS; then
 * the per-token rest, which writes x and (bf16 engine) its bf16 copy x16 and, for the router (lo), x16lo. */
static pdb_status hc_pre(eng *e, const pdb_cuda_v4_hc *hcc, int64_t n, const float *fn, const float *base, const float *scale,
                         const float *norm, int lo) {
    const int64_t nm = (2 + e->hc) * e->hc, N = e->hc * e->H, tile = e->blas.tile_rows;
    if (pdb_cuda_v4_hc_mix_fits(e->hc, N))
        PDB_TRY(pdb_cuda_v4_hc_mix(e->s, e->hc, e->hs, n, N, fn, e->rawmix));
    else {
        if (tile > 0) e->blas.tile_rows = HC_MIX_ROWS;
        pdb_status s = pdb_cuda_gemm(&e->blas, PDB_CUDA_DT_F32, 1, n, nm, N, 1.0f, e->hs, N, 0, fn, N, 0, 0.0f, e->rawmix, nm, 0, 1);
        e->blas.tile_rows = tile;
        PDB_TRY(s);
    }
    /* a bf16 engine reads f32 x only as the hook's copy of the attention input (the MoE site's and a hookless
     * engine's are not stored where the fused pre-site may leave them out) */
    const int bf = e->dt == PDB_CUDA_DT_BF16, skip_x = bf && (lo || e->hookless) && pdb_cuda_v4_hc_pre_x_optional(hcc);
    return pdb_cuda_v4_hc_pre_mixed(e->s, hcc, e->hs, n, e->rawmix, base, scale, norm, skip_x ? NULL : e->x, bf ? e->x16 : NULL,
                                    bf && lo ? e->x16lo : NULL, e->post, e->comb);
}

/* The host side of the hook: a thread that hands layer l's copy to the hook once the pass has
 * queued it (issued > l) and s_cap has finished it (ev_x), layers in order, while the pass's
 * thread goes on queuing the next layers (the hook's host work, e.g. the decoder's cache feed,
 * overlaps the device's). Shared state under mu: issued (written by the pass), done and the
 * first failure st/msg (by the drainer), quit (either: stop handing layers over). A host slot is
 * reused by layer l only once done > l - HOOK_SLOTS. */
typedef struct hookq {
    eng *e;
    const pdb_v4_hook *hook;
    int64_t p0, n;
    int rows; /* the hook's products computed here (set_hook and hook->feed_rows), not its inputs copied */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t issued, done;
    int quit, have_th;
    pdb_status st;
    char msg[1024];
    pthread_t th;
} hookq;

static pdb_status hook_layer(hookq *q, int64_t l) {
    eng *e = q->e;
    int slot = (int)(l % HOOK_SLOTS);
    PDB_CU(cudaEventSynchronize(e->ev_x[slot]));
    if (!q->rows) return q->hook->attn_input(q->hook->user, l, e->h_x[slot], q->n, q->p0);
    pdb_v4_feed_rows r = hook_rows(e, &e->Ls[l], e->h_p[slot], q->n);
    return q->hook->feed_rows(q->hook->user, l, &r, q->n, q->p0);
}

static void *hook_drainer(void *arg) {
    hookq *q = (hookq *)arg;
    pdb_status s = cudaSetDevice(q->e->device) == cudaSuccess ? PDB_OK : pdb_err_set(PDB_CUDA, "v4 engine: hook thread's device");
    for (int64_t l = 0; !s && l < q->e->L; l++) {
        pthread_mutex_lock(&q->mu);
        while (q->issued <= l && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
        int quit = q->quit;
        pthread_mutex_unlock(&q->mu);
        if (quit) return NULL;
        if ((s = hook_layer(q, l))) s = pdb_err_wrap(s, "v4 engine: the hook at layer %lld", (long long)l);
        pthread_mutex_lock(&q->mu);
        if (s) {
            q->st = s, q->quit = 1;
            snprintf(q->msg, sizeof q->msg, "%s", pdb_err_msg());
        } else
            q->done = l + 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    return NULL;
}

/* The pass's side: wait until the hook has taken layers < upto (or failed). */
static pdb_status hookq_wait(hookq *q, int64_t upto) {
    pthread_mutex_lock(&q->mu);
    while (q->done < upto && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
    pdb_status s = q->st;
    pthread_mutex_unlock(&q->mu);
    return s ? pdb_err_set(s, "%s", q->msg) : q->quit ? pdb_err_set(PDB_INVALID, "v4 engine: the hook stopped") : PDB_OK;
}

static void hookq_issue(hookq *q, int64_t issued) {
    pthread_mutex_lock(&q->mu);
    q->issued = issued;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static pdb_status hookq_start(hookq *q, eng *e, const pdb_v4_hook *hook, int64_t p0, int64_t n) {
    memset(q, 0, sizeof *q);
    q->e = e, q->hook = hook, q->p0 = p0, q->n = n, q->rows = hook->feed_rows && e->hook_w;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pthread_create(&q->th, NULL, hook_drainer, q)) return pdb_err_set(PDB_NOMEM, "v4 engine: the hook's thread (pthread_create)");
    q->have_th = 1;
    return PDB_OK;
}

/* End the drainer: after a good pass, once every layer is handed over; after a failed one
 * (s), at once. Returns the pass's failure, else the hook's. */
static pdb_status hookq_finish(hookq *q, pdb_status s) {
    if (q->have_th) {
        if (!s) s = hookq_wait(q, q->e->L);
        pthread_mutex_lock(&q->mu);
        q->quit = 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->th, NULL);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    return s;
}

/* One pass of n <= S tokens at the sequence's next positions (the hook's thread hq running when hook). */
static pdb_status forward_layers(eng *e, const int32_t *ids, int64_t n, const pdb_v4_hook *hook, hookq *hq, float *logits) {
    const int64_t H = e->H, hc = e->hc, p0 = e->len;
    const pdb_cuda_v4_hc hcc = hc_of(e);
    memcpy(e->h_ids, ids, sizeof(int32_t) * (size_t)n);
    PDB_CU(cudaMemcpyAsync(e->ids, e->h_ids, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, e->s));
    e->pf.n = 0;
    PDB_TRY(mark(e, ST_EMBED));
    PDB_TRY(pdb_cuda_v4_embed_hc(e->s, e->ids, e->embed, e->dt, n, hc, H, e->hs));
    PDB_TRY(mark(e, ST_EMBED));
    for (int64_t l = 0; l < e->L; l++) {
        v4_dlayer *D = &e->Ls[l];
        PDB_TRY(hc_pre(e, &hcc, n, D->hca_fn, D->hca_base, D->hca_scale, D->attn_norm, 0));
        PDB_TRY(mark(e, ST_HC));
        if (hook) { /* the attention input to a device slot, then to pinned host memory on s_cap */
            int slot = (int)(l % HOOK_SLOTS);
            if (l >= HOOK_SLOTS) PDB_TRY(hookq_wait(hq, l - HOOK_SLOTS + 1)); /* the host slot is free */
            float *xs = e->xh + slot * e->S * H;
            PDB_CU(cudaStreamWaitEvent(e->s, e->ev_x[slot], 0)); /* the device slot's last copy is done */
            PDB_CU(cudaMemcpyAsync(xs, e->x, sizeof(float) * (size_t)(n * H), cudaMemcpyDeviceToDevice, e->s));
            PDB_CU(cudaEventRecord(e->ev_ready[slot], e->s));
            PDB_CU(cudaStreamWaitEvent(e->s_cap, e->ev_ready[slot], 0));
            if (hq->rows) PDB_TRY(hook_products(e, D, xs, n, e->ph + slot * e->S * e->NHmax, e->h_p[slot]));
            else PDB_CU(cudaMemcpyAsync(e->h_x[slot], xs, sizeof(float) * (size_t)(n * H), cudaMemcpyDeviceToHost, e->s_cap));
            PDB_CU(cudaEventRecord(e->ev_x[slot], e->s_cap));
            hookq_issue(hq, l + 1);
            PDB_TRY(mark(e, ST_HOOK));
        }
        PDB_TRY(attention(e, D, p0, n));
        PDB_TRY(pdb_cuda_v4_hc_post(e->s, &hcc, e->hs, e->out, e->post, e->comb, n));
        PDB_TRY(hc_pre(e, &hcc, n, D->hcf_fn, D->hcf_base, D->hcf_scale, D->ffn_norm, 1));
        PDB_TRY(mark(e, ST_HC));
        pdb_cuda_v4_moe_rows mr;
        PDB_TRY(moe(e, D, n, &mr));
        PDB_TRY(pdb_cuda_v4_hc_post_moe(e->s, &hcc, e->hs, &mr, e->post, e->comb, n, e->out));
        PDB_TRY(mark(e, ST_HC));
    }
    if (logits) {
        int64_t last = n - 1;
        PDB_CU(cudaMemcpyAsync(e->lrow, &last, sizeof(int64_t), cudaMemcpyHostToDevice, e->s));
        PDB_TRY(pdb_cuda_v4_hc_head(e->s, &hcc, e->hs, e->lrow, 1, e->hch_fn, e->hch_base, e->hch_scale, e->norm, e->ylast));
        const void *A = e->ylast;
        if (e->dt != PDB_CUDA_DT_F32) PDB_TRY(as_dt(e, e->ylast, H, &A));
        PDB_TRY(pdb_cuda_gemm_whole(&e->blas, e->dt, 1, 1, e->V, H, 1.0f, A, H, 0, e->head, H, 0, 0.0f, e->logits, e->V, 0, 1));
        PDB_CU(cudaMemcpyAsync(logits, e->logits, sizeof(float) * (size_t)e->V, cudaMemcpyDeviceToHost, e->s));
        PDB_TRY(mark(e, ST_HEAD));
    }
    return PDB_OK;
}

static pdb_status forward_pass(eng *e, const int32_t *ids, int64_t n, const pdb_v4_hook *hook, float *logits) {
    hookq hq;
    memset(&hq, 0, sizeof hq);
    pdb_status s = hook ? hookq_start(&hq, e, hook, e->len, n) : PDB_OK;
    if (!s) s = forward_layers(e, ids, n, hook, &hq, logits);
    if (hook) s = hookq_finish(&hq, s);
    PDB_TRY(s);
    PDB_CU(cudaStreamSynchronize(e->s));
    e->len += n;
    return pdb_cuda_prof_collect(&e->pf);
}

extern "C" pdb_status pdb_cuda_v4_engine_forward(eng *e, const int32_t *ids, int64_t n, const pdb_v4_hook *hook,
                                                 float *logits_last) {
    if (!e->cap) return pdb_err_set(PDB_INVALID, "v4 engine: forward before begin");
    if (n <= 0) return pdb_err_set(PDB_INVALID, "v4 engine: no tokens");
    if (hook && e->hookless) return pdb_err_set(PDB_INVALID, "v4 engine: a hook on an engine created hookless (opts.hookless)");
    if (e->len + n > e->cap)
        return pdb_err_set(PDB_TOO_LARGE, "v4 engine: %lld cached + %lld new positions exceed the sequence's %lld",
                           (long long)e->len, (long long)n, (long long)e->cap);
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= e->V)
            return pdb_err_set(PDB_INVALID, "v4 engine: token id %d at %lld is outside the vocabulary (%lld)", ids[t],
                               (long long)t, (long long)e->V);
    PDB_CU(cudaSetDevice(e->device));
    for (int64_t t0 = 0; t0 < n; t0 += e->S) {
        int64_t tn = n - t0 < e->S ? n - t0 : e->S;
        pdb_status s = forward_pass(e, ids + t0, tn, hook, t0 + tn == n ? logits_last : NULL);
        if (s) {
            cudaStreamSynchronize(e->s);
            cudaStreamSynchronize(e->s_cap);
            cudaGetLastError();
            return s;
        }
    }
    return PDB_OK;
}
