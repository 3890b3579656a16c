/* test_pool_validate: the selftests behind `pdbridge pool-validate` and "chunked = one-shot"
 * (DESIGN section 8). (1) The CPU prefill engine's segments are byte-identical for chunkings 1,
 * 3, 7, 64, 129, the block size and 1000 (one shot), and equal to the decoder's own cache rows;
 * (2) the capture hook alone (backend->hook_chunk, then get_block) equals the CPU reference
 * pdb_v2_ops_latent_rows on random attention inputs, whole and in odd-length chunks, for the
 * decoder on unquantized and on MX weights, and its rows depend on the position (RoPE), so a
 * wrong position could not pass. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_block_compare.h"
#include "pdb_dec_model.h"
#include "pdb_make_model.h"
#include "pdb_prefill_engine.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"
#include "pdb_v2_ops.h"

enum { BS = 128, T = 2 * BS + 45, NB = T / BS };
static char *root, hf[512], dn[512], dq[512];
static int32_t ids[T];

static int setup(void **st) {
    root = pdb_test_tmpdir("pval");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dn, sizeof dn, "%s/none", root);
    snprintf(dq, sizeof dq, "%s/mx", root);
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 77, .out_dir = hf};
    if (pdb_make_model_write(&o) || pdb_quantize_model(hf, dn, "none", 0) || pdb_quantize_model(hf, dq, "mx", 0)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    pdb_test_ids(ids, T, 1000, 99);
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

typedef struct { char *blocks; uint64_t bytes; int n; } sink;

static pdb_status on_seg(void *u, int64_t b, const void *data, uint64_t bytes) {
    sink *s = u;
    if (b != s->n) return pdb_err_set(PDB_PROTOCOL, "segment %lld out of order (want %d)", (long long)b, s->n);
    s->bytes = bytes;
    memcpy(s->blocks + b * bytes, data, bytes);
    s->n++;
    return PDB_OK;
}

typedef struct { pdb_config cfg; pdb_st *e, *d; pdb_prefill_backend *be; } rig;

static void rig_open(rig *r, const char *dec) {
    PDB_TEST_OK(pdb_config_load(hf, &r->cfg));
    PDB_TEST_OK(pdb_st_open(hf, &r->e));
    PDB_TEST_OK(pdb_st_open(dec, &r->d));
    pdb_prefill_backend_opts o = {.cfg = &r->cfg, .engine = r->e, .decoder = r->d, .exec = {.threads = 2}};
    PDB_TEST_OK(pdb_prefill_backend_create(&o, "cpu", &r->be));
}

static void rig_close(rig *r) {
    r->be->destroy(r->be);
    pdb_st_close(r->e);
    pdb_st_close(r->d);
}

static void test_chunked_equals_one_shot(void **st) {
    rig r;
    rig_open(&r, dn);
    const int64_t chunks[] = {1000, 1, 3, 7, 64, 129, BS}; /* 1000 > T: the first run is one shot */
    uint64_t bytes = sizeof(float) * (uint64_t)(r.cfg.num_layers * BS * (r.cfg.kv_lora_rank + r.cfg.qk_rope_head_dim));
    char *one = malloc(bytes * NB);
    sink s = {.blocks = malloc(bytes * NB)};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        memset(s.blocks, 0xA5, bytes * NB);
        s.n = 0;
        PDB_TEST_OK(pdb_prefill_run(r.be, &r.cfg, ids, T, BS, 0, chunks[k], on_seg, &s, NULL));
        assert_int_equal(s.n, NB);
        assert_int_equal(s.bytes, bytes);
        if (k == 0) { memcpy(one, s.blocks, bytes * NB); continue; }
        pdb_block_cmp_stats cs = {0};
        PDB_TEST_OK(pdb_block_compare_values(PDB_DT_F32, one, s.blocks, (int64_t)(bytes * NB / 4), &cs));
        if (cs.n_diff)
            fail_msg("chunk %lld: %lld/%lld elements differ from one shot (worst %.3g ulps)", (long long)chunks[k],
                     (long long)cs.n_diff, (long long)cs.n, cs.worst_ulps);
    }
    /* and one shot equals the decoder's own cache */
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dn, NULL, &m));
    pdb_dec_seq q;
    PDB_TEST_OK(pdb_dec_seq_init(&q, m, T));
    pdb_dec_seg sg = {&q, ids, T, NULL};
    PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
    for (int b = 0; b < NB; b++) {
        pdb_dec_seq_get_block(&q, b, BS, (float *)s.blocks);
        if (memcmp(s.blocks, one + b * bytes, bytes)) fail_msg("block %d: one-shot segment differs from the decoder's cache", b);
    }
    printf("  chunked = one shot = decoder cache, bit for bit: chunks 1/3/7/64/129/%d/1000, %d blocks\n", BS, NB);
    pdb_dec_seq_free(&q);
    pdb_dec_model_close(m);
    free(s.blocks);
    free(one);
    rig_close(&r);
}

/* The hook alone on the backend vs the reference, for one decoder checkpoint: one block of HB
 * rows at positions P0.. (block P0 / HB), the same inputs at every layer. */
enum { HB = 256, P0 = 4 * HB };

static void hook_block(rig *r, const float *xl, int64_t pos0, const int64_t *chunks, int n_chunks, float *got) {
    PDB_TEST_OK(r->be->begin(r->be, pos0 + HB, HB));
    const int64_t H = r->cfg.hidden_size, L = r->cfg.num_layers;
    float *xc = malloc(sizeof(float) * (size_t)(L * HB * H));
    for (int64_t off = 0, k = 0; off < HB; k++) {
        int64_t c = chunks ? chunks[k % n_chunks] : HB;
        if (c > HB - off) c = HB - off;
        for (int64_t l = 0; l < L; l++) memcpy(xc + l * c * H, xl + (l * HB + off) * H, sizeof(float) * (size_t)(c * H));
        PDB_TEST_OK(r->be->hook_chunk(r->be, xc, pos0 + off, c));
        off += c;
    }
    PDB_TEST_OK(r->be->get_block(r->be, pos0 / HB, got));
    r->be->end(r->be);
    free(xc);
}

static void hook_vs_reference(const char *dec) {
    rig r;
    rig_open(&r, dec);
    const int64_t L = r.cfg.num_layers, H = r.cfg.hidden_size, row = r.cfg.kv_lora_rank + r.cfg.qk_rope_head_dim, n = HB;
    float *xn = malloc(sizeof(float) * (size_t)(n * H)), *xl = malloc(sizeof(float) * (size_t)(L * n * H));
    float *ref = malloc(sizeof(float) * (size_t)(n * row)), *kva = malloc(sizeof(float) * (size_t)(n * row));
    float *got = malloc(sizeof(float) * (size_t)(L * n * row));
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
    pdb_v2_rowcache *rc = malloc(sizeof(*rc) * (size_t)n);
    uint32_t x = 5;
    for (int64_t i = 0; i < n * H; i++) { x = x * 1664525u + 1013904223u; xn[i] = (float)((int32_t)x) / 2147483648.0f * 2.0f; }
    for (int64_t l = 0; l < L; l++) memcpy(xl + l * n * H, xn, sizeof(float) * (size_t)(n * H));
    for (int64_t i = 0; i < n; i++) pos[i] = P0 + i;
    pdb_v2_qweights w;
    PDB_TEST_OK(pdb_v2_qweights_load(&w, &r.cfg, r.d, 1));
    float *rowbuf = malloc(sizeof(float) * (size_t)PDB_QMAT_ROWBUF_FLOATS(1, w.max_cols));
    static const int64_t odd[] = {1, 3, 7, 13, 31, 129};
    float *got_odd = malloc(sizeof(float) * (size_t)(L * n * row));
    hook_block(&r, xl, P0, NULL, 0, got);
    hook_block(&r, xl, P0, odd, 6, got_odd);
    for (int64_t l = 0; l < L; l++) {
        for (int64_t i = 0; i < n; i++) rc[i] = (pdb_v2_rowcache){ref + i * row, 0, 0, pos[i]};
        pdb_v2_ops_latent_rows(&w, l, NULL, rowbuf, xn, n, pos, rc, kva);
        if (memcmp(ref, got + l * n * row, sizeof(float) * (size_t)(n * row))) fail_msg("%s layer %lld: whole capture differs", dec, (long long)l);
        if (memcmp(ref, got_odd + l * n * row, sizeof(float) * (size_t)(n * row)))
            fail_msg("%s layer %lld: odd-chunked capture differs", dec, (long long)l);
    }
    /* the position matters: the same inputs one block later give other rope dims (ref is layer
     * L-1 at P0 now; the block at P0 + HB must differ in its rotary dims only) */
    hook_block(&r, xl, P0 + HB, NULL, 0, got);
    const float *last = got + (L - 1) * n * row;
    assert_memory_not_equal(ref, last, sizeof(float) * (size_t)row);
    assert_memory_equal(ref, last, sizeof(float) * (size_t)r.cfg.kv_lora_rank); /* the non-rotary part does not move */
    pdb_v2_qweights_free(&w);
    free(got_odd);
    free(xl);
    free(rowbuf);
    free(rc);
    free(pos);
    free(kva);
    free(got);
    free(ref);
    free(xn);
    rig_close(&r);
}

static void test_hook_equals_reference(void **st) {
    hook_vs_reference(dn);
    hook_vs_reference(dq);
    printf("  hook_chunk == pdb_v2_ops_latent_rows, whole and odd-chunked, decoder none and MX\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_equals_one_shot),
        cmocka_unit_test(test_hook_equals_reference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
