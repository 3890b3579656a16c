/* pdb_cuda_gemm_probe: cuBLAS's speed and bits for the engines' product forms (pdb_cuda_gemm_probe.h).
 * Invariants: every form of a group computes the same C from the same operands, so bit equality
 * with the group's first form (the engine's form today) is a meaningful check; buffers, handles,
 * streams and events are released on every path. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_bf16.h>

#include "pdb_cuda_gemm_probe.h"
#include "pdb_cuda_util.h"

namespace {

enum { NS = 4 /* streams of the spread forms */ };

__global__ void k_fill(float *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = ((float)(h >> 8) / 8388608.0f - 1.0f) * scale;
    }
}

__global__ void k_fill_bf16(__nv_bfloat16 *x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        x[i] = __float2bfloat16(((float)(h >> 8) / 8388608.0f - 1.0f) * scale);
    }
}

__global__ void k_ne(const float *x, const float *y, int64_t n, int *ne) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        if (__float_as_uint(x[i]) != __float_as_uint(y[i])) *ne = 1;
}

typedef cublasStatus_t (*grouped_fn)(cublasHandle_t, const cublasOperation_t[], const cublasOperation_t[], const int[],
                                     const int[], const int[], const void *, const void *const[], cudaDataType_t,
                                     const int[], const void *const[], cudaDataType_t, const int[], const void *,
                                     void *const[], cudaDataType_t, const int[], int, const int[], cublasComputeType_t);

struct probe {
    pdb_cuda_blas b[NS];
    int nb;
    cudaStream_t st[NS];
    cudaEvent_t fork, join[NS], e0, e1;
    int nev;
    void *mem[16];
    int nmem;
    float *ref; /* the group's first form's C */
    int64_t ref_n;
    int *d_ne;
    int reps;
    pdb_gemm_form_row *rows;
    int cap, n;
    grouped_fn grouped;
};

template <typename T> pdb_status dmalloc(probe *p, T **d, size_t bytes) {
    if (p->nmem >= 16) return pdb_err_set(PDB_INVALID, "gemm probe: too many buffers");
    void *q = NULL;
    PDB_CU(cudaMalloc(&q, bytes));
    p->mem[p->nmem++] = q;
    *d = (T *)q;
    return PDB_OK;
}

void probe_close(probe *p) {
    cudaDeviceSynchronize();
    for (int i = 0; i < p->nmem; i++) cudaFree(p->mem[i]);
    for (int i = 0; i < p->nb; i++) pdb_cuda_blas_close(&p->b[i]);
    for (int i = 0; i < NS; i++)
        if (p->st[i]) cudaStreamDestroy(p->st[i]);
    if (p->nev) {
        cudaEventDestroy(p->fork), cudaEventDestroy(p->e0), cudaEventDestroy(p->e1);
        for (int i = 0; i < NS; i++) cudaEventDestroy(p->join[i]);
    }
}

pdb_status probe_open(probe *p) {
    int nd = 0;
    cudaError_t ce = cudaGetDeviceCount(&nd);
    if (ce != cudaSuccess || nd < 1) {
        cudaGetLastError();
        return pdb_err_set(PDB_CUDA, "gemm probe: no usable GPU (%s)", ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
    }
    PDB_CU(cudaSetDevice(0));
    for (int i = 0; i < NS; i++) PDB_CU(cudaStreamCreateWithFlags(&p->st[i], cudaStreamNonBlocking));
    for (int i = 0; i < NS; i++) {
        PDB_TRY(pdb_cuda_blas_open(&p->b[i], p->st[i]));
        p->nb++;
    }
    PDB_CU(cudaEventCreateWithFlags(&p->fork, cudaEventDisableTiming));
    for (int i = 0; i < NS; i++) PDB_CU(cudaEventCreateWithFlags(&p->join[i], cudaEventDisableTiming));
    PDB_CU(cudaEventCreate(&p->e0));
    PDB_CU(cudaEventCreate(&p->e1));
    p->nev = 1;
    PDB_TRY(dmalloc(p, &p->d_ne, sizeof(int)));
    p->grouped = (grouped_fn)dlsym(p->b[0].lib, "cublasGemmGroupedBatchedEx");
    return PDB_OK;
}

/* Streams 1.. wait for what stream 0 queued; stream 0 then waits for them (after the issue). */
pdb_status fork_all(probe *p) {
    PDB_CU(cudaEventRecord(p->fork, p->st[0]));
    for (int i = 1; i < NS; i++) PDB_CU(cudaStreamWaitEvent(p->st[i], p->fork, 0));
    return PDB_OK;
}

pdb_status join_all(probe *p) {
    for (int i = 1; i < NS; i++) {
        PDB_CU(cudaEventRecord(p->join[i], p->st[i]));
        PDB_CU(cudaStreamWaitEvent(p->st[0], p->join[i], 0));
    }
    return PDB_OK;
}

/* Times issue() (one product, on stream 0 or forked from it), then compares C [cn floats] with the
 * group's reference (first = this form is the reference). */
template <typename F>
pdb_status form(probe *p, const char *group, const char *name, int64_t M, int64_t N, int64_t K, int64_t calls, float *C,
                int64_t cn, int first, F issue) {
    if (p->n >= p->cap) return pdb_err_set(PDB_INVALID, "gemm probe: more forms than rows (%d)", p->cap);
    PDB_CU(cudaMemsetAsync(C, 0, sizeof(float) * (size_t)cn, p->st[0]));
    PDB_TRY(issue()); /* warm-up; its C is the one compared */
    PDB_CU(cudaStreamSynchronize(p->st[0]));
    PDB_CU(cudaEventRecord(p->e0, p->st[0]));
    for (int r = 0; r < p->reps; r++) PDB_TRY(issue());
    PDB_CU(cudaEventRecord(p->e1, p->st[0]));
    PDB_CU(cudaEventSynchronize(p->e1));
    float ms = 0;
    PDB_CU(cudaEventElapsedTime(&ms, p->e0, p->e1));
    pdb_gemm_form_row *r = &p->rows[p->n++];
    snprintf(r->name, sizeof r->name, "%s %s", group, name);
    r->M = M, r->N = N, r->K = K, r->calls = calls;
    r->ms = ms / (p->reps > 0 ? p->reps : 1);
    r->tflops = 2.0 * (double)M * (double)N * (double)K / (r->ms * 1e9);
    if (first) {
        if (cn > p->ref_n) return pdb_err_set(PDB_INVALID, "gemm probe: reference buffer too small");
        PDB_CU(cudaMemcpyAsync(p->ref, C, sizeof(float) * (size_t)cn, cudaMemcpyDeviceToDevice, p->st[0]));
        r->same = 1;
    } else {
        PDB_CU(cudaMemsetAsync(p->d_ne, 0, sizeof(int), p->st[0]));
        k_ne<<<1024, 256, 0, p->st[0]>>>(p->ref, C, cn, p->d_ne);
        PDB_CU_LAUNCH("gemm probe compare");
        int ne = 0;
        PDB_CU(cudaMemcpyAsync(&ne, p->d_ne, sizeof(int), cudaMemcpyDeviceToHost, p->st[0]));
        PDB_CU(cudaStreamSynchronize(p->st[0]));
        r->same = ne == 0;
    }
    return PDB_OK;
}

/* A dense product C [M, N] = A [M, K] . W [N, K]^T of type dt in the forms an M-invariant engine can issue. */
pdb_status dense_group(probe *p, const char *group, pdb_cuda_dt dt, int64_t M, int64_t N, int64_t K, int64_t T,
                       const void *A, const void *W, float *C) {
    pdb_cuda_blas *b = p->b;
    size_t esz = pdb_cuda_dt_size(dt);
    const int64_t nt = M / T;
    char nm[40];
    snprintf(nm, sizeof nm, "tiles%lld", (long long)T);
    PDB_TRY(form(p, group, nm, M, N, K, nt, C, M * N, 1, [&]() -> pdb_status {
        for (int64_t t = 0; t < nt; t++)
            PDB_TRY(pdb_cuda_gemm_whole(&b[0], dt, 1, T, N, K, 1.0f, (const char *)A + esz * (size_t)(t * T * K), K, 0, W, K, 0,
                                        0.0f, C + t * T * N, N, 0, 1));
        return PDB_OK;
    }));
    PDB_TRY(form(p, group, "whole", M, N, K, 1, C, M * N, 0, [&]() -> pdb_status {
        return pdb_cuda_gemm_whole(&b[0], dt, 1, M, N, K, 1.0f, A, K, 0, W, K, 0, 0.0f, C, N, 0, 1);
    }));
    snprintf(nm, sizeof nm, "tiles%lld_%dstreams", (long long)T, NS);
    PDB_TRY(form(p, group, nm, M, N, K, nt, C, M * N, 0, [&]() -> pdb_status {
        PDB_TRY(fork_all(p));
        for (int64_t t = 0; t < nt; t++)
            PDB_TRY(pdb_cuda_gemm_whole(&b[t % NS], dt, 1, T, N, K, 1.0f, (const char *)A + esz * (size_t)(t * T * K), K, 0, W, K,
                                        0, 0.0f, C + t * T * N, N, 0, 1));
        return join_all(p);
    }));
    for (int64_t g = nt; g >= 2; g /= 4) { /* the tiles as strided batches of g (B's stride 0) */
        snprintf(nm, sizeof nm, "tiles%lld_batched%lld", (long long)T, (long long)g);
        PDB_TRY(form(p, group, nm, M, N, K, nt / g, C, M * N, 0, [&]() -> pdb_status {
            for (int64_t t = 0; t < nt; t += g)
                PDB_TRY(pdb_cuda_gemm_whole(&b[0], dt, 1, T, N, K, 1.0f, (const char *)A + esz * (size_t)(t * T * K), K, T * K, W,
                                            K, 0, 0.0f, C + t * T * N, N, T * N, g));
            return PDB_OK;
        }));
    }
    return PDB_OK;
}

/* The routed experts' products: 64 row tiles of 128 (the engine's PDB_CUDA_MOE_TILE) over 11
 * experts, 6 tiles each but the last (a 32K pass's average), gate and up = one [2I, H] weight per
 * expert; C [64 * 128, 2I]. Forms: the engine's (gate and up as two pointer-array calls of N = I),
 * the two as one call (N = 2I), one product per expert (M = its rows), the expert's tiles as a
 * strided batch, the grouped call (one group per expert). */
pdb_status expert_group(probe *p, int64_t I, int64_t H, const __nv_bfloat16 *X, const __nv_bfloat16 *W, float *C) {
    enum { TILES = 64, TR = 128, PER = 6 };
    enum { NE = (TILES + PER - 1) / PER /* experts */ };
    const int64_t M = TILES * TR, N2 = 2 * I;
    pdb_cuda_blas *b = p->b;
    const void **P;
    PDB_TRY(dmalloc(p, &P, sizeof(void *) * 6 * TILES));
    const void *hp[6 * TILES];
    for (int i = 0; i < TILES; i++) {
        int ex = i / PER;
        hp[0 * TILES + i] = X + (int64_t)i * TR * H;
        hp[1 * TILES + i] = W + (int64_t)ex * N2 * H;         /* gate rows */
        hp[2 * TILES + i] = W + (int64_t)ex * N2 * H + I * H; /* up rows */
        hp[3 * TILES + i] = C + (int64_t)i * TR * N2;         /* C's gate columns */
        hp[4 * TILES + i] = C + (int64_t)i * TR * N2 + I;     /* C's up columns */
        hp[5 * TILES + i] = NULL;
    }
    PDB_CU(cudaMemcpy(P, hp, sizeof hp, cudaMemcpyHostToDevice));
    const cudaDataType t = CUDA_R_16BF;
    const float one = 1.0f, zero = 0.0f;
    PDB_TRY(form(p, "experts_gate_up", "ptr64_two_calls", M, N2, H, 2, C, M * N2, 1, [&]() -> pdb_status {
        PDB_CUBLAS(b[0].gemm_batched_ex(b[0].h, CUBLAS_OP_T, CUBLAS_OP_N, (int)I, TR, (int)H, &one, P + TILES, t, (int)H, P, t,
                                        (int)H, &zero, (void *const *)(P + 3 * TILES), CUDA_R_32F, (int)N2, TILES,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        PDB_CUBLAS(b[0].gemm_batched_ex(b[0].h, CUBLAS_OP_T, CUBLAS_OP_N, (int)I, TR, (int)H, &one, P + 2 * TILES, t, (int)H, P,
                                        t, (int)H, &zero, (void *const *)(P + 4 * TILES), CUDA_R_32F, (int)N2, TILES,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return PDB_OK;
    }));
    PDB_TRY(form(p, "experts_gate_up", "ptr64_one_call", M, N2, H, 1, C, M * N2, 0, [&]() -> pdb_status {
        PDB_CUBLAS(b[0].gemm_batched_ex(b[0].h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N2, TR, (int)H, &one, P + TILES, t, (int)H, P, t,
                                        (int)H, &zero, (void *const *)(P + 3 * TILES), CUDA_R_32F, (int)N2, TILES,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return PDB_OK;
    }));
    PDB_TRY(form(p, "experts_gate_up", "per_expert_whole", M, N2, H, NE, C, M * N2, 0, [&]() -> pdb_status {
        for (int64_t ex = 0; ex < NE; ex++) {
            int64_t t0 = ex * PER, nt = TILES - t0 < PER ? TILES - t0 : PER;
            PDB_TRY(pdb_cuda_gemm_whole(&b[0], PDB_CUDA_DT_BF16, 1, nt * TR, N2, H, 1.0f, X + t0 * TR * H, H, 0, W + ex * N2 * H,
                                        H, 0, 0.0f, C + t0 * TR * N2, N2, 0, 1));
        }
        return PDB_OK;
    }));
    PDB_TRY(form(p, "experts_gate_up", "per_expert_4streams", M, N2, H, NE, C, M * N2, 0, [&]() -> pdb_status {
        PDB_TRY(fork_all(p));
        for (int64_t ex = 0; ex < NE; ex++) {
            int64_t t0 = ex * PER, nt = TILES - t0 < PER ? TILES - t0 : PER;
            PDB_TRY(pdb_cuda_gemm_whole(&b[ex % NS], PDB_CUDA_DT_BF16, 1, nt * TR, N2, H, 1.0f, X + t0 * TR * H, H, 0,
                                        W + ex * N2 * H, H, 0, 0.0f, C + t0 * TR * N2, N2, 0, 1));
        }
        return join_all(p);
    }));
    PDB_TRY(form(p, "experts_gate_up", "per_expert_batched", M, N2, H, NE, C, M * N2, 0, [&]() -> pdb_status {
        for (int64_t ex = 0; ex < NE; ex++) {
            int64_t t0 = ex * PER, nt = TILES - t0 < PER ? TILES - t0 : PER;
            PDB_TRY(pdb_cuda_gemm_whole(&b[0], PDB_CUDA_DT_BF16, 1, TR, N2, H, 1.0f, X + t0 * TR * H, H, TR * H, W + ex * N2 * H, H,
                                        0, 0.0f, C + t0 * TR * N2, N2, TR * N2, nt));
        }
        return PDB_OK;
    }));
    if (p->grouped) {
        cublasOperation_t ta[NE], tb[NE];
        int m[NE], n[NE], k[NE], lda[NE], ldb[NE], ldc[NE], gs[NE];
        float al[NE], be[NE];
        const void *gp[3 * NE]; /* the groups' W, X and C pointers */
        for (int64_t ex = 0; ex < NE; ex++) {
            int64_t t0 = ex * PER, nt = TILES - t0 < PER ? TILES - t0 : PER;
            ta[ex] = CUBLAS_OP_T, tb[ex] = CUBLAS_OP_N, m[ex] = (int)N2, n[ex] = (int)(nt * TR), k[ex] = (int)H;
            lda[ex] = ldb[ex] = (int)H, ldc[ex] = (int)N2, gs[ex] = 1, al[ex] = 1.0f, be[ex] = 0.0f;
            gp[0 * NE + ex] = W + ex * N2 * H, gp[1 * NE + ex] = X + t0 * TR * H, gp[2 * NE + ex] = C + t0 * TR * N2;
        }
        const void **G;
        PDB_TRY(dmalloc(p, &G, sizeof gp));
        PDB_CU(cudaMemcpy(G, gp, sizeof gp, cudaMemcpyHostToDevice));
        PDB_TRY(form(p, "experts_gate_up", "grouped_per_expert", M, N2, H, 1, C, M * N2, 0, [&]() -> pdb_status {
            PDB_CUBLAS(p->grouped(b[0].h, ta, tb, m, n, k, al, G, t, lda, G + NE, t, ldb, be, (void *const *)(G + 2 * NE),
                                  CUDA_R_32F, ldc, (int)NE, gs, CUBLAS_COMPUTE_32F));
            return PDB_OK;
        }));
    }
    return PDB_OK;
}

} // namespace

extern "C" pdb_status pdb_cuda_probe_gemm_forms(int reps, pdb_gemm_form_row *rows, int cap, int *n) {
    *n = 0;
    probe p;
    memset(&p, 0, sizeof p);
    p.reps = reps, p.rows = rows, p.cap = cap;
    pdb_status s = probe_open(&p);
    const int64_t M = 8192, H = 4096, I = 2048, HC = 4 * 4096, NM = 24, KMAX = 16384, NMAX = 4096;
    __nv_bfloat16 *A16 = NULL, *W16 = NULL;
    float *A32 = NULL, *W32 = NULL, *C = NULL;
    if (!s) s = dmalloc(&p, &A16, sizeof(__nv_bfloat16) * (size_t)(M * 8192));
    if (!s) s = dmalloc(&p, &W16, sizeof(__nv_bfloat16) * (size_t)(11 * 2 * I * H));
    if (!s) s = dmalloc(&p, &A32, sizeof(float) * (size_t)(M * KMAX));
    if (!s) s = dmalloc(&p, &W32, sizeof(float) * (size_t)(NM * KMAX));
    if (!s) s = dmalloc(&p, &C, sizeof(float) * (size_t)(M * NMAX));
    if (!s) s = dmalloc(&p, &p.ref, sizeof(float) * (size_t)(M * NMAX));
    p.ref_n = M * NMAX;
    if (!s) {
        k_fill_bf16<<<1024, 256, 0, p.st[0]>>>(A16, M * 8192, 1u, 1.0f);
        k_fill_bf16<<<1024, 256, 0, p.st[0]>>>(W16, 11 * 2 * I * H, 2u, 0.02f);
        k_fill<<<1024, 256, 0, p.st[0]>>>(A32, M * KMAX, 3u, 1.0f);
        k_fill<<<1024, 256, 0, p.st[0]>>>(W32, NM * KMAX, 4u, 0.01f);
        cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess) s = pdb_err_set(PDB_CUDA, "gemm probe fill: %s", cudaGetErrorString(ce));
    }
    /* the dense products of a V4-Flash layer: the shared expert's gate / up (2048 x 4096) and down
     * (4096 x 2048), wo_b (4096 x 8192), in the V4 engine's 512-row tiles; the hyper-connections' f32 mix
     * (24 x 16384) in its 1024-row tiles */
    if (!s) s = dense_group(&p, "dense_2048x4096", PDB_CUDA_DT_BF16, M, 2048, 4096, 512, A16, W16, C);
    if (!s) s = dense_group(&p, "dense_4096x2048", PDB_CUDA_DT_BF16, M, 4096, 2048, 512, A16, W16, C);
    if (!s) s = dense_group(&p, "dense_4096x8192", PDB_CUDA_DT_BF16, M, 4096, 8192, 512, A16, W16, C);
    if (!s) s = dense_group(&p, "hc_mix_f32_24x16384", PDB_CUDA_DT_F32, M, NM, HC, 1024, A32, W32, C);
    if (!s) s = expert_group(&p, I, H, A16, W16, C);
    *n = p.n;
    probe_close(&p);
    return s;
}
