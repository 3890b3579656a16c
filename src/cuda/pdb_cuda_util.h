/* pdb_cuda_util: internal helpers of the CUDA backend (C++/CUDA translation units only): the
 * one checking macro for CUDA and cuBLAS calls, cuBLAS resolved at run time through dlopen (no
 * link-time dependency: a binary built here runs on machines without cuBLAS and reports it),
 * and the row-major GEMM wrapper every engine matrix product goes through.
 * Invariants: every CUDA/cuBLAS call is checked and a failure becomes PDB_CUDA with
 * "file:line call: message" in pdb_err_msg(); nothing here exits or aborts; GEMMs accumulate in
 * f32 (CUBLAS_COMPUTE_32F, default math mode: no TF32 on f32 inputs) and write f32 C, or (the _ct
 * forms, bf16 operands only) bf16 C rounded once from that f32 sum; with tile_rows > 0 every
 * GEMM runs as cuBLAS products of exactly tile_rows rows (the last tile padded through a scratch
 * copy), so cuBLAS sees the same shape whatever M is and a row's result does not depend on how
 * many rows a call holds (chunked prefill = one-shot); full tiles batched into one call only in
 * forms checked on this device to give each tile its single call's bits. */
#ifndef PDB_CUDA_UTIL_H
#define PDB_CUDA_UTIL_H

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "pdb_status.h"
}

/* Check a cudaError_t-returning call; on failure set PDB_CUDA and return it from the caller. */
#define PDB_CU(call)                                                                                  \
    do {                                                                                              \
        cudaError_t pdb_cu_e_ = (call);                                                               \
        if (pdb_cu_e_ != cudaSuccess) {                                                               \
            cudaGetLastError();                                                                       \
            return pdb_err_set(PDB_CUDA, "%s:%d %s: %s", __FILE__, __LINE__, #call,                   \
                               cudaGetErrorString(pdb_cu_e_));                                        \
        }                                                                                             \
    } while (0)

/* After a kernel launch: launch-configuration errors and (asynchronously) earlier faults. */
#define PDB_CU_LAUNCH(what) PDB_CU(cudaPeekAtLastError())

/* Check a cublasStatus_t-returning call made through the dlopen'ed table. */
#define PDB_CUBLAS(call)                                                                              \
    do {                                                                                              \
        cublasStatus_t pdb_cb_e_ = (call);                                                            \
        if (pdb_cb_e_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return pdb_err_set(PDB_CUDA, "%s:%d %s: %s", __FILE__, __LINE__, #call,                   \
                               pdb_cuda_blas_status_str(pdb_cb_e_));                                  \
    } while (0)

/* Select CUDA device `device` for the calling thread; PDB_CUDA "<who>: no usable GPU (...)" or
 * "<who>: device D requested, N present" otherwise (the driver's message included). */
pdb_status pdb_cuda_use_device(int device, const char *who);
/* Grow a device buffer to at least `need` bytes (contents not kept; cudaFree waits for the work
 * that used the old one). */
pdb_status pdb_cuda_reserve(void **p, size_t *cap, size_t need);
/* Synchronous host -> device copy; PDB_CUDA naming `what` on failure (never a partial return). */
pdb_status pdb_cuda_to_device(void *dst, const void *src, size_t bytes, const char *what);

/* The device allocations of one lifetime (an engine's weights, a sequence's buffers), freed at
 * once (pdb_cuda_util.cu). */
typedef struct pdb_cuda_dlist { void **p; int n, cap; } pdb_cuda_dlist;
/* cudaMalloc `bytes` into *p and the list; PDB_CUDA naming `what`, the size and the free memory. */
pdb_status pdb_cuda_dlist_alloc(pdb_cuda_dlist *l, void **p, size_t bytes, const char *what);
template <typename T> static inline pdb_status pdb_cuda_dalloc(pdb_cuda_dlist *l, T **p, size_t bytes, const char *what) {
    void *v = NULL;
    PDB_TRY(pdb_cuda_dlist_alloc(l, &v, bytes, what));
    *p = (T *)v;
    return PDB_OK;
}
void pdb_cuda_dlist_free(pdb_cuda_dlist *l);

/* Stage profile of an engine's passes: mark(st) records an event on the stream that ends stage st;
 * collect (after the pass's synchronisation) adds each stage's time (its event minus the one
 * before); take prints "stage=ms ... total_ms=X" and resets. cap 0 (off) or full: marks are no-ops. */
enum { PDB_CUDA_PROF_STAGES = 32 };
typedef struct pdb_cuda_prof {
    cudaEvent_t *ev;
    int *st, n, cap, nst;
    double ms[PDB_CUDA_PROF_STAGES];
    const char *const *names;
} pdb_cuda_prof;
pdb_status pdb_cuda_prof_init(pdb_cuda_prof *p, int cap, const char *const *names, int nst);
pdb_status pdb_cuda_prof_mark(pdb_cuda_prof *p, cudaStream_t s, int st);
pdb_status pdb_cuda_prof_collect(pdb_cuda_prof *p);
void pdb_cuda_prof_take(pdb_cuda_prof *p, char *buf, size_t n);
void pdb_cuda_prof_free(pdb_cuda_prof *p);

/* Element type of engine weights and GEMM operands on the device. */
typedef enum pdb_cuda_dt { PDB_CUDA_DT_BF16 = 0, PDB_CUDA_DT_F32 = 1 } pdb_cuda_dt;
/* Bytes per element of type dt. */
static inline size_t pdb_cuda_dt_size(pdb_cuda_dt dt) { return dt == PDB_CUDA_DT_F32 ? 4 : 2; }

/* A product shape whose full tiles may run as one strided-batched call (pdb_cuda_gemm): bit g-1 of
 * ok (bad) says a call of g tiles was checked to give (not to give) each tile's single-call bits. */
typedef struct pdb_cuda_tile_form {
    int dt, ct, b_is_nk; /* operands' and C's types */
    int64_t T, N, K, lda, ldb, ldc;
    uint64_t ok, bad;
} pdb_cuda_tile_form;

enum { PDB_CUDA_TILE_FORMS = 64, PDB_CUDA_TILE_BATCH_MAX = 64 /* tiles per batched call */ };

typedef struct pdb_cuda_blas {
    void *lib; /* dlopen handle */
    cublasHandle_t h;
    cudaStream_t s;
    int64_t tile_rows;          /* > 0: M-invariant GEMMs in tiles of this many rows; 0: whole M */
    int tiles_sequential;       /* 1: the full tiles as one call each (never batched) */
    void *tail_a;               /* scratch for the last, partial tile (device) */
    void *tail_c;
    size_t tail_a_cap, tail_c_cap; /* bytes */
    void *check_c;              /* one tile's single-call C while a batched form is checked (device) */
    size_t check_c_cap;
    int *check_ne;              /* device flag: some bits differed */
    pdb_cuda_tile_form forms[PDB_CUDA_TILE_FORMS];
    int nforms;
    int64_t forms_checked, forms_rejected; /* (shape, tile count) pairs checked / found to differ */
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_sb_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                 const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
                                 const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
                                 cublasGemmAlgo_t);
    cublasStatus_t (*gemm_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                      const void *const *, cudaDataType, int, const void *const *, cudaDataType, int,
                                      const void *, void *const *, cudaDataType, int, int, cublasComputeType_t,
                                      cublasGemmAlgo_t);
} pdb_cuda_blas;

const char *pdb_cuda_blas_status_str(cublasStatus_t s);
/* dlopen libcublas.so.13 (then libcublas.so), resolve the table, create a handle on stream. */
pdb_status pdb_cuda_blas_open(pdb_cuda_blas *b, cudaStream_t stream);
void pdb_cuda_blas_close(pdb_cuda_blas *b);

/* Row-major C[M,N] (ldc, f32) = alpha * A[M,K] (lda) @ op(B) + beta * C, with A and B of type dt.
 * b_is_nk: B is stored [N,K] (a PyTorch Linear weight; op(B) = B^T), else [K,N].
 * batch > 1: strided batches (element strides sa, sb, sc) interleaved within a row
 * ((batch - 1) * sa + K <= lda, likewise for C), as the per-head products are.
 * With b->tile_rows > 0 the product runs in M-invariant tiles (see above): when batch == 1, beta == 0
 * and !tiles_sequential, g >= 2 full tiles run as one strided-batched call (B's stride 0) once that
 * form was checked, the first time this (shape, g) is met, to give every tile the bits of its own
 * single call (else, and for ever after for that pair, one call per tile). */
pdb_status pdb_cuda_gemm(pdb_cuda_blas *b, pdb_cuda_dt dt, int b_is_nk, int64_t M, int64_t N, int64_t K, float alpha,
                         const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta,
                         float *C, int64_t ldc, int64_t sc, int64_t batch);
/* The same with C of type ct (ldc, sc in elements): PDB_CUDA_DT_F32 is pdb_cuda_gemm; PDB_CUDA_DT_BF16
 * (dt bf16 only, else PDB_INVALID) has cuBLAS round each f32 sum to bf16 (nearest even) as it stores
 * it: half C's bytes, for products read once by an elementwise kernel. Tiles, batching and the
 * batched form's check (per (dt, ct, shape, g)) as pdb_cuda_gemm's. */
pdb_status pdb_cuda_gemm_ct(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int b_is_nk, int64_t M, int64_t N, int64_t K,
                            float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                            float beta, void *C, int64_t ldc, int64_t sc, int64_t batch);
/* Row-major C_i [M, N] (ldc, f32) = A_i [M, K] (lda, dt) . B_i [N, K]^T (ldb, dt) for i < batch, the
 * pointers in device arrays (one cuBLAS call: a grouped product, e.g. one tile of rows per expert). */
pdb_status pdb_cuda_gemm_ptrs(pdb_cuda_blas *b, pdb_cuda_dt dt, int64_t M, int64_t N, int64_t K, const void *const *A,
                              int64_t lda, const void *const *B, int64_t ldb, float *const *C, int64_t ldc, int64_t batch);
/* The same with C_i of type ct (as pdb_cuda_gemm_ct: bf16 C beside bf16 operands only). */
pdb_status pdb_cuda_gemm_ptrs_ct(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int64_t M, int64_t N, int64_t K,
                                 const void *const *A, int64_t lda, const void *const *B, int64_t ldb, void *const *C,
                                 int64_t ldc, int64_t batch);
/* The same product as one cuBLAS call whatever M is (for products whose M never varies, e.g. the
 * one-row lm_head). */
pdb_status pdb_cuda_gemm_whole(pdb_cuda_blas *b, pdb_cuda_dt dt, int b_is_nk, int64_t M, int64_t N, int64_t K,
                               float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                               int64_t sb, float beta, float *C, int64_t ldc, int64_t sc, int64_t batch);

/* 1 when warpgroup-MMA kernels can run: this build has sm_90a code (PDB_CUDA_WGMMA) and the current device is
 * compute capability 9.0 (pdb_cuda_wgmma.h's kernels). */
int pdb_cuda_wgmma_usable(void);

#endif
