/* pdb_cuda_v4_attn_probe: a V4 attention kernel alone on a host desc (pdb_cuda_v4_attn_probe.h).
 * Invariant: the device copies are exactly the desc's arrays (nsel narrowed to int32, which the
 * kernels take; for tc 2 and 3 the keys and comp rows rounded to bf16, nearest even, on the host, the
 * engine's mirrors); a failure on any step frees everything and names the step. */
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_kernels.h"
#include "pdb_cuda_v4_kernels.h"

extern "C" {
#include "pdb_cuda_v4_attn_probe.h"
}

typedef struct v4_probe_bufs {
    float *q, *keys, *comp, *sinks, *o;
    uint16_t *q16, *keys16, *comp16; /* tc 2, 3: bf16 bit patterns */
    int32_t *sel, *nsel;
    cudaEvent_t e0, e1;
} v4_probe_bufs;

/* *dst = a device buffer of max(bytes, 16) bytes holding src's first `bytes` (src NULL: none). */
static pdb_status up(void **dst, const void *src, size_t bytes) {
    PDB_CU(cudaMalloc(dst, bytes > 16 ? bytes : 16));
    if (src && bytes) PDB_CU(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return PDB_OK;
}

/* f32 -> bf16 bits, round to nearest even (NaN kept quiet): __float2bfloat16_rn's rounding. */
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* *dst = a device buffer with the bf16 rounding of src [count] (count 0: a 16-byte buffer). */
static pdb_status up_bf16(uint16_t **dst, const float *src, int64_t count) {
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(count > 0 ? count : 1));
    if (!h) return pdb_err_set(PDB_NOMEM, "v4 attention probe: bf16 rows [%lld]", (long long)count);
    for (int64_t i = 0; i < count; i++) h[i] = bf16_bits(src[i]);
    pdb_status st = up((void **)dst, h, sizeof(uint16_t) * (size_t)(count > 0 ? count : 0));
    free(h);
    return st;
}

/* The kernel on the uploaded buffers; tc 2's / 3's O goes to out (NULL: b->o, f32, no rotation). */
static pdb_status run_kernel(const pdb_v4_attn_desc *d, int tc, const v4_probe_bufs *b, const pdb_cuda_v4_attn_out *out) {
    const int32_t *sel = d->sel ? b->sel : NULL, *nsel = d->sel ? b->nsel : NULL;
    int64_t rate = d->sel ? 0 : d->rate;
    if (tc >= 2) {
        const pdb_cuda_v4_attn_out plain = {b->o, 0, NULL, 0};
        return (tc == 3 ? pdb_cuda_v4_attention_wg : pdb_cuda_v4_attention_tc16)(
            0, b->q16, b->keys16, d->lo, b->comp16, sel, nsel, d->K, rate, d->T, d->nh, d->hd, d->p0, d->W, b->sinks,
            d->scale, out ? out : &plain);
    }
    return tc ? pdb_cuda_v4_attention_tc(0, b->q, b->keys, d->lo, b->comp, sel, nsel, d->K, rate, d->T, d->nh, d->hd,
                                         d->p0, d->W, b->sinks, d->scale, b->o)
              : pdb_cuda_v4_attention(0, b->q, b->keys, d->lo, b->comp, sel, nsel, d->K, rate, d->T, d->nh, d->hd,
                                      d->p0, d->W, b->sinks, d->scale, b->o);
}

static pdb_status upload(const pdb_v4_attn_desc *d, int tc, v4_probe_bufs *b) {
    const int64_t T = d->T, nh = d->nh, hd = d->hd, nkeys = d->p0 - d->lo + T;
    PDB_TRY(up((void **)&b->q, d->q, sizeof(float) * (size_t)(T * nh * hd)));
    PDB_TRY(up((void **)&b->keys, d->keys, sizeof(float) * (size_t)(nkeys * hd)));
    PDB_TRY(up((void **)&b->comp, d->comp, sizeof(float) * (size_t)((d->n_comp > 0 ? d->n_comp : 0) * hd)));
    if (tc >= 2) {
        PDB_TRY(up_bf16(&b->q16, d->q, T * nh * hd));
        PDB_TRY(up_bf16(&b->keys16, d->keys, nkeys * hd));
        PDB_TRY(up_bf16(&b->comp16, d->comp, (d->n_comp > 0 ? d->n_comp : 0) * hd));
    }
    PDB_TRY(up((void **)&b->sinks, d->sinks, sizeof(float) * (size_t)nh));
    PDB_TRY(up((void **)&b->o, NULL, sizeof(float) * (size_t)(T * nh * hd)));
    if (d->sel) {
        int32_t *ns = (int32_t *)malloc(sizeof(int32_t) * (size_t)T);
        if (!ns) return pdb_err_set(PDB_NOMEM, "v4 attention probe: nsel [%lld]", (long long)T);
        for (int64_t t = 0; t < T; t++) ns[t] = (int32_t)d->nsel[t];
        pdb_status st = up((void **)&b->nsel, ns, sizeof(int32_t) * (size_t)T);
        free(ns);
        PDB_TRY(st);
        PDB_TRY(up((void **)&b->sel, d->sel, sizeof(int32_t) * (size_t)(T * (d->K > 0 ? d->K : 0))));
    }
    PDB_CU(cudaMemset(b->o, 0, sizeof(float) * (size_t)(T * nh * hd)));
    return PDB_OK;
}

static pdb_status probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms, v4_probe_bufs *b) {
    PDB_TRY(upload(d, tc, b));
    PDB_TRY(run_kernel(d, tc, b, NULL)); /* untimed: first-launch costs */
    PDB_CU(cudaEventCreate(&b->e0));
    PDB_CU(cudaEventCreate(&b->e1));
    PDB_CU(cudaEventRecord(b->e0, 0));
    PDB_TRY(run_kernel(d, tc, b, NULL));
    PDB_CU(cudaEventRecord(b->e1, 0));
    PDB_CU(cudaEventSynchronize(b->e1));
    float ms = 0;
    PDB_CU(cudaEventElapsedTime(&ms, b->e0, b->e1));
    if (gpu_ms) *gpu_ms = ms;
    PDB_CU(cudaMemcpy(d->o, b->o, sizeof(float) * (size_t)(d->T * d->nh * d->hd), cudaMemcpyDeviceToHost));
    return PDB_OK;
}

static void free_bufs(v4_probe_bufs *b) {
    cudaFree(b->q);
    cudaFree(b->q16);
    cudaFree(b->keys);
    cudaFree(b->comp);
    cudaFree(b->keys16);
    cudaFree(b->comp16);
    cudaFree(b->sinks);
    cudaFree(b->o);
    cudaFree(b->sel);
    cudaFree(b->nsel);
    if (b->e0) cudaEventDestroy(b->e0);
    if (b->e1) cudaEventDestroy(b->e1);
}

/* The stored forms of tc16's (tc 2) or wg's (tc 3) O against the unfused path (f32 O, then heads_norm_rope's inverse
 * rotation, then pdb_cuda_convert): o (scratch, 3 T nh hd floats on the device) and the counts. */
static pdb_status rope_out(const pdb_v4_attn_desc *d, int tc, const float *cs, int64_t rd, v4_probe_bufs *b, float *dcs,
                           float *dev, int64_t *differ_bf16, int64_t *differ_f32) {
    const int64_t T = d->T, nh = d->nh, hd = d->hd, n = T * nh * hd;
    PDB_TRY(upload(d, tc, b));
    PDB_CU(cudaMemcpy(dcs, cs, sizeof(float) * (size_t)((d->p0 + T) * rd), cudaMemcpyHostToDevice));
    float *of = dev, *ref16 = dev + n, *o16 = dev + 2 * n; /* the bf16 forms use half of theirs */
    PDB_TRY(run_kernel(d, tc, b, NULL));
    PDB_TRY(pdb_cuda_v4_heads_norm_rope(0, b->o, PDB_CUDA_DT_F32, nh * hd, b->o, nh * hd, T, nh, hd, rd, 0, NULL, dcs, d->p0, -1, 0.0));
    PDB_TRY(pdb_cuda_convert(0, b->o, n, PDB_CUDA_DT_BF16, ref16));
    const pdb_cuda_v4_attn_out f = {of, 0, dcs, rd}, h = {o16, 1, dcs, rd};
    PDB_TRY(run_kernel(d, tc, b, &f));
    PDB_TRY(run_kernel(d, tc, b, &h));
    PDB_CU(cudaDeviceSynchronize());
    uint32_t *hv = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(4 * n));
    if (!hv) return pdb_err_set(PDB_NOMEM, "v4 attention probe: host copies [%lld]", (long long)(4 * n));
    uint16_t *r16 = (uint16_t *)(hv + 2 * n), *g16 = r16 + n;
    pdb_status st = PDB_OK;
    if (cudaMemcpy(hv, b->o, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) ||
        cudaMemcpy(hv + n, of, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) ||
        cudaMemcpy(r16, ref16, 2 * (size_t)n, cudaMemcpyDeviceToHost) ||
        cudaMemcpy(g16, o16, 2 * (size_t)n, cudaMemcpyDeviceToHost))
        st = pdb_err_set(PDB_CUDA, "v4 attention probe: copying the outputs back: %s", cudaGetErrorString(cudaGetLastError()));
    *differ_bf16 = *differ_f32 = 0;
    for (int64_t i = 0; !st && i < n; i++) {
        *differ_f32 += hv[i] != hv[n + i];
        *differ_bf16 += r16[i] != g16[i];
    }
    free(hv);
    return st;
}

pdb_status pdb_cuda_v4_attn_probe_rope_out(const pdb_v4_attn_desc *d, int tc, const float *cs, int64_t rd,
                                           int64_t *differ_bf16, int64_t *differ_f32) {
    if (!d || (tc != 2 && tc != 3) || !cs || !differ_bf16 || !differ_f32 || d->T <= 0 || d->nh <= 0 || d->hd <= 0 || d->p0 < d->lo ||
        (d->sel && !d->nsel) || rd < 0 || rd > d->hd || rd % 2)
        return pdb_err_set(PDB_INVALID, "v4 attention probe (rope out): bad desc or rd %lld", (long long)rd);
    PDB_TRY(pdb_cuda_use_device(0, "v4 attention probe"));
    v4_probe_bufs b;
    memset(&b, 0, sizeof b);
    float *dcs = NULL, *dev = NULL;
    pdb_status st = up((void **)&dcs, NULL, sizeof(float) * (size_t)((d->p0 + d->T) * (rd > 0 ? rd : 1)));
    if (!st) st = up((void **)&dev, NULL, sizeof(float) * (size_t)(3 * d->T * d->nh * d->hd));
    if (!st) st = rope_out(d, tc, cs, rd, &b, dcs, dev, differ_bf16, differ_f32);
    cudaFree(dcs);
    cudaFree(dev);
    free_bufs(&b);
    return st;
}

pdb_status pdb_cuda_v4_attn_probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms) {
    if (!d || tc < 0 || tc > 3 || d->T < 0 || d->nh <= 0 || d->hd <= 0 || d->p0 < d->lo || (d->sel && !d->nsel))
        return pdb_err_set(PDB_INVALID, "v4 attention probe: bad desc");
    if (d->T == 0) return PDB_OK;
    PDB_TRY(pdb_cuda_use_device(0, "v4 attention probe"));
    v4_probe_bufs b;
    memset(&b, 0, sizeof b);
    pdb_status st = probe(d, tc, gpu_ms, &b);
    free_bufs(&b);
    return st;
}
