/* test_prefill_cuda_v4: DeepSeek-V4 prefill with its matrix products on the GPU (pdb_cuda_v4 and
 * pdb_prefill_backend_cuda_v4_create). Without a GPU: creating the provider and the backend fails
 * with PDB_CUDA (CUDA build) or PDB_UNSUPPORTED (no nvcc), with a message, nothing crashes, and the
 * GPU checks print "skipped: no GPU". With a GPU: (1) the provider's products equal
 * pdb_v4_mm_ref bit for bit on shapes with strides, K not a multiple of 8, one row, thousands of
 * columns, accumulation, and a weight seen again (its device copy reused); (2) the CUDA backend's
 * segments on the tiny preset (every attention path) are the decoder's own blocks bit for bit in
 * both semantics, for chunks 7, 45, 130 and one shot (issue 8: V4 pool exactness on CUDA). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_cuda.h"
#include "pdb_cuda_v4.h"
#include "pdb_dec_model.h"
#include "pdb_make_model.h"
#include "pdb_prefill_engine.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"

static int have_gpu(void) {
    char name[256];
    int n = pdb_cuda_device_count(name, sizeof name);
    if (n > 0) printf("cuda device: %s\n", name);
    return n > 0;
}

static void test_without_gpu(void **st) {
    (void)st;
    if (have_gpu()) { printf("a GPU is present: the no-GPU error paths are not exercised\n"); return; }
    pdb_v4_mm_provider *p = (pdb_v4_mm_provider *)1;
    pdb_status s = pdb_cuda_v4_mm_create(0, &p);
    printf("provider without a GPU: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_equal(s, pdb_cuda_built() ? PDB_CUDA : PDB_UNSUPPORTED);
    assert_null(p);
    assert_true(strlen(pdb_err_msg()) > 10);
    pdb_config cfg = {0};
    pdb_prefill_backend_opts o = {.cfg = &cfg};
    pdb_prefill_backend *be = (pdb_prefill_backend *)1;
    assert_int_equal(pdb_prefill_backend_cuda_v4_create(&o, &be), s);
    assert_null(be);
    printf("skipped: no GPU (GPU checks of this test)\n");
}

static float frand(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return ((float)(*x >> 8) / 16777216.0f - 0.5f) * 4.0f;
}

static void test_mm_matches_reference(void **st) {
    (void)st;
    if (!have_gpu()) { printf("skipped: no GPU (provider products)\n"); return; }
    pdb_v4_mm_provider *p = NULL;
    PDB_TEST_OK(pdb_cuda_v4_mm_create(0, &p));
    struct { int64_t M, N, K, lda, ldb, ldc; int acc; } sh[] = {
        {1, 1, 1, 1, 1, 1, 0},          {3, 5, 7, 9, 8, 6, 0},           {300, 257, 4099, 4101, 4099, 300, 0},
        {64, 1000, 64, 64, 64, 1000, 1}, {2, 4096, 4096, 4096, 4096, 4096, 0}, {129, 33, 520, 520, 524, 40, 1},
    };
    uint32_t x = 5;
    int64_t total = 0;
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        int64_t M = sh[i].M, N = sh[i].N, K = sh[i].K;
        float *A = malloc(sizeof(float) * (size_t)(M * sh[i].lda)), *B = malloc(sizeof(float) * (size_t)(N * sh[i].ldb));
        float *C = malloc(sizeof(float) * (size_t)(M * sh[i].ldc)), *R = malloc(sizeof(float) * (size_t)(M * sh[i].ldc));
        for (int64_t j = 0; j < M * sh[i].lda; j++) A[j] = frand(&x);
        for (int64_t j = 0; j < N * sh[i].ldb; j++) B[j] = frand(&x) * 0.03f;
        for (int64_t j = 0; j < M * sh[i].ldc; j++) C[j] = R[j] = frand(&x);
        for (int rep = 0; rep < 2; rep++) { /* the second time B's device copy is reused */
            PDB_TEST_OK(p->mm(p->ctx, M, N, K, A, sh[i].lda, B, sh[i].ldb, sh[i].acc, C, sh[i].ldc));
            pdb_v4_mm_ref(M, N, K, A, sh[i].lda, B, sh[i].ldb, sh[i].acc, R, sh[i].ldc);
            if (memcmp(C, R, sizeof(float) * (size_t)(M * sh[i].ldc)))
                fail_msg("shape %zu (M %lld N %lld K %lld acc %d) rep %d differs from pdb_v4_mm_ref", i, (long long)M,
                         (long long)N, (long long)K, sh[i].acc, rep);
        }
        total += 2 * M * N;
        free(A); free(B); free(C); free(R);
    }
    printf("cuda-metric v4 provider: %lld products bit-identical to pdb_v4_mm_ref over %zu shapes\n", (long long)total,
           sizeof sh / sizeof sh[0]);
    p->destroy(p->ctx);
}

enum { BS = 128, T = 2 * BS + 44, NB = T / BS };

typedef struct { char *blocks; uint64_t bytes; int n; } sink;

static pdb_status on_seg(void *u, int64_t b, const float *data, uint64_t bytes) {
    sink *s = u;
    s->bytes = bytes;
    memcpy(s->blocks + b * bytes, data, bytes);
    s->n++;
    return PDB_OK;
}

/* The decoder's own blocks: one block per forward, snapshot at each end. */
static char *decoder_blocks(const char *dec, const int32_t *ids, uint64_t *bytes) {
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m));
    *bytes = pdb_dec_model_block_bytes(m, BS);
    char *out = malloc(*bytes * NB);
    PDB_TEST_OK(pdb_dec_model_native_blocks(m, ids, NB, BS, out));
    pdb_dec_model_close(m);
    return out;
}

static void check_blocks(const char *hf, const char *dec, const int32_t *ids) {
    uint64_t bytes;
    char *ref = decoder_blocks(dec, ids, &bytes);
    pdb_config cfg;
    pdb_st *e, *d;
    PDB_TEST_OK(pdb_config_load(hf, &cfg));
    PDB_TEST_OK(pdb_st_open(hf, &e));
    PDB_TEST_OK(pdb_st_open(dec, &d));
    int sem = 0;
    PDB_TEST_OK(pdb_dec_model_v4_semantics(dec, &sem));
    pdb_prefill_backend_opts o = {.cfg = &cfg, .engine = e, .decoder = d, .threads = 2, .v4_sem = sem, .device = 0};
    pdb_prefill_backend *be = NULL;
    PDB_TEST_OK(pdb_prefill_backend_cuda_v4_create(&o, &be));
    assert_string_equal(be->name, "cuda");
    sink s = {.blocks = malloc(bytes * NB)};
    int64_t chunks[] = {7, 45, 130, 1000};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        memset(s.blocks, 0x5a, bytes * NB);
        s.n = 0;
        PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, chunks[k], on_seg, &s, NULL));
        assert_int_equal(s.n, NB);
        int64_t same = 0;
        for (uint64_t i = 0; i < bytes * NB; i++) same += s.blocks[i] == ref[i];
        printf("cuda-metric v4 %s chunk=%lld: %d blocks, %lld/%llu bytes identical to the decoder's blocks\n", dec,
               (long long)chunks[k], NB, (long long)same, (unsigned long long)(bytes * NB));
        assert_int_equal(same, (int64_t)(bytes * NB));
    }
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
}

static void test_blocks_match_decoder(void **st) {
    (void)st;
    if (!have_gpu()) { printf("skipped: no GPU (V4 blocks on CUDA)\n"); return; }
    char *root = pdb_test_tmpdir("cudav4"), hf[512], dn[512], dx[512];
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dn, sizeof dn, "%s/official", root);
    snprintf(dx, sizeof dx, "%s/exact", root);
    pdb_make_model_opts mo = {.arch = "deepseek_v4", .preset = "tiny", .seed = 8, .out_dir = hf};
    PDB_TEST_OK(pdb_make_model_write(&mo));
    PDB_TEST_OK(pdb_quantize_model(hf, dn, "none", 0));
    PDB_TEST_OK(pdb_quantize_model_ex(hf, dx, "none", "exact", 0));
    int32_t ids[T];
    uint32_t x = 23;
    for (int i = 0; i < T; i++) { x = x * 1664525u + 1013904223u; ids[i] = (int32_t)((x >> 8) % 1000); }
    check_blocks(hf, dn, ids);
    check_blocks(hf, dx, ids);
    pdb_test_rmrf(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_gpu),
        cmocka_unit_test(test_mm_matches_reference),
        cmocka_unit_test(test_blocks_match_decoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
