/* test_prefill_v4: the CPU prefill engine on DeepSeek-V4 (tiny preset: window 8, CSA rate 4 with
 * its indexer, HCA rate 16). Its segments (the decoder's V4 pools per block: window rows,
 * compressed entries, indexer keys, overlap halves) are bit-identical to the decoder's own blocks
 * for the same tokens (same weights: --scheme none), in both semantics, for chunks 1, 7, 45, 130
 * (not aligned to 4 or 128) and one shot, and from a later first block; the hook computes with
 * the DECODER's weights (another decoder checkpoint gives other segments). MX decoder
 * (quantize --scheme mx): with the engine on the MX checkpoint too, the segments are the MX
 * decoder's blocks bit for bit; with the engine on its own bf16 weights (the bridge's normal
 * case) the blocks differ from layer 1 on, as V2's do: layer 0's window rows are identical (its
 * attention input is the embedding through unquantized hc/norm weights) and the agreement per
 * pool is reported. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_dec_model.h"
#include "pdb_make_model.h"
#include "pdb_prefill_engine.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"

enum { BS = 128, T = 2 * BS + 44, NB = T / BS };
static char *root, hf[512], dn[512], dx[512], dmx[512], dother[512], hother[512];
static int32_t ids[T];

static int setup(void **st) {
    root = pdb_test_tmpdir("prev4");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dn, sizeof dn, "%s/none", root);
    snprintf(dx, sizeof dx, "%s/exact", root);
    snprintf(hother, sizeof hother, "%s/hf2", root);
    snprintf(dother, sizeof dother, "%s/other", root);
    snprintf(dmx, sizeof dmx, "%s/mx", root);
    pdb_make_model_opts o = {.arch = "deepseek_v4", .preset = "tiny", .seed = 8, .out_dir = hf};
    pdb_make_model_opts o2 = {.arch = "deepseek_v4", .preset = "tiny", .seed = 9, .out_dir = hother};
    if (pdb_make_model_write(&o) || pdb_make_model_write(&o2) || pdb_quantize_model(hf, dn, "none", 0) ||
        pdb_quantize_model_ex(hf, dx, "none", "exact", 0) || pdb_quantize_model(hother, dother, "none", 0) ||
        pdb_quantize_model(hf, dmx, "mx", 0)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    pdb_test_ids(ids, T, 1000, 23);
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

typedef struct { char *blocks; uint64_t bytes; int64_t got[NB]; int n; } sink;

static pdb_status on_seg(void *u, int64_t b, const void *data, uint64_t bytes) {
    sink *s = u;
    s->bytes = bytes;
    memcpy(s->blocks + b * bytes, data, bytes);
    s->got[s->n++] = b;
    return PDB_OK;
}

/* The decoder's own blocks for the prompt: prefill one block per forward, snapshot at each end. */
static char *decoder_blocks(const char *dec, uint64_t *bytes) {
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m));
    *bytes = pdb_store_layout_block_bytes(pdb_dec_model_layout(m), BS);
    char *out = malloc(*bytes * NB);
    PDB_TEST_OK(pdb_dec_model_native_blocks(m, ids, NB, BS, out));
    pdb_dec_model_close(m);
    return out;
}

static pdb_prefill_backend *make_backend_on(const char *engine, const char *dec, pdb_st **e, pdb_st **d, pdb_config *cfg) {
    PDB_TEST_OK(pdb_config_load(hf, cfg));
    PDB_TEST_OK(pdb_st_open(engine, e));
    PDB_TEST_OK(pdb_st_open(dec, d));
    int sem = 0;
    PDB_TEST_OK(pdb_dec_model_semantics_of(dec, cfg, &sem));
    /* 3 threads: the pool-run products, attention and indexer tasks must match the single-threaded decoder */
    pdb_prefill_backend_opts o = {.cfg = cfg, .engine = *e, .decoder = *d, .semantics = sem, .exec = {.threads = 3}};
    pdb_prefill_backend *be = NULL;
    PDB_TEST_OK(pdb_prefill_backend_create(&o, "cpu", &be));
    assert_non_null(be->get_block);
    return be;
}

static pdb_prefill_backend *make_backend(const char *dec, pdb_st **e, pdb_st **d, pdb_config *cfg) {
    return make_backend_on(hf, dec, e, d, cfg);
}

static void check_decoder_on(const char *engine, const char *dec, const int64_t *chunks, int nchunks) {
    uint64_t bytes;
    char *ref = decoder_blocks(dec, &bytes);
    pdb_st *e, *d;
    pdb_config cfg;
    pdb_prefill_backend *be = make_backend_on(engine, dec, &e, &d, &cfg);
    sink s = {.blocks = malloc(bytes * NB)};
    for (int k = 0; k < nchunks; k++) {
        memset(s.blocks, 0x5a, bytes * NB);
        s.n = 0;
        pdb_prefill_stats ps;
        PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, chunks[k], on_seg, &s, &ps));
        assert_int_equal(s.n, NB);
        assert_int_equal(ps.tokens_run, NB * BS);
        assert_int_equal(s.bytes, bytes);
        for (int b = 0; b < NB; b++)
            if (memcmp(s.blocks + b * bytes, ref + b * bytes, bytes))
                fail_msg("%s chunk %lld: segment %d differs from the decoder's block", dec, (long long)chunks[k], b);
    }
    memset(s.blocks, 0, bytes * NB);
    s.n = 0;
    PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 1, 37, on_seg, &s, NULL));
    assert_int_equal(s.n, 1);
    assert_int_equal(s.got[0], 1);
    assert_memory_equal(s.blocks + bytes, ref + bytes, bytes);
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
    printf("  %s: %d segments of %llu bytes == the decoder's blocks bit for bit, %d chunkings, first_block 0 and 1\n", dec, NB,
           (unsigned long long)bytes, nchunks);
}

static void check_decoder(const char *dec, const int64_t *chunks, int nchunks) { check_decoder_on(hf, dec, chunks, nchunks); }

static void test_official(void **st) {
    int64_t chunks[] = {1, 7, 45, 130, 1000};
    check_decoder(dn, chunks, 5);
}

static void test_exact(void **st) {
    int64_t chunks[] = {33, 1000};
    check_decoder(dx, chunks, 2);
}

static void test_hook_uses_decoder_weights(void **st) {
    uint64_t bytes;
    char *ref = decoder_blocks(dn, &bytes);
    pdb_st *e, *d;
    pdb_config cfg;
    pdb_prefill_backend *be = make_backend(dother, &e, &d, &cfg);
    sink s = {.blocks = malloc(bytes * NB)};
    PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, 64, on_seg, &s, NULL));
    assert_int_equal(s.n, NB);
    assert_memory_not_equal(s.blocks, ref, bytes);
    /* a block size that is not a multiple of a compression rate is refused */
    cfg.compress_rate_hca = 96;
    assert_int_equal(pdb_prefill_run(be, &cfg, ids, T, BS, 0, 64, on_seg, &s, NULL), PDB_INVALID);
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
}

/* Engine on the MX checkpoint: the hook's pools are the MX decoder's bit for bit. Engine on bf16
 * (a bridge's normal case): per-pool agreement with the MX decoder's native blocks, reported. */
static void test_mx_decoder(void **st) {
    int64_t chunks[] = {7, 130};
    check_decoder_on(dmx, dmx, chunks, 2);
    uint64_t bytes;
    char *ref = decoder_blocks(dmx, &bytes);
    pdb_st *e, *d;
    pdb_config cfg;
    pdb_prefill_backend *be = make_backend(dmx, &e, &d, &cfg);
    sink s = {.blocks = malloc(bytes * NB)};
    PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, 64, on_seg, &s, NULL));
    assert_int_equal(s.n, NB);
    pdb_arch_layout lay;
    PDB_TEST_OK(pdb_arch_layout_of(&cfg, &lay));
    const void *pa[PDB_STORE_MAX_POOLS], *pb[PDB_STORE_MAX_POOLS];
    int64_t same_all = 0, n_all = 0;
    for (int p = 0; p < lay.layout.n_pools; p++) {
        int64_t n = 0, same = 0, l0same = 1;
        double worst = 0;
        for (int b = 0; b < NB; b++) {
            pdb_arch_block_pools(&lay.layout, BS, s.blocks + b * bytes, pa);
            pdb_arch_block_pools(&lay.layout, BS, ref + b * bytes, pb);
            const pdb_store_pool *q = &lay.layout.pools[p];
            int64_t k = (int64_t)(pdb_store_pool_bytes(q, BS) / sizeof(float)), k0 = k / q->n_layers;
            const float *x = pa[p], *y = pb[p];
            for (int64_t i = 0; i < k; i++) {
                assert_true(isfinite(x[i]));
                same += x[i] == y[i];
                if (i < k0 && x[i] != y[i]) l0same = 0;
                double dl = fabs((double)x[i] - y[i]);
                worst = dl > worst ? dl : worst;
            }
            n += k;
        }
        if (p == 0) assert_true(l0same); /* win, layer 0: the same attention input, the decoder's MX wkv */
        same_all += same;
        n_all += n;
        printf("  engine bf16 + hook on MX decoder vs MX decoder native, pool %-8s: %6.2f%% identical, worst |d| %.3g%s\n",
               lay.layout.pools[p].name, 100.0 * same / n, worst, p == 0 ? " (layer 0 identical)" : "");
    }
    assert_true(same_all < n_all); /* the engine's bf16 attention inputs differ from layer 1 on */
    printf("  all pools: %.2f%% identical\n", 100.0 * same_all / n_all);
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official),
        cmocka_unit_test(test_exact),
        cmocka_unit_test(test_hook_uses_decoder_weights),
        cmocka_unit_test(test_mx_decoder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
