/* pdb_cuda_v4: the V4 matrix-product provider on CUDA. State: one stream, a table of uploaded
 * weights (host pointer -> device copy), growable device buffers for A and C, a host buffer for
 * accumulating products. Invariants: (1) every element is pdb_v4_mm_ref's order: 8 partial sums
 * over k mod 8 with separately rounded multiply and add, folded ((p0+p4)+(p2+p6))+((p1+p5)+
 * (p3+p7)), then the tail in k order; (2) a weight's device copy is made once and reused while
 * the provider lives; (3) every CUDA call is checked and a failure is PDB_CUDA naming the call. */
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_util.h"

extern "C" {
#include "pdb_cuda_v4.h"
}

typedef struct v4w { const float *host; float *dev; size_t bytes; } v4w;

typedef struct cu_v4 {
    pdb_v4_mm_provider p;
    int device;
    cudaStream_t s;
    int have_stream;
    v4w *w;             /* open addressing, cap a power of two */
    size_t wn, wcap;
    float *dA, *dC, *hC;
    size_t capA, capC, caphC; /* bytes */
} cu_v4;

/* ======================================= kernel ============================================= */

/* A block computes a 4 x 8 tile of C (rows x outputs), one output per group of 8 lanes; lane j of
 * a group keeps the partial sum of k = j mod 8. K is walked in chunks of 64 staged in shared
 * memory (rows padded by 8 floats so the four output rows of a warp hit distinct banks). */
enum { V4_TM = 4, V4_TN = 8, V4_KC = 64, V4_KP = V4_KC + 8 };

__global__ void __launch_bounds__(256)
    k_v4_mm(const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t M, int64_t N, int64_t K) {
    __shared__ float As[V4_TM][V4_KP], Bs[V4_TN][V4_KP];
    int tid = threadIdx.x, g = tid / 8, j = tid % 8;
    int64_t m0 = (int64_t)blockIdx.y * V4_TM, n0 = (int64_t)blockIdx.x * V4_TN;
    int64_t m = m0 + g / V4_TN, n = n0 + g % V4_TN, K8 = K - K % 8;
    float p = 0.0f;
    for (int64_t k0 = 0; k0 < K8; k0 += V4_KC) {
        for (int i = tid; i < (V4_TM + V4_TN) * V4_KC; i += 256) {
            int r = i / V4_KC, kk = i % V4_KC;
            int64_t k = k0 + kk;
            if (r < V4_TM) {
                int64_t mr = m0 + r;
                As[r][kk] = mr < M && k < K8 ? A[mr * lda + k] : 0.0f;
            } else {
                int64_t nr = n0 + (r - V4_TM);
                Bs[r - V4_TM][kk] = nr < N && k < K8 ? B[nr * ldb + k] : 0.0f;
            }
        }
        __syncthreads();
        int kn = K8 - k0 < V4_KC ? (int)(K8 - k0) : V4_KC;
        const float *ar = As[g / V4_TN], *br = Bs[g % V4_TN];
        for (int kk = j; kk < kn; kk += 8) p = __fadd_rn(p, __fmul_rn(ar[kk], br[kk]));
        __syncthreads();
    }
    p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, 4, 8));
    p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, 2, 8));
    p = __fadd_rn(p, __shfl_down_sync(0xffffffffu, p, 1, 8));
    if (j == 0 && m < M && n < N) {
        const float *a = A + m * lda, *b = B + n * ldb;
        for (int64_t k = K8; k < K; k++) p = __fadd_rn(p, __fmul_rn(a[k], b[k]));
        C[m * N + n] = p;
    }
}

/* ======================================= buffers ============================================ */

static pdb_status grow_dev(float **p, size_t *cap, size_t need) {
    if (*cap >= need) return PDB_OK;
    if (*p) cudaFree(*p);
    *p = NULL;
    *cap = 0;
    PDB_CU(cudaMalloc((void **)p, need));
    *cap = need;
    return PDB_OK;
}

static size_t slot_of(const cu_v4 *c, const float *host) {
    size_t h = (size_t)((uintptr_t)host >> 4) * 0x9E3779B97F4A7C15ull;
    return h & (c->wcap - 1);
}

static pdb_status table_grow(cu_v4 *c) {
    size_t ncap = c->wcap ? c->wcap * 2 : 1024;
    v4w *nw = (v4w *)calloc(ncap, sizeof(v4w)), *old = c->w;
    if (!nw) return pdb_err_set(PDB_NOMEM, "cuda v4: weight table");
    size_t ocap = c->wcap;
    c->w = nw;
    c->wcap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].host) {
            size_t k = slot_of(c, old[i].host);
            while (c->w[k].host) k = (k + 1) & (c->wcap - 1);
            c->w[k] = old[i];
        }
    free(old);
    return PDB_OK;
}

/* The device copy of weight B (bytes from B), uploaded on first use. */
static pdb_status weight(cu_v4 *c, const float *B, size_t bytes, const float **dev) {
    if ((c->wn + 1) * 2 > c->wcap) PDB_TRY(table_grow(c));
    size_t k = slot_of(c, B);
    while (c->w[k].host && c->w[k].host != B) k = (k + 1) & (c->wcap - 1);
    v4w *e = &c->w[k];
    if (e->host && e->bytes >= bytes) { *dev = e->dev; return PDB_OK; }
    if (e->host) { cudaFree(e->dev); e->dev = NULL; } /* the same pointer seen wider: upload again */
    else c->wn++;
    e->host = B;
    e->bytes = 0;
    cudaError_t er = cudaMalloc((void **)&e->dev, bytes);
    if (er != cudaSuccess) {
        cudaGetLastError();
        e->dev = NULL;
        return pdb_err_set(PDB_CUDA, "cuda v4: cudaMalloc(%zu bytes) for a weight: %s", bytes, cudaGetErrorString(er));
    }
    PDB_CU(cudaMemcpy(e->dev, B, bytes, cudaMemcpyHostToDevice));
    e->bytes = bytes;
    *dev = e->dev;
    return PDB_OK;
}

/* ======================================= provider =========================================== */

static pdb_status v4_mm(void *ctx, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                        int64_t ldb, int acc, float *C, int64_t ldc) {
    cu_v4 *c = (cu_v4 *)ctx;
    if (M <= 0 || N <= 0) return PDB_OK;
    if ((M + V4_TM - 1) / V4_TM > 65535)
        return pdb_err_set(PDB_TOO_LARGE, "cuda v4: %lld rows in one product (max %d)", (long long)M, 65535 * V4_TM);
    PDB_CU(cudaSetDevice(c->device));
    size_t a_bytes = sizeof(float) * (size_t)((M - 1) * lda + K), b_bytes = sizeof(float) * (size_t)((N - 1) * ldb + K);
    size_t c_bytes = sizeof(float) * (size_t)(M * N);
    const float *dB;
    PDB_TRY(weight(c, B, b_bytes, &dB));
    PDB_TRY(grow_dev(&c->dA, &c->capA, a_bytes));
    PDB_TRY(grow_dev(&c->dC, &c->capC, c_bytes));
    PDB_CU(cudaMemcpyAsync(c->dA, A, a_bytes, cudaMemcpyHostToDevice, c->s));
    dim3 grid((unsigned)((N + V4_TN - 1) / V4_TN), (unsigned)((M + V4_TM - 1) / V4_TM));
    k_v4_mm<<<grid, 256, 0, c->s>>>(c->dA, lda, dB, ldb, c->dC, M, N, K);
    PDB_CU_LAUNCH("v4_mm");
    if (!acc) {
        PDB_CU(cudaMemcpy2DAsync(C, sizeof(float) * (size_t)ldc, c->dC, sizeof(float) * (size_t)N,
                                 sizeof(float) * (size_t)N, (size_t)M, cudaMemcpyDeviceToHost, c->s));
        PDB_CU(cudaStreamSynchronize(c->s));
        return PDB_OK;
    }
    if (c->caphC < c_bytes) { /* C = C + product, added on the host as the reference does */
        float *nh = (float *)realloc(c->hC, c_bytes);
        if (!nh) return pdb_err_set(PDB_NOMEM, "cuda v4: %zu bytes of product staging", c_bytes);
        c->hC = nh;
        c->caphC = c_bytes;
    }
    PDB_CU(cudaMemcpyAsync(c->hC, c->dC, c_bytes, cudaMemcpyDeviceToHost, c->s));
    PDB_CU(cudaStreamSynchronize(c->s));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) C[m * ldc + n] = C[m * ldc + n] + c->hC[m * N + n];
    return PDB_OK;
}

extern "C" void pdb_cuda_v4_mm_free(pdb_v4_mm_provider *p) {
    if (!p) return;
    cu_v4 *c = (cu_v4 *)p->ctx;
    if (c) {
        cudaSetDevice(c->device);
        if (c->have_stream) cudaStreamSynchronize(c->s);
        for (size_t i = 0; i < c->wcap; i++)
            if (c->w[i].dev) cudaFree(c->w[i].dev);
        free(c->w);
        if (c->dA) cudaFree(c->dA);
        if (c->dC) cudaFree(c->dC);
        free(c->hC);
        if (c->have_stream) cudaStreamDestroy(c->s);
        cudaGetLastError();
        free(c);
    }
}

static void v4_destroy(void *ctx) {
    cu_v4 *c = (cu_v4 *)ctx;
    if (c) pdb_cuda_v4_mm_free(&c->p);
}

extern "C" pdb_status pdb_cuda_v4_mm_create(int device, pdb_v4_mm_provider **out) {
    *out = NULL;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device present";
        cudaGetLastError();
        return pdb_err_set(PDB_CUDA, "cuda v4: no usable GPU (%s)", why);
    }
    if (device < 0 || device >= ndev)
        return pdb_err_set(PDB_CUDA, "cuda v4: device %d requested, %d present", device, ndev);
    cu_v4 *c = (cu_v4 *)calloc(1, sizeof *c);
    if (!c) return pdb_err_set(PDB_NOMEM, "cuda v4 provider");
    c->device = device;
    c->p.name = "cuda";
    c->p.mm = v4_mm;
    c->p.ctx = c;
    c->p.destroy = v4_destroy;
    pdb_status s = PDB_OK;
    e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        s = pdb_err_set(PDB_CUDA, "cuda v4: device %d: %s", device, cudaGetErrorString(e));
    } else {
        c->have_stream = 1;
        s = table_grow(c);
    }
    if (s) { pdb_cuda_v4_mm_free(&c->p); return s; }
    *out = &c->p;
    return PDB_OK;
}
