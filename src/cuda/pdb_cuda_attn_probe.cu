/* pdb_cuda_attn_probe: the MHA-form attention kernel alone, per tile configuration, on seeded
 * inputs (pdb_cuda_attn_probe.h). Invariant: every configuration sees the same device buffers
 * and the same passes; outputs are compared on the host bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_attn_probe.h"
#include "pdb_cuda_kernels.h"

static_assert((int)PDB_CUDA_ATTN_PROBE_PINGPONG == (int)PDB_CUDA_MHA_WG_PINGPONG, "the probe's flag is the kernel's");

/* dst [heads, rows, ld] with columns < width from the generator, the rest 0 */
__global__ void k_probe_fill(uint16_t *dst, uint64_t seed, int which, int64_t total, int ld, int width) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = (int)(i % ld) < width ? pdb_cuda_probe_value(seed, which, (uint64_t)i) : 0;
}

static pdb_status probe_fill(void *dst, uint64_t seed, int which, int64_t total, int ld, int width) {
    k_probe_fill<<<1024, 256>>>((uint16_t *)dst, seed, which, total, ld, width);
    PDB_CU_LAUNCH("attention probe fill");
    return PDB_OK;
}

typedef struct probe {
    void *q, *k, *v;
    float *out;
    cudaEvent_t e0, e1;
} probe;

static pdb_status probe_prompt(const pdb_cuda_attn_probe_opts *o, int64_t chunk, const probe *p, int warps, int keys,
                                float *host_out) {
    for (int64_t p0 = 0; p0 < o->tokens; p0 += chunk) {
        int64_t n = o->tokens - p0 < chunk ? o->tokens - p0 : chunk;
        float scale = o->scale > 0 ? o->scale : 1.0f / sqrtf((float)(o->nope + o->rope));
        if (warps == 0)
            PDB_TRY(pdb_cuda_attention_mha_wg(0, p->q, p->k, p->v, chunk, o->tokens, p0, n, o->heads, o->nope, o->rope, o->dv,
                                              scale, p->out, keys > 0 ? keys : 64));
        else
            PDB_TRY(pdb_cuda_attention_mha_tiles(0, p->q, p->k, p->v, chunk, o->tokens, p0, n, o->heads, o->nope, o->rope,
                                                 o->dv, scale, p->out, warps));
        if (host_out)
            PDB_CU(cudaMemcpy(host_out + p0 * o->heads * o->dv, p->out, sizeof(float) * (size_t)(n * o->heads * o->dv),
                              cudaMemcpyDeviceToHost));
    }
    return PDB_OK;
}

static pdb_status probe_rows(const pdb_cuda_attn_probe_opts *o, pdb_cuda_attn_probe_row *rows, int nrows, probe *p,
                             float *first, float *mine) {
    const int64_t chunk = o->chunk > 0 ? o->chunk : 8192, dqp = (o->nope + o->rope + 15) / 16 * 16;
    const int64_t T = o->tokens, H = o->heads, outn = T * H * o->dv;
    PDB_CU(cudaMalloc(&p->q, 2 * (size_t)(H * chunk * dqp)));
    PDB_CU(cudaMalloc(&p->k, 2 * (size_t)(H * T * dqp)));
    PDB_CU(cudaMalloc(&p->v, 2 * (size_t)(H * T * o->dv)));
    PDB_CU(cudaMalloc(&p->out, sizeof(float) * (size_t)(chunk * H * o->dv)));
    PDB_TRY(probe_fill(p->q, o->seed, 0, H * chunk * dqp, (int)dqp, (int)(o->nope + o->rope)));
    PDB_TRY(probe_fill(p->k, o->seed, 1, H * T * dqp, (int)dqp, (int)(o->nope + o->rope)));
    PDB_TRY(probe_fill(p->v, o->seed, 2, H * T * o->dv, (int)o->dv, (int)o->dv));
    PDB_CU(cudaEventCreate(&p->e0));
    PDB_CU(cudaEventCreate(&p->e1));
    double flop = 0; /* causal: query at position t sees t + 1 keys; 2 (q/k + v) multiply-adds each */
    for (int64_t t = 0; t < T; t++) flop += 2.0 * (double)(t + 1) * (double)(o->nope + o->rope + o->dv);
    flop *= (double)H;
    for (int r = 0; r < nrows; r++) {
        float *dst = r == 0 ? first : mine;
        PDB_TRY(probe_prompt(o, chunk, p, rows[r].warps, rows[r].keys, dst)); /* untimed; the output */
        rows[r].differing = 0;
        if (r > 0)
            for (int64_t i = 0; i < outn; i++) rows[r].differing += memcmp(first + i, mine + i, 4) != 0;
        double best = 1e300;
        for (int k = 0; k < (o->reps > 0 ? o->reps : 3); k++) {
            float ms = 0;
            PDB_CU(cudaEventRecord(p->e0, 0));
            PDB_TRY(probe_prompt(o, chunk, p, rows[r].warps, rows[r].keys, NULL));
            PDB_CU(cudaEventRecord(p->e1, 0));
            PDB_CU(cudaEventSynchronize(p->e1));
            PDB_CU(cudaEventElapsedTime(&ms, p->e0, p->e1));
            best = ms < best ? ms : best;
        }
        rows[r].ms = best;
        rows[r].tflops = flop / (best * 1e-3) / 1e12;
    }
    return PDB_OK;
}

int pdb_cuda_attn_probe_wg_fits(const pdb_cuda_attn_probe_opts *o) { return pdb_cuda_mha_wg_fits(o->nope, o->rope, o->dv); }

pdb_status pdb_cuda_attn_probe_run(const pdb_cuda_attn_probe_opts *o, pdb_cuda_attn_probe_row *rows, int nrows) {
    if (!o || o->tokens <= 0 || o->heads <= 0 || nrows <= 0 || !pdb_cuda_mha_tc_fits(o->nope, o->rope, o->dv))
        return pdb_err_set(PDB_INVALID, "attention probe: bad shapes");
    PDB_TRY(pdb_cuda_use_device(0, "attention probe"));
    const size_t outn = (size_t)(o->tokens * o->heads * o->dv);
    float *first = o->out_first ? o->out_first : (float *)malloc(sizeof(float) * outn);
    float *mine = nrows > 1 ? (float *)malloc(sizeof(float) * outn) : NULL;
    probe p = {0};
    pdb_status st = !first || (nrows > 1 && !mine) ? pdb_err_set(PDB_NOMEM, "attention probe: %zu outputs", outn)
                                                   : probe_rows(o, rows, nrows, &p, first, mine);
    if (first != o->out_first) free(first);
    free(mine);
    cudaFree(p.q);
    cudaFree(p.k);
    cudaFree(p.v);
    cudaFree(p.out);
    if (p.e0) cudaEventDestroy(p.e0);
    if (p.e1) cudaEventDestroy(p.e1);
    return st;
}
