/* test_prefill_cpu: the CPU prefill engine's segments are bit-identical to the decoder's own
 * cache for the same tokens (same weights: --scheme none), for chunk sizes 1, 7, 64, 1000 and
 * the block size, and from any first block; with the decoder on MX weights the agreement is
 * reported; the segment stream format round-trips and rejects corruption. */
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
#include "pdb_segment.h"
#include "pdb_test_util.h"

enum { BS = 128, T = 300, NB = T / BS };
static char *root, hf[512], dn[512], dq[512];
static int32_t ids[T];

static int setup(void **st) {
    root = pdb_test_tmpdir("pre");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dn, sizeof dn, "%s/none", root);
    snprintf(dq, sizeof dq, "%s/mx", root);
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 31, .out_dir = hf};
    if (pdb_make_model_write(&o) || pdb_quantize_model(hf, dn, "none", 0) || pdb_quantize_model(hf, dq, "mx", 0)) {
        fprintf(stderr, "setup: %s\n", pdb_err_msg());
        return -1;
    }
    pdb_test_ids(ids, T, 1000, 17);
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

typedef struct { float *blocks; uint64_t bytes; int64_t got[NB]; int n; } sink;

static pdb_status on_seg(void *u, int64_t b, const void *data, uint64_t bytes) {
    sink *s = u;
    s->bytes = bytes;
    memcpy((char *)s->blocks + b * bytes, data, bytes);
    s->got[s->n++] = b;
    return PDB_OK;
}

/* The decoder's own rows for the prompt, as block buffers [NB][L, BS, row]. */
static float *decoder_blocks(const char *dec, uint64_t *bytes) {
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m));
    pdb_dec_seq s;
    PDB_TEST_OK(pdb_dec_seq_init(&s, m, T));
    pdb_dec_seg sg = {&s, ids, T, NULL};
    PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
    *bytes = sizeof(float) * (uint64_t)(s.n_layers * BS * s.row);
    float *out = malloc(*bytes * NB);
    for (int b = 0; b < NB; b++) pdb_dec_seq_get_block(&s, b, BS, (float *)((char *)out + b * *bytes));
    pdb_dec_seq_free(&s);
    pdb_dec_model_close(m);
    return out;
}

static pdb_prefill_backend *make_backend(const char *dec, pdb_st **e, pdb_st **d, pdb_config *cfg) {
    PDB_TEST_OK(pdb_config_load(hf, cfg));
    PDB_TEST_OK(pdb_st_open(hf, e));
    PDB_TEST_OK(pdb_st_open(dec, d));
    pdb_prefill_backend_opts o = {.cfg = cfg, .engine = *e, .decoder = *d, .exec = {.threads = 2}};
    pdb_prefill_backend *be = NULL;
    PDB_TEST_OK(pdb_prefill_backend_create(&o, "cpu", &be));
    return be;
}

static void test_segments_equal_decoder_cache(void **st) {
    uint64_t bytes;
    float *ref = decoder_blocks(dn, &bytes);
    pdb_st *e, *d;
    pdb_config cfg;
    pdb_prefill_backend *be = make_backend(dn, &e, &d, &cfg);
    sink s = {.blocks = malloc(bytes * NB)};
    int64_t chunks[] = {1, 7, 64, 1000, BS};
    for (size_t k = 0; k < 5; k++) {
        memset(s.blocks, 0, bytes * NB);
        s.n = 0;
        pdb_prefill_stats ps;
        PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, chunks[k], on_seg, &s, &ps));
        assert_int_equal(s.n, NB);
        assert_int_equal(ps.tokens_run, NB * BS); /* the tail past the last full block is not run */
        assert_int_equal(s.bytes, bytes);
        if (memcmp(s.blocks, ref, bytes * NB)) fail_msg("chunk %lld: segments differ from the decoder's cache", (long long)chunks[k]);
    }
    /* from a later first block: only block 1, identical */
    memset(s.blocks, 0, bytes * NB);
    s.n = 0;
    PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 1, 100, on_seg, &s, NULL));
    assert_int_equal(s.n, 1);
    assert_int_equal(s.got[0], 1);
    assert_memory_equal((char *)s.blocks + bytes, (char *)ref + bytes, bytes);
    printf("  CPU prefill segments == decoder cache, bit for bit: chunks 1/7/64/1000/%d, first_block 0 and 1\n", BS);
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
}

static void test_mx_decoder_agreement(void **st) {
    uint64_t bytes;
    float *ref = decoder_blocks(dq, &bytes);
    pdb_st *e, *d;
    pdb_config cfg;
    pdb_prefill_backend *be = make_backend(dq, &e, &d, &cfg);
    sink s = {.blocks = malloc(bytes * NB)};
    PDB_TEST_OK(pdb_prefill_run(be, &cfg, ids, T, BS, 0, 64, on_seg, &s, NULL));
    int64_t n = (int64_t)(bytes * NB / sizeof(float)), same = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(isfinite(s.blocks[i]));
        same += s.blocks[i] == ref[i];
        double dl = fabs((double)s.blocks[i] - ref[i]);
        worst = dl > worst ? dl : worst;
    }
    printf("  engine bf16 + hook on MX decoder weights vs decoder native (MX): %.2f%% identical, worst |d| %.3g\n",
           100.0 * same / n, worst);
    be->destroy(be);
    pdb_st_close(e);
    pdb_st_close(d);
    free(s.blocks);
    free(ref);
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
        cmocka_unit_test(test_segments_equal_decoder_cache), cmocka_unit_test(test_mx_decoder_agreement),
        cmocka_unit_test(test_stream_format),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
