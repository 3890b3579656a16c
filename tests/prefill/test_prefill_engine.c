/* test_prefill_engine: the CPU prefill engine against the decoder, for every architecture, driven by
 * one table of fixtures (DeepSeek-V2 tiny; DeepSeek-V4 tiny: window 8, CSA rate 4 with its
 * indexer, HCA rate 16, in both cache semantics). For each fixture: (1) with the same weights on
 * both sides (--scheme none, or the engine on the MX checkpoint too) the segments are the
 * decoder's own blocks bit for bit, for every chunking in the row (sizes not aligned to 4 or 128,
 * and one shot) and from a later first block, and the tail past the last full block is not run;
 * (2) the hook computes with the DECODER's weights (another decoder checkpoint gives other
 * segments); (3) a block size the architecture refuses is refused; (4) with the engine on its own
 * bf16 weights in front of an MX decoder (a bridge's normal case) layer 0 of the first pool is
 * identical (the same attention input, the decoder's MX weights) and later layers are not, per
 * pool agreement reported. The segment stream format round-trips and rejects corruption. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_arch.h"
#include "pdb_dec_model.h"
#include "pdb_make_model.h"
#include "pdb_prefill_engine.h"
#include "pdb_quantize.h"
#include "pdb_segment.h"
#include "pdb_test_blocks.h"
#include "pdb_test_util.h"
#include "pdb_v4_rows.h"

enum { BS = 128, T = 2 * BS + 44, NB = T / BS, MAXC = 6 };

typedef struct fixture {
    const char *name, *arch, *semantics; /* semantics NULL: the default */
    uint64_t seed;
    int64_t chunks[MAXC], first_block_chunk;
    int threads;
    char hf[512], none[512], mx[512], other[512]; /* filled by setup */
} fixture;

static fixture FIX[] = {
    {.name = "deepseek_v2", .arch = "deepseek_v2", .seed = 31, .chunks = {1, 7, 64, 1000, BS}, .first_block_chunk = 100, .threads = 2},
    {.name = "deepseek_v4 official", .arch = "deepseek_v4", .seed = 8, .chunks = {1, 7, 45, 130, 1000}, .first_block_chunk = 37,
     .threads = 3},
    {.name = "deepseek_v4 exact", .arch = "deepseek_v4", .semantics = "exact", .seed = 8, .chunks = {33, 1000},
     .first_block_chunk = 37, .threads = 3},
};
enum { NFIX = sizeof FIX / sizeof FIX[0] };
static char *root;
static int32_t ids[T];

static int setup(void **st) {
    root = pdb_test_tmpdir("preng");
    for (int i = 0; i < NFIX; i++) {
        fixture *f = &FIX[i];
        char hf2[512];
        snprintf(f->hf, sizeof f->hf, "%s/%d-hf", root, i);
        snprintf(hf2, sizeof hf2, "%s/%d-hf2", root, i);
        snprintf(f->none, sizeof f->none, "%s/%d-none", root, i);
        snprintf(f->mx, sizeof f->mx, "%s/%d-mx", root, i);
        snprintf(f->other, sizeof f->other, "%s/%d-other", root, i);
        pdb_make_model_opts o = {.arch = f->arch, .preset = "tiny", .seed = f->seed, .out_dir = f->hf};
        pdb_make_model_opts o2 = {.arch = f->arch, .preset = "tiny", .seed = f->seed + 1, .out_dir = hf2};
        if (pdb_make_model_write(&o) || pdb_make_model_write(&o2) || pdb_quantize_model_ex(f->hf, f->none, "none", f->semantics, 0) ||
            pdb_quantize_model_ex(f->hf, f->mx, "mx", f->semantics, 0) || pdb_quantize_model_ex(hf2, f->other, "none", f->semantics, 0)) {
            fprintf(stderr, "setup %s: %s\n", f->name, pdb_err_msg());
            return -1;
        }
    }
    pdb_test_ids(ids, T, 1000, 23);
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

/* The decoder's own blocks for the prompt. */
static char *decoder_blocks(const char *dec, uint64_t *bytes) { return pdb_test_decoder_blocks(dec, ids, NB, BS, bytes); }

typedef struct { pdb_config cfg; pdb_st *e, *d; pdb_prefill_backend *be; pdb_test_sink s; uint64_t bytes; } rig;

/* The CPU backend on engine weights `engine` with the hook on decoder `dec` (more than one
 * thread: the pool-run products and tasks must match the decoder's results). */
static void rig_open(rig *r, const fixture *f, const char *engine, const char *dec, uint64_t bytes) {
    PDB_TEST_OK(pdb_config_load(f->hf, &r->cfg));
    PDB_TEST_OK(pdb_st_open(engine, &r->e));
    PDB_TEST_OK(pdb_st_open(dec, &r->d));
    int sem = 0;
    PDB_TEST_OK(pdb_dec_model_semantics_of(dec, &r->cfg, &sem));
    pdb_prefill_backend_opts o = {.cfg = &r->cfg, .engine = r->e, .decoder = r->d, .semantics = sem, .exec = {.threads = f->threads}};
    PDB_TEST_OK(pdb_prefill_backend_create(&o, "cpu", &r->be));
    r->s = (pdb_test_sink){.blocks = malloc(bytes * NB)};
    r->bytes = bytes;
}

static void rig_run(rig *r, int64_t first, int64_t chunk, pdb_prefill_stats *ps) {
    memset(r->s.blocks, 0x5a, r->bytes * NB);
    r->s.n = 0;
    PDB_TEST_OK(pdb_prefill_run(r->be, &r->cfg, ids, T, BS, first, chunk, pdb_test_on_segment, &r->s, ps));
}

static void rig_close(rig *r) {
    r->be->destroy(r->be);
    pdb_st_close(r->e);
    pdb_st_close(r->d);
    free(r->s.blocks);
}

/* (1) segments == the decoder's blocks, for every chunking and from first block 1. */
static void check_equal(const fixture *f, const char *engine, const char *dec, const int64_t *chunks, int nchunks) {
    uint64_t bytes;
    char *ref = decoder_blocks(dec, &bytes);
    rig r;
    rig_open(&r, f, engine, dec, bytes);
    for (int k = 0; k < nchunks && chunks[k]; k++) {
        pdb_prefill_stats ps;
        rig_run(&r, 0, chunks[k], &ps);
        assert_int_equal(r.s.n, NB);
        assert_int_equal(ps.tokens_run, NB * BS); /* the tail past the last full block is not run */
        assert_int_equal(r.s.bytes, bytes);
        for (int b = 0; b < NB; b++)
            if (memcmp(r.s.blocks + b * bytes, ref + b * bytes, bytes))
                fail_msg("%s (%s) chunk %lld: segment %d differs from the decoder's block", f->name, dec, (long long)chunks[k], b);
    }
    rig_run(&r, 1, f->first_block_chunk, NULL);
    assert_int_equal(r.s.n, 1);
    assert_int_equal(r.s.got[0], 1);
    assert_memory_equal(r.s.blocks + bytes, ref + bytes, bytes);
    printf("  %s: %d segments of %llu bytes == the decoder's blocks bit for bit, first_block 0 and 1\n", f->name, NB,
           (unsigned long long)bytes);
    rig_close(&r);
    free(ref);
}

static void test_segments_equal_decoder_blocks(void **st) {
    for (int i = 0; i < NFIX; i++) {
        check_equal(&FIX[i], FIX[i].hf, FIX[i].none, FIX[i].chunks, MAXC);
        const int64_t mx_chunks[] = {7, 130};
        check_equal(&FIX[i], FIX[i].mx, FIX[i].mx, mx_chunks, 2); /* the engine on the MX checkpoint too */
    }
}

/* The engine on the fixture's bf16 weights with the hook on decoder `dec`, run in chunks of 64;
 * returns decoder ref_dec's own blocks to compare with. */
static char *run_against(rig *r, const fixture *f, const char *dec, const char *ref_dec, uint64_t *bytes) {
    char *ref = decoder_blocks(ref_dec, bytes);
    rig_open(r, f, f->hf, dec, *bytes);
    rig_run(r, 0, 64, NULL);
    assert_int_equal(r->s.n, NB);
    return ref;
}

/* (2) + (3): another decoder's weights give other segments; refused block sizes are refused. */
static void test_hook_uses_decoder_weights(void **st) {
    for (int i = 0; i < NFIX; i++) {
        const fixture *f = &FIX[i];
        uint64_t bytes;
        rig r;
        char *ref = run_against(&r, f, f->other, f->none, &bytes);
        assert_memory_not_equal(r.s.blocks, ref, bytes);
        assert_int_equal(pdb_prefill_run(r.be, &r.cfg, ids, T, 100, 0, 64, pdb_test_on_segment, &r.s, NULL), PDB_INVALID);
        if (r.cfg.compress_rate_hca > 0) { /* V4: a block must also be a multiple of every compression rate */
            r.cfg.compress_rate_hca = 96;
            assert_int_equal(pdb_prefill_run(r.be, &r.cfg, ids, T, BS, 0, 64, pdb_test_on_segment, &r.s, NULL), PDB_INVALID);
        }
        rig_close(&r);
        free(ref);
    }
}

/* A V4 pool's values as f32 (its compact FP8 / FP4 rows decoded exactly: pdb_v4_rows.h); n: values. */
static float *pool_values(const pdb_config *c, int sem, const pdb_store_pool *q, const void *data, int64_t *n) {
    int64_t rows = (int64_t)pdb_store_pool_bytes(q, BS) / (q->width * (int64_t)pdb_dtype_size(q->dtype));
    pdb_v4_row r = !strcmp(q->name, "ikeys") ? pdb_v4_row_ikey(c, sem) : pdb_v4_row_kv(c, sem);
    if (q->dtype == PDB_DT_F32) r = (pdb_v4_row){.fmt = PDB_V4_ROW_F32, .dim = q->width, .bytes = 4 * q->width};
    float *v = malloc(sizeof(float) * (size_t)(rows * r.dim));
    assert_non_null(v);
    pdb_v4_row_decode_rows(&r, data, NULL, rows, v);
    *n = rows * r.dim;
    return v;
}

/* (4) the engine on bf16 in front of an MX decoder: per-pool agreement with the MX decoder's own blocks. */
static void test_mx_decoder_agreement(void **st) {
    for (int i = 0; i < NFIX; i++) {
        const fixture *f = &FIX[i];
        uint64_t bytes;
        rig r;
        char *ref = run_against(&r, f, f->mx, f->mx, &bytes);
        pdb_arch_layout lay;
        PDB_TEST_OK(pdb_arch_layout_of(&r.cfg, r.be->semantics, &lay));
        const void *pa[PDB_STORE_MAX_POOLS], *pb[PDB_STORE_MAX_POOLS];
        int64_t same_all = 0, n_all = 0;
        for (int p = 0; p < lay.layout.n_pools; p++) {
            const pdb_store_pool *q = &lay.layout.pools[p];
            int64_t n = 0, same = 0, l0same = 1, k = 0, k0;
            double worst = 0;
            for (int b = 0; b < NB; b++) {
                pdb_arch_block_pools(&lay.layout, BS, r.s.blocks + b * bytes, pa);
                pdb_arch_block_pools(&lay.layout, BS, ref + b * bytes, pb);
                float *x = pool_values(&r.cfg, r.be->semantics, q, pa[p], &k), *y = pool_values(&r.cfg, r.be->semantics, q, pb[p], &k);
                k0 = k / q->n_layers;
                for (int64_t j = 0; j < k; j++) {
                    assert_true(isfinite(x[j]));
                    same += x[j] == y[j];
                    if (j < k0 && x[j] != y[j]) l0same = 0;
                    double dl = fabs((double)x[j] - y[j]);
                    worst = dl > worst ? dl : worst;
                }
                free(x);
                free(y);
                n += k;
            }
            if (p == 0) assert_true(l0same); /* layer 0: the same attention input, the decoder's MX weights */
            same_all += same;
            n_all += n;
            printf("  %s: engine bf16 + hook on MX decoder vs MX decoder native, pool %-8s: %6.2f%% identical, worst |d| %.3g\n",
                   f->name, q->name, 100.0 * same / n, worst);
        }
        assert_true(same_all < n_all); /* the engine's bf16 attention inputs differ from layer 1 on */
        rig_close(&r);
        free(ref);
    }
}

typedef struct { int header, segs, end; int64_t last; int32_t status; } pcount;
static pdb_status p_header(void *u, const pdb_segment_header *h) { ((pcount *)u)->header++; return PDB_OK; }
static pdb_status p_seg(void *u, int64_t b, const void *d, uint64_t n) { ((pcount *)u)->segs++; ((pcount *)u)->last = b; return PDB_OK; }
static void p_end(void *u, int32_t s, const char *m) { ((pcount *)u)->end++; ((pcount *)u)->status = s; }

static size_t build_stream(uint8_t *buf, int corrupt, int swap) {
    size_t n = 0;
    const char *hj = "{\"version\":1,\"fingerprint\":\"0000000000000000000000000000000000000000000000000000000000000000\","
                     "\"block_size\":128,\"first_block\":0,\"n_blocks\":2,\"block_bytes\":64}";
    pdb_segment_frame_prefix(PDB_SEG_HEADER, strlen(hj), buf + n);
    n += 16;
    memcpy(buf + n, hj, strlen(hj));
    n += strlen(hj);
    for (int b = 0; b < 2; b++) {
        uint8_t data[64];
        for (int i = 0; i < 64; i++) data[i] = (uint8_t)(b * 64 + i);
        pdb_segment_frame_prefix(PDB_SEG_SEGMENT, 40 + 64, buf + n);
        n += 16;
        pdb_segment_payload_head(swap ? 1 - b : b, data, 64, buf + n);
        n += 40;
        memcpy(buf + n, data, 64);
        if (corrupt && b == 1) buf[n + 10] ^= 1;
        n += 64;
    }
    pdb_segment_frame_prefix(PDB_SEG_END, 8 + 2, buf + n);
    n += 16;
    memset(buf + n, 0, 4);
    buf[n + 4] = 2; buf[n + 5] = buf[n + 6] = buf[n + 7] = 0;
    memcpy(buf + n + 8, "ok", 2);
    return n + 10;
}

static void test_stream_format(void **st) {
    uint8_t buf[1024];
    pcount c = {0};
    pdb_segment_parser_cbs cbs = {p_header, p_seg, p_end, &c};
    pdb_segment_parser *p;
    size_t n = build_stream(buf, 0, 0);
    PDB_TEST_OK(pdb_segment_parser_init(&p, &cbs, 1 << 20));
    for (size_t i = 0; i < n; i++) PDB_TEST_OK(pdb_segment_parser_feed(p, buf + i, 1)); /* byte by byte */
    assert_true(c.header == 1 && c.segs == 2 && c.end == 1 && c.last == 1 && c.status == 0 && pdb_segment_parser_done(p));
    pdb_segment_parser_free(p);
    memset(&c, 0, sizeof c);
    n = build_stream(buf, 1, 0);
    PDB_TEST_OK(pdb_segment_parser_init(&p, &cbs, 1 << 20));
    assert_int_equal(pdb_segment_parser_feed(p, buf, n), PDB_CORRUPT);
    assert_int_equal(c.segs, 1); /* block 0 delivered, the corrupt block 1 not */
    pdb_segment_parser_free(p);
    memset(&c, 0, sizeof c);
    n = build_stream(buf, 0, 1);
    PDB_TEST_OK(pdb_segment_parser_init(&p, &cbs, 1 << 20));
    assert_int_equal(pdb_segment_parser_feed(p, buf, n), PDB_PROTOCOL);
    assert_int_equal(c.segs, 0);
    pdb_segment_parser_free(p);
    n = build_stream(buf, 0, 0);
    PDB_TEST_OK(pdb_segment_parser_init(&p, &cbs, 32)); /* segments bigger than the limit */
    assert_int_equal(pdb_segment_parser_feed(p, buf, n), PDB_TOO_LARGE);
    pdb_segment_parser_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_equal_decoder_blocks), cmocka_unit_test(test_hook_uses_decoder_weights),
        cmocka_unit_test(test_mx_decoder_agreement), cmocka_unit_test(test_stream_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
