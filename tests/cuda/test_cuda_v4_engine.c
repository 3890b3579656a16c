/* test_cuda_v4_engine: the device-resident DeepSeek-V4 engine (pdb_cuda_v4_engine) against the CPU
 * forward (pdb_v4.c, semantics exact) on make-model's tiny preset (every layer kind: sliding, CSA
 * with its indexer, HCA, hash and score routing). Without a GPU: create fails with PDB_CUDA (CUDA
 * build) or PDB_UNSUPPORTED (no nvcc), with a message, and the GPU checks print "skipped: no GPU".
 * With a GPU: (1) the f32 engine's attention inputs at every layer and its last logits are the CPU's
 * to f32 rounding (relative to each tensor's largest value); (2) the f32 engine run in passes of 37
 * tokens and calls of 100, 1, 63 and the rest gives every hook input and the logits bit for bit as
 * one shot (chunked = one shot); (3) the engine seeded on the device (create_seeded) is the engine
 * loaded from make-model's file of the same seed, bit for bit (f32 and bf16), and the bf16 engine chunked
 * as in (2) is its one shot bit for bit; (4) the bf16 engine is
 * the CPU's to bf16 accuracy (in norm: a top-k pick may differ where two index scores are within
 * bf16 error); (5) with 16-row tiles, the products' full tiles batched into one call (the form
 * checked on the device) give one call per tile's bits, in one shot and chunked as in (2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_cuda.h"
#include "pdb_cuda_v4_engine.h"
#include "pdb_make_model.h"
#include "pdb_test_cuda.h"
#include "pdb_test_util.h"
#include "pdb_v4.h"

enum { T = 300, SEED = 5 };

/* Every layer's attention inputs of a prompt: x [L, T, H]. */
typedef struct capture { float *x; int64_t L, H, calls; } capture;

static pdb_status cap_fn(void *user, int64_t layer, const float *x, int64_t n, int64_t p0) {
    capture *c = user;
    if (layer < 0 || layer >= c->L || p0 < 0 || p0 + n > T) return pdb_err_set(PDB_INVALID, "hook out of range");
    memcpy(c->x + (layer * T + p0) * c->H, x, sizeof(float) * (size_t)(n * c->H));
    c->calls++;
    return PDB_OK;
}

static capture cap_new(const pdb_config *cfg) {
    capture c = {calloc((size_t)(cfg->num_layers * T * cfg->hidden_size), sizeof(float)), cfg->num_layers, cfg->hidden_size, 0};
    assert_non_null(c.x);
    return c;
}

/* ||a - b|| / ||b|| over n values */
static double rms_err(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        m += (double)b[i] * b[i];
    }
    return m > 0 ? sqrt(d / m) : sqrt(d);
}

/* max |a - b| / max |b| over n values */
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return m > 0 ? d / m : d;
}

static void test_without_gpu(void **st) {
    (void)st;
    if (pdb_test_have_gpu()) { printf("a GPU is present: the no-GPU error paths are not exercised\n"); return; }
    pdb_config cfg;
    PDB_TEST_OK(pdb_make_model_preset("deepseek_v4", "tiny", &cfg));
    pdb_cuda_v4_engine *e = (pdb_cuda_v4_engine *)1;
    pdb_status s = pdb_cuda_v4_engine_create_seeded(&cfg, SEED, 0, NULL, &e);
    printf("v4 engine without a GPU: %s: %s\n", pdb_status_str(s), pdb_err_msg());
    assert_int_equal(s, pdb_cuda_built() ? PDB_CUDA : PDB_UNSUPPORTED);
    assert_null(e);
    assert_true(strlen(pdb_err_msg()) > 10);
    printf("skipped: no GPU (GPU checks of this test)\n");
}

/* The engine's hook inputs and last logits for ids, in calls of `calls` tokens (0-terminated;
 * NULL: one call). */
static void run_engine(pdb_cuda_v4_engine *e, const int32_t *ids, const int64_t *calls, capture *c, float *logits) {
    PDB_TEST_OK(pdb_cuda_v4_engine_begin(e, T));
    pdb_v4_hook h = {cap_fn, c, NULL};
    int64_t at = 0;
    for (int i = 0; at < T; i++) {
        int64_t n = calls && calls[i] ? calls[i] : T - at;
        if (at + n > T) n = T - at;
        PDB_TEST_OK(pdb_cuda_v4_engine_forward(e, ids + at, n, &h, at + n == T ? logits : NULL));
        at += n;
    }
    assert_int_equal(pdb_cuda_v4_engine_len(e), T);
    pdb_cuda_v4_engine_end(e);
}

static void test_engine(void **st) {
    (void)st;
    if (!pdb_test_have_gpu()) { printf("skipped: no GPU (v4 engine)\n"); return; }
    char *root = pdb_test_tmpdir("cudav4e"), hf[512];
    snprintf(hf, sizeof hf, "%s/hf", root);
    pdb_make_model_opts mo = {.arch = "deepseek_v4", .preset = "tiny", .seed = SEED, .out_dir = hf};
    PDB_TEST_OK(pdb_make_model_write(&mo));
    pdb_v4_model *m = NULL;
    PDB_TEST_OK(pdb_v4_load(hf, &m));
    const pdb_config *cfg = &m->cfg;
    const int64_t L = cfg->num_layers, H = cfg->hidden_size, V = cfg->vocab_size, NX = L * T * H;
    int32_t ids[T];
    pdb_test_ids(ids, T, V, 41);

    /* the CPU forward (semantics exact: no FP8/FP4 simulation, as the engine) */
    capture ref = cap_new(cfg);
    float *lref = malloc(sizeof(float) * (size_t)V);
    pdb_v4_cache cc;
    PDB_TEST_OK(pdb_v4_cache_init(&cc, m, T, PDB_V4_SEM_EXACT));
    pdb_v4_hook h = {cap_fn, &ref, NULL};
    PDB_TEST_OK(pdb_v4_forward_hooked(m, &cc, ids, T, 0, lref, &h));
    pdb_v4_cache_free(&cc);

    /* (1) f32 engine = CPU to f32 rounding, layer by layer */
    pdb_cuda_v4_engine_opts f32o = {.prec = PDB_CUDA_PREC_F32};
    pdb_cuda_v4_engine *e = NULL;
    PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &f32o, &e));
    printf("f32 engine: %lld weight bytes on the device\n", (long long)pdb_cuda_v4_engine_weight_bytes(e));
    capture one = cap_new(cfg);
    float *lone = malloc(sizeof(float) * (size_t)V);
    run_engine(e, ids, NULL, &one, lone);
    double worst = 0;
    for (int64_t l = 0; l < L; l++) {
        double r = rel_err(one.x + l * T * H, ref.x + l * T * H, T * H);
        printf("cuda-metric v4 engine f32 layer %lld attention input: rel err %.3g\n", (long long)l, r);
        worst = r > worst ? r : worst;
    }
    double rl = rel_err(lone, lref, V);
    printf("cuda-metric v4 engine f32 logits: rel err %.3g\n", rl);
    assert_true(worst < 1e-4);
    assert_true(rl < 1e-4);

    /* (2) passes of 37 tokens, calls of 100, 1, 63, rest: the same bits */
    pdb_cuda_v4_engine_free(e);
    pdb_cuda_v4_engine_opts f32c = {.prec = PDB_CUDA_PREC_F32, .sub_chunk = 37};
    PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &f32c, &e));
    capture ch = cap_new(cfg);
    float *lch = malloc(sizeof(float) * (size_t)V);
    const int64_t calls[] = {100, 1, 63, 0};
    run_engine(e, ids, calls, &ch, lch);
    int64_t same = 0;
    for (int64_t i = 0; i < NX; i++) same += ch.x[i] == one.x[i];
    printf("cuda-metric v4 engine f32 chunked (passes of 37; calls 100, 1, 63, rest) vs one shot: %lld/%lld hook values "
           "identical, logits %s\n", (long long)same, (long long)NX, memcmp(lch, lone, sizeof(float) * (size_t)V) ? "differ" : "identical");
    assert_int_equal(same, NX);
    assert_memory_equal(lch, lone, sizeof(float) * (size_t)V);
    pdb_cuda_v4_engine_free(e);

    /* (3) seeded on the device = loaded from the file of the same seed; (4) bf16 vs the CPU */
    for (int prec = 0; prec < 2; prec++) {
        pdb_cuda_v4_engine_opts o = {.prec = prec ? PDB_CUDA_PREC_F32 : PDB_CUDA_PREC_BF16};
        pdb_cuda_v4_engine *ef = NULL, *es = NULL;
        PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &o, &ef));
        PDB_TEST_OK(pdb_cuda_v4_engine_create_seeded(cfg, SEED, 0, &o, &es));
        assert_int_equal(pdb_cuda_v4_engine_weight_bytes(ef), pdb_cuda_v4_engine_weight_bytes(es));
        capture cf = cap_new(cfg), cs = cap_new(cfg);
        float *lf = malloc(sizeof(float) * (size_t)V), *ls = malloc(sizeof(float) * (size_t)V);
        run_engine(ef, ids, NULL, &cf, lf);
        run_engine(es, ids, NULL, &cs, ls);
        int64_t eq = 0;
        for (int64_t i = 0; i < NX; i++) eq += cf.x[i] == cs.x[i];
        printf("cuda-metric v4 engine %s seeded vs file: %lld/%lld hook values identical, logits %s\n", prec ? "f32" : "bf16",
               (long long)eq, (long long)NX, memcmp(lf, ls, sizeof(float) * (size_t)V) ? "differ" : "identical");
        assert_int_equal(eq, NX);
        assert_memory_equal(lf, ls, sizeof(float) * (size_t)V);
        if (!prec) {
            /* bf16 rounding, and the indexer's top-k picking another entry where two scores are within
             * bf16 error (tiny's index_topk is 4 of up to 75): bounded in norm, the worst value printed */
            double wb = 0;
            for (int64_t l = 0; l < L; l++) {
                double r = rms_err(cf.x + l * T * H, ref.x + l * T * H, T * H);
                printf("cuda-metric v4 engine bf16 layer %lld attention input: rel err (norm) %.3g, worst value %.3g\n",
                       (long long)l, r, rel_err(cf.x + l * T * H, ref.x + l * T * H, T * H));
                wb = r > wb ? r : wb;
            }
            double rb = rel_err(lf, lref, V);
            printf("cuda-metric v4 engine bf16 logits: rel err %.3g\n", rb);
            assert_true(wb < 0.05);
            assert_true(rb < 0.05);
        }
        if (!prec) { /* bf16 chunked = one shot too (cuBLAS expert tiles in fixed-size groups, attention per token) */
            pdb_cuda_v4_engine_opts oc = {.prec = PDB_CUDA_PREC_BF16, .sub_chunk = 37};
            pdb_cuda_v4_engine *ec = NULL;
            PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &oc, &ec));
            capture cc2 = cap_new(cfg);
            float *lc = malloc(sizeof(float) * (size_t)V);
            run_engine(ec, ids, calls, &cc2, lc);
            int64_t eqc = 0;
            for (int64_t i = 0; i < NX; i++) eqc += cc2.x[i] == cf.x[i];
            printf("cuda-metric v4 engine bf16 chunked (passes of 37; calls 100, 1, 63, rest) vs one shot: %lld/%lld hook values "
                   "identical, logits %s\n", (long long)eqc, (long long)NX, memcmp(lc, lf, sizeof(float) * (size_t)V) ? "differ" : "identical");
            assert_int_equal(eqc, NX);
            assert_memory_equal(lc, lf, sizeof(float) * (size_t)V);
            free(lc);
            pdb_cuda_v4_engine_free(ec);
            /* hookless (no hook slots): the same logits, and a forward with a hook refused */
            pdb_cuda_v4_engine_opts on = {.prec = PDB_CUDA_PREC_BF16, .sub_chunk = 37, .hookless = 1};
            PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &on, &ec));
            float *ln = malloc(sizeof(float) * (size_t)V);
            PDB_TEST_OK(pdb_cuda_v4_engine_begin(ec, T));
            pdb_v4_hook hn = {cap_fn, &cc2, NULL};
            assert_int_equal(pdb_cuda_v4_engine_forward(ec, ids, T, &hn, ln), PDB_INVALID);
            PDB_TEST_OK(pdb_cuda_v4_engine_begin(ec, T));
            PDB_TEST_OK(pdb_cuda_v4_engine_forward(ec, ids, T, NULL, ln));
            pdb_cuda_v4_engine_end(ec);
            printf("cuda-metric v4 engine bf16 hookless vs hooked: logits %s\n", memcmp(ln, lf, sizeof(float) * (size_t)V) ? "differ" : "identical");
            assert_memory_equal(ln, lf, sizeof(float) * (size_t)V);
            free(ln), free(cc2.x);
            pdb_cuda_v4_engine_free(ec);
        }
        free(cf.x), free(cs.x), free(lf), free(ls);
        pdb_cuda_v4_engine_free(ef);
        pdb_cuda_v4_engine_free(es);
    }
    /* (5) the products' full tiles batched into one call (the checked form, pdb_cuda_gemm): 16-row
     * tiles, so a one-shot pass of 300 tokens batches 18 tiles and passes of 37 batch 2; both give the
     * bits of every tile on its own call (tiles_sequential), in one shot and chunked */
    float *lt[3];
    capture ct[3];
    int64_t checked = 0, rejected = 0;
    for (int k = 0; k < 3; k++) {
        pdb_cuda_v4_engine_opts ot = {.prec = PDB_CUDA_PREC_BF16, .gemm_rows = 16, .gemm_tiles_sequential = k == 2,
                                      .sub_chunk = k == 1 ? 37 : 0};
        pdb_cuda_v4_engine *et = NULL;
        PDB_TEST_OK(pdb_cuda_v4_engine_create(m, 0, &ot, &et));
        ct[k] = cap_new(cfg);
        lt[k] = malloc(sizeof(float) * (size_t)V);
        run_engine(et, ids, k == 1 ? calls : NULL, &ct[k], lt[k]);
        if (k == 0) pdb_cuda_v4_engine_gemm_forms(et, &checked, &rejected);
        pdb_cuda_v4_engine_free(et);
    }
    for (int k = 1; k < 3; k++) {
        int64_t eqt = 0;
        for (int64_t i = 0; i < NX; i++) eqt += ct[k].x[i] == ct[0].x[i];
        printf("cuda-metric v4 engine bf16 16-row tiles, batched one shot (%lld forms checked, %lld refused) vs %s: "
               "%lld/%lld hook values identical, logits %s\n", (long long)checked, (long long)rejected,
               k == 1 ? "batched chunked (passes of 37; calls 100, 1, 63, rest)" : "one call per tile", (long long)eqt,
               (long long)NX, memcmp(lt[k], lt[0], sizeof(float) * (size_t)V) ? "differ" : "identical");
        assert_int_equal(eqt, NX);
        assert_memory_equal(lt[k], lt[0], sizeof(float) * (size_t)V);
    }
    assert_true(checked > 0);
    for (int k = 0; k < 3; k++) free(ct[k].x), free(lt[k]);
    free(ref.x), free(one.x), free(ch.x), free(lref), free(lone), free(lch);
    pdb_v4_free(m);
    pdb_test_rmrf(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_without_gpu), cmocka_unit_test(test_engine)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
