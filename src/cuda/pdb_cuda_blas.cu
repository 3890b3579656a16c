/* pdb_cuda_blas: cuBLAS loaded at run time (dlopen "libcublas.so.13", then "libcublas.so") and
 * the row-major GEMM wrapper. Invariant: the binary has no link-time cuBLAS dependency; a
 * missing library or symbol is a PDB_CUDA error naming it, never a crash. */
#include <dlfcn.h>
#include <string.h>

#include "pdb_cuda_util.h"

const char *pdb_cuda_blas_status_str(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

static void *blas_sym(void *lib, const char *name, pdb_status *st) {
    void *p = dlsym(lib, name);
    if (!p && *st == PDB_OK) *st = pdb_err_set(PDB_CUDA, "cuBLAS: symbol %s not found in libcublas", name);
    return p;
}

pdb_status pdb_cuda_blas_open(pdb_cuda_blas *b, cudaStream_t stream) {
    memset(b, 0, sizeof *b);
    const char *names[] = {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"};
    const char *err = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !b->lib; i++) {
        b->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!b->lib) err = dlerror();
    }
    if (!b->lib) return pdb_err_set(PDB_CUDA, "cuBLAS: cannot load libcublas.so.13 or libcublas.so (%s)", err ? err : "");
    pdb_status st = PDB_OK;
    *(void **)&b->create = blas_sym(b->lib, "cublasCreate_v2", &st);
    *(void **)&b->destroy = blas_sym(b->lib, "cublasDestroy_v2", &st);
    *(void **)&b->set_stream = blas_sym(b->lib, "cublasSetStream_v2", &st);
    *(void **)&b->set_math_mode = blas_sym(b->lib, "cublasSetMathMode", &st);
    *(void **)&b->gemm_ex = blas_sym(b->lib, "cublasGemmEx", &st);
    *(void **)&b->gemm_sb_ex = blas_sym(b->lib, "cublasGemmStridedBatchedEx", &st);
    *(void **)&b->gemm_batched_ex = blas_sym(b->lib, "cublasGemmBatchedEx", &st);
    if (st) { dlclose(b->lib); memset(b, 0, sizeof *b); return st; }
    cublasStatus_t cs = b->create(&b->h);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        dlclose(b->lib);
        memset(b, 0, sizeof *b);
        return pdb_err_set(PDB_CUDA, "%s:%d cublasCreate_v2: %s", __FILE__, __LINE__, pdb_cuda_blas_status_str(cs));
    }
    b->s = stream;
    PDB_CUBLAS(b->set_stream(b->h, stream));
    PDB_CUBLAS(b->set_math_mode(b->h, CUBLAS_DEFAULT_MATH));
    return PDB_OK;
}

void pdb_cuda_blas_close(pdb_cuda_blas *b) {
    if (b->tail_a) cudaFree(b->tail_a);
    if (b->tail_c) cudaFree(b->tail_c);
    if (b->check_c) cudaFree(b->check_c);
    if (b->check_ne) cudaFree(b->check_ne);
    if (b->h && b->destroy) b->destroy(b->h);
    if (b->lib) dlclose(b->lib);
    memset(b, 0, sizeof *b);
}

/* C's cuBLAS type: f32, or bf16 (rounded to nearest even from the f32 accumulator by cuBLAS's
 * epilogue) only beside bf16 operands (cuBLAS has no f32-operand form writing bf16). */
static pdb_status c_type(pdb_cuda_dt dt, pdb_cuda_dt ct, cudaDataType *t) {
    if (ct == PDB_CUDA_DT_BF16 && dt != PDB_CUDA_DT_BF16)
        return pdb_err_set(PDB_INVALID, "gemm: a bf16 C needs bf16 operands");
    *t = ct == PDB_CUDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    return PDB_OK;
}

/* Column-major view: C^T [N, M] = op(B)^T [N, K] @ A^T [K, M]. A row-major [M,K] (lda) is a
 * column-major [K,M]; B stored [N,K] is a column-major [K,N], transposed to [N,K]; B stored
 * [K,N] is a column-major [N,K] as is. */
static pdb_status gemm_whole_ct(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int b_is_nk, int64_t M, int64_t N,
                                int64_t K, float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb,
                                int64_t sb, float beta, void *C, int64_t ldc, int64_t sc, int64_t batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return PDB_OK;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX ||
        batch > INT32_MAX)
        return pdb_err_set(PDB_TOO_LARGE, "gemm: dimension beyond 32 bits (M %lld N %lld K %lld)", (long long)M,
                           (long long)N, (long long)K);
    cudaDataType t = dt == PDB_CUDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F, tc;
    PDB_TRY(c_type(dt, ct, &tc));
    cublasOperation_t ob = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        PDB_CUBLAS(b->gemm_ex(b->h, ob, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B, t, (int)ldb, A, t, (int)lda,
                              &beta, C, tc, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        PDB_CUBLAS(b->gemm_sb_ex(b->h, ob, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, B, t, (int)ldb, sb, A, t,
                                 (int)lda, sa, &beta, C, tc, (int)ldc, sc, (int)batch, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    }
    return PDB_OK;
}

pdb_status pdb_cuda_gemm_whole(pdb_cuda_blas *b, pdb_cuda_dt dt, int b_is_nk, int64_t M, int64_t N, int64_t K,
                               float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                               float beta, float *C, int64_t ldc, int64_t sc, int64_t batch) {
    return gemm_whole_ct(b, dt, PDB_CUDA_DT_F32, b_is_nk, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

pdb_status pdb_cuda_gemm_ptrs_ct(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int64_t M, int64_t N, int64_t K,
                                 const void *const *A, int64_t lda, const void *const *B, int64_t ldb, void *const *C,
                                 int64_t ldc, int64_t batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return PDB_OK;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX ||
        batch > INT32_MAX)
        return pdb_err_set(PDB_TOO_LARGE, "gemm (pointer arrays): dimension beyond 32 bits");
    cudaDataType t = dt == PDB_CUDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F, tc;
    PDB_TRY(c_type(dt, ct, &tc));
    const float one = 1.0f, zero = 0.0f;
    PDB_CUBLAS(b->gemm_batched_ex(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, B, t, (int)ldb, A, t,
                                  (int)lda, &zero, C, tc, (int)ldc, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return PDB_OK;
}

pdb_status pdb_cuda_gemm_ptrs(pdb_cuda_blas *b, pdb_cuda_dt dt, int64_t M, int64_t N, int64_t K, const void *const *A,
                              int64_t lda, const void *const *B, int64_t ldb, float *const *C, int64_t ldc, int64_t batch) {
    return pdb_cuda_gemm_ptrs_ct(b, dt, PDB_CUDA_DT_F32, M, N, K, A, lda, B, ldb, (void *const *)C, ldc, batch);
}

/* *ne = 1 when tile rows [T, N] of x (ldx) and y (ldy) differ in some bit (U: the element's bits,
 * uint32_t for f32 C, uint16_t for bf16). */
template <typename U>
__global__ void k_tile_ne(const U *x, int64_t ldx, const U *y, int64_t ldy, int64_t T, int64_t N, int *ne) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < T * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / N, c = i - r * N;
        if (x[r * ldx + c] != y[r * ldy + c]) *ne = 1;
    }
}

static pdb_cuda_tile_form *tile_form(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int b_is_nk, int64_t T, int64_t N,
                                     int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    for (int i = 0; i < b->nforms; i++) {
        pdb_cuda_tile_form *f = &b->forms[i];
        if (f->dt == (int)dt && f->ct == (int)ct && f->b_is_nk == b_is_nk && f->T == T && f->N == N && f->K == K &&
            f->lda == lda && f->ldb == ldb && f->ldc == ldc)
            return f;
    }
    if (b->nforms == PDB_CUDA_TILE_FORMS) return NULL; /* table full: such shapes stay one call per tile */
    pdb_cuda_tile_form *f = &b->forms[b->nforms++];
    memset(f, 0, sizeof *f);
    f->dt = (int)dt, f->ct = (int)ct, f->b_is_nk = b_is_nk, f->T = T, f->N = N, f->K = K, f->lda = lda, f->ldb = ldb,
    f->ldc = ldc;
    return f;
}

/* g full tiles from row r0: one strided-batched call when that form is (or is now) known to give
 * each tile its single call's bits, else one call per tile. The check, the first time (shape, g)
 * is met: the batched call, then each tile's single call into scratch, compared bit for bit (one
 * synchronisation); a mismatch marks the pair bad and redoes the tiles one by one (beta is 0).
 * C of type ct (csz bytes an element). */
static pdb_status gemm_tiles(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int b_is_nk, int64_t T, int64_t g, int64_t N,
                             int64_t K, float alpha, const char *A, int64_t lda, const void *B, int64_t ldb, float beta, char *C,
                             int64_t ldc, size_t esz) {
    const size_t csz = pdb_cuda_dt_size(ct);
    pdb_cuda_tile_form *f = g >= 2 && beta == 0.0f && !b->tiles_sequential
                                ? tile_form(b, dt, ct, b_is_nk, T, N, K, lda, ldb, ldc)
                                : NULL;
    const uint64_t bit = f ? 1ull << (g - 1) : 0;
    if (f && !(f->bad & bit)) {
        PDB_TRY(gemm_whole_ct(b, dt, ct, b_is_nk, T, N, K, alpha, A, lda, T * lda, B, ldb, 0, beta, C, ldc, T * ldc, g));
        if (f->ok & bit) return PDB_OK;
        PDB_TRY(pdb_cuda_reserve(&b->check_c, &b->check_c_cap, csz * (size_t)(T * ldc)));
        if (!b->check_ne) PDB_CU(cudaMalloc((void **)&b->check_ne, sizeof(int)));
        PDB_CU(cudaMemsetAsync(b->check_ne, 0, sizeof(int), b->s));
        for (int64_t t = 0; t < g; t++) {
            PDB_TRY(gemm_whole_ct(b, dt, ct, b_is_nk, T, N, K, alpha, A + esz * (size_t)(t * T * lda), lda, 0, B, ldb, 0,
                                  beta, b->check_c, ldc, 0, 1));
            const char *Ct = C + csz * (size_t)(t * T * ldc);
            if (ct == PDB_CUDA_DT_BF16)
                k_tile_ne<<<256, 256, 0, b->s>>>((const uint16_t *)Ct, ldc, (const uint16_t *)b->check_c, ldc, T, N,
                                                 b->check_ne);
            else
                k_tile_ne<<<256, 256, 0, b->s>>>((const uint32_t *)Ct, ldc, (const uint32_t *)b->check_c, ldc, T, N,
                                                 b->check_ne);
            PDB_CU_LAUNCH("gemm tile check");
        }
        int ne = 1;
        PDB_CU(cudaMemcpyAsync(&ne, b->check_ne, sizeof(int), cudaMemcpyDeviceToHost, b->s));
        PDB_CU(cudaStreamSynchronize(b->s));
        b->forms_checked++;
        if (!ne) {
            f->ok |= bit;
            return PDB_OK;
        }
        f->bad |= bit;
        b->forms_rejected++;
    }
    for (int64_t t = 0; t < g; t++)
        PDB_TRY(gemm_whole_ct(b, dt, ct, b_is_nk, T, N, K, alpha, A + esz * (size_t)(t * T * lda), lda, 0, B, ldb, 0, beta,
                              C + csz * (size_t)(t * T * ldc), ldc, 0, 1));
    return PDB_OK;
}

/* M-invariant product: full tiles of T = tile_rows rows in place (gemm_tiles, at most
 * PDB_CUDA_TILE_BATCH_MAX per call); the last rem < T rows are copied (whole row spans, so
 * interleaved batches and other columns of C travel along) into scratch with the same leading
 * dimensions and strides, run as a T-row call, and copied back. Every tile is therefore computed
 * as a single call of the same (M = T, N, K, ld, strides, batch) would compute it, wherever it sits. */
pdb_status pdb_cuda_gemm_ct(pdb_cuda_blas *b, pdb_cuda_dt dt, pdb_cuda_dt ct, int b_is_nk, int64_t M, int64_t N, int64_t K,
                            float alpha, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                            float beta, void *C, int64_t ldc, int64_t sc, int64_t batch) {
    int64_t T = b->tile_rows;
    if (T <= 0 || M <= 0 || N <= 0 || batch <= 0)
        return gemm_whole_ct(b, dt, ct, b_is_nk, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
    if (batch > 1 && ((batch - 1) * sa + K > lda || (batch - 1) * sc + N > ldc))
        return pdb_err_set(PDB_INVALID, "gemm: batches not interleaved within a row (sa %lld, lda %lld)",
                           (long long)sa, (long long)lda);
    size_t esz = pdb_cuda_dt_size(dt), csz = pdb_cuda_dt_size(ct);
    char *Cb = (char *)C;
    int64_t full = M / T * T, rem = M - full;
    if (batch == 1) {
        for (int64_t r0 = 0; r0 < full; r0 += T * PDB_CUDA_TILE_BATCH_MAX) {
            int64_t g = (full - r0) / T < PDB_CUDA_TILE_BATCH_MAX ? (full - r0) / T : PDB_CUDA_TILE_BATCH_MAX;
            PDB_TRY(gemm_tiles(b, dt, ct, b_is_nk, T, g, N, K, alpha, (const char *)A + esz * (size_t)(r0 * lda), lda, B, ldb,
                               beta, Cb + csz * (size_t)(r0 * ldc), ldc, esz));
        }
    } else
        for (int64_t r0 = 0; r0 < full; r0 += T)
            PDB_TRY(gemm_whole_ct(b, dt, ct, b_is_nk, T, N, K, alpha, (const char *)A + esz * (size_t)(r0 * lda), lda, sa, B,
                                  ldb, sb, beta, Cb + csz * (size_t)(r0 * ldc), ldc, sc, batch));
    if (!rem) return PDB_OK;
    size_t a_row = esz * (size_t)((batch - 1) * sa + K), c_row = csz * (size_t)((batch - 1) * sc + N);
    size_t a_need = esz * (size_t)((T - 1) * lda) + a_row, c_need = csz * (size_t)((T - 1) * ldc) + c_row;
    PDB_TRY(pdb_cuda_reserve(&b->tail_a, &b->tail_a_cap, a_need));
    PDB_TRY(pdb_cuda_reserve(&b->tail_c, &b->tail_c_cap, c_need));
    size_t a_span = esz * (size_t)((rem - 1) * lda) + a_row, c_span = csz * (size_t)((rem - 1) * ldc) + c_row;
    PDB_CU(cudaMemcpyAsync(b->tail_a, (const char *)A + esz * (size_t)(full * lda), a_span, cudaMemcpyDeviceToDevice, b->s));
    PDB_CU(cudaMemcpyAsync(b->tail_c, Cb + csz * (size_t)(full * ldc), c_span, cudaMemcpyDeviceToDevice, b->s));
    PDB_TRY(gemm_whole_ct(b, dt, ct, b_is_nk, T, N, K, alpha, b->tail_a, lda, sa, B, ldb, sb, beta, b->tail_c, ldc, sc,
                          batch));
    PDB_CU(cudaMemcpyAsync(Cb + csz * (size_t)(full * ldc), b->tail_c, c_span, cudaMemcpyDeviceToDevice, b->s));
    return PDB_OK;
}

pdb_status pdb_cuda_gemm(pdb_cuda_blas *b, pdb_cuda_dt dt, int b_is_nk, int64_t M, int64_t N, int64_t K, float alpha,
                         const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, float beta,
                         float *C, int64_t ldc, int64_t sc, int64_t batch) {
    return pdb_cuda_gemm_ct(b, dt, PDB_CUDA_DT_F32, b_is_nk, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
