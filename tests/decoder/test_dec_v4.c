/* test_dec_v4: the decode engine on DeepSeek-V4 (tiny preset: sliding, CSA with its indexer,
 * HCA rate 16, window 8). Checks: the V4 store layout (pools, shapes, which layers); block
 * sizes that are not multiples of a rate are refused; the decoder's forward equals the
 * reference pdb_v4 forward bit for bit (logits and greedy tokens); mounting blocks 0..b (APPEND
 * rows + end-of-block STATE) into a fresh sequence and continuing gives bit-identical logits to
 * the uninterrupted run, and so does a sequence chunked at odd sizes; the fingerprint depends on
 * --v4-semantics; through the service, a repeated prompt hits its full blocks with the same
 * greedy answer; a sequence copied mid-block continues bit-identically and n choices through the
 * service equal the n = 1 answers (greedy: all of them; seeded: choice 0). MX decoder (quantize --scheme mx): which tensors are MXFP4 / MXFP8 / kept, the
 * loader's f32 weights are the exact dequantization of the stored MX rows (pdb_qmat_row_f32),
 * the MX decoder equals the reference forward on its own checkpoint bit for bit (and differs
 * from the unquantized one), its blocks are chunk-invariant, and through the service a repeated
 * prompt hits. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_dec_model.h"
#include "pdb_dec_service.h"
#include "pdb_v4_rows.h"
#include "pdb_make_model.h"
#include "pdb_qmat.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"
#include "pdb_v4.h"

enum { BS = 128 };
static char *root, hf[512], dec[512], dex[512], dmx[512], cache[512];

static int setup(void **st) {
    root = pdb_test_tmpdir("decv4");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dec, sizeof dec, "%s/dec", root);
    snprintf(dex, sizeof dex, "%s/dec-exact", root);
    snprintf(dmx, sizeof dmx, "%s/dec-mx", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    pdb_make_model_opts o = {.arch = "deepseek_v4", .preset = "tiny", .seed = 5, .out_dir = hf};
    if (pdb_make_model_write(&o) || pdb_quantize_model(hf, dec, "none", 0) ||
        pdb_quantize_model_ex(hf, dex, "none", "exact", 0) || pdb_quantize_model(hf, dmx, "mx", 0)) {
        fprintf(stderr, "%s\n", pdb_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

static void test_layout(void **st) {
    pdb_config c;
    PDB_TEST_OK(pdb_config_load(hf, &c));
    pdb_arch_layout lay;
    PDB_TEST_OK(pdb_arch_layout_of(&c, 0, &lay));
    const char *names[] = {"win", "comp_csa", "ikeys", "ov_kv", "ov_gate", "iov_kv", "iov_gate", "comp_hca"};
    int64_t layers[] = {4, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(lay.layout.n_pools, 8);
    for (int p = 0; p < 8; p++) {
        const pdb_store_pool *q = &lay.layout.pools[p];
        assert_string_equal(q->name, names[p]);
        assert_int_equal(q->n_layers, layers[p]);
        /* official: the K=V and key pools are compact rows (U8, width = the row's bytes), the overlap halves f32 */
        pdb_v4_row kv = pdb_v4_row_kv(&c, 0), ik = pdb_v4_row_ikey(&c, 0);
        int compact = p <= 2 || p == 7;
        assert_int_equal(q->dtype, compact ? PDB_DT_U8 : PDB_DT_F32);
        assert_int_equal(q->width, p == 2 ? ik.bytes : compact ? kv.bytes : p == 5 || p == 6 ? c.index_head_dim : c.head_dim);
    }
    assert_int_equal(pdb_store_pool_rows(&lay.layout.pools[0], BS), c.sliding_window);
    assert_int_equal(pdb_store_pool_rows(&lay.layout.pools[1], BS), BS / 4);
    assert_int_equal(pdb_store_pool_rows(&lay.layout.pools[3], BS), 4);
    assert_int_equal(pdb_store_pool_rows(&lay.layout.pools[7], BS), BS / 16);
    PDB_TEST_OK(pdb_arch_check_block_size(&c, BS));
    assert_int_equal(pdb_arch_check_block_size(&c, 100), PDB_INVALID);
    c.compress_rate_hca = 96;
    assert_int_equal(pdb_arch_check_block_size(&c, BS), PDB_INVALID);
    PDB_TEST_OK(pdb_arch_check_block_size(&c, 3 * BS));
}

/* Prefill ids[0..n) into s in chunks of `chunk`, never crossing a multiple of BS; when the prefill
 * reaches the end of block b, its bytes go to blocks + b * bb. */
static void prefill(pdb_dec_model *m, pdb_dec_seq *s, const int32_t *ids, int64_t n, int64_t chunk, char *blocks,
                    uint64_t bb, float *logits) {
    while (s->len < n) {
        int64_t take = n - s->len < chunk ? n - s->len : chunk, next = (s->len / BS + 1) * BS;
        if (s->len + take > next) take = next - s->len;
        pdb_dec_seg sg = {s, ids + s->len, take, s->len + take == n ? logits : NULL};
        PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
        if (blocks && s->len % BS == 0) pdb_dec_seq_get_block(s, s->len / BS - 1, BS, blocks + (s->len / BS - 1) * bb);
    }
}

static int64_t argmax(const float *x, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static void test_forward_and_blocks(void **st) {
    enum { T = 2 * BS + 37, NDEC = 6 };
    pdb_dec_model *m;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m));
    const pdb_config *c = pdb_dec_model_config(m);
    int64_t V = c->vocab_size;
    assert_string_equal(pdb_dec_model_semantics(m), "deepseek_v4/official/pools-fp8-fp4/v3");
    assert_null(pdb_dec_model_weights(m, "deepseek_v2"));
    int32_t ids[T + NDEC];
    pdb_test_ids(ids, T, 1000, 3);
    uint64_t bb = pdb_store_layout_block_bytes(pdb_dec_model_layout(m), BS);
    char *blocks = calloc(2, bb), *blocks2 = calloc(2, bb);
    float *ref = malloc(sizeof(float) * V * (NDEC + 1)), *got = malloc(sizeof(float) * V);
    /* native, one block at a time (chunk = BS) + greedy decode */
    pdb_dec_seq s0;
    PDB_TEST_OK(pdb_dec_seq_init(&s0, m, T + NDEC));
    prefill(m, &s0, ids, T, BS, blocks, bb, ref);
    for (int i = 0; i < NDEC; i++) {
        ids[T + i] = (int32_t)argmax(ref + i * V, V);
        pdb_dec_seg sg = {&s0, ids + T + i, 1, ref + (i + 1) * V};
        PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
    }
    /* the reference forward (pdb_v4 on the HF checkpoint) gives the same logits bit for bit */
    pdb_v4_model *rm;
    PDB_TEST_OK(pdb_v4_load(hf, &rm));
    pdb_v4_cache rc;
    PDB_TEST_OK(pdb_v4_cache_init(&rc, rm, T + NDEC, PDB_V4_SEM_OFFICIAL));
    PDB_TEST_OK(pdb_v4_forward(rm, &rc, ids, T, 0, got));
    assert_memory_equal(got, ref, sizeof(float) * V);
    for (int i = 0; i < NDEC; i++) {
        PDB_TEST_OK(pdb_v4_forward(rm, &rc, ids + T + i, 1, 0, got));
        if (memcmp(got, ref + (i + 1) * V, sizeof(float) * V)) fail_msg("decode step %d differs from the reference", i);
    }
    pdb_v4_cache_free(&rc);
    pdb_v4_free(rm);
    /* odd chunks (7, 45) give the same blocks and logits */
    int64_t chunks[] = {7, 45};
    for (int k = 0; k < 2; k++) {
        pdb_dec_seq s1;
        PDB_TEST_OK(pdb_dec_seq_init(&s1, m, T));
        memset(blocks2, 0xff, 2 * bb);
        prefill(m, &s1, ids, T, chunks[k], blocks2, bb, got);
        if (memcmp(blocks, blocks2, 2 * bb)) fail_msg("chunk %lld: blocks differ from chunk %d", (long long)chunks[k], BS);
        assert_memory_equal(got, ref, sizeof(float) * V);
        pdb_dec_seq_free(&s1);
    }
    /* mount blocks 0..b into a fresh sequence, continue natively: bit-identical to the full run */
    for (int64_t b = 0; b < 2; b++) {
        pdb_dec_seq s2;
        PDB_TEST_OK(pdb_dec_seq_init(&s2, m, T + NDEC));
        for (int64_t k = 0; k <= b; k++) pdb_dec_seq_put_block(&s2, k, BS, blocks + k * bb);
        s2.len = (b + 1) * BS;
        /* the mounted state is the state at the boundary: reading it back gives the same bytes */
        pdb_dec_seq_get_block(&s2, b, BS, blocks2);
        assert_memory_equal(blocks2, blocks + b * bb, bb);
        prefill(m, &s2, ids, T, 19, NULL, 0, got);
        if (memcmp(got, ref, sizeof(float) * V)) fail_msg("mounted %lld blocks: prompt logits differ", (long long)b + 1);
        for (int i = 0; i < NDEC; i++) {
            pdb_dec_seg sg = {&s2, ids + T + i, 1, got};
            PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
            if (memcmp(got, ref + (i + 1) * V, sizeof(float) * V)) fail_msg("mounted %lld blocks: decode %d differs", (long long)b + 1, i);
        }
        pdb_dec_seq_free(&s2);
    }
    /* a copy of a sequence mid-block (compressor buffers and overlap halves not empty) continues
     * bit-identically: what n choices of one prompt rely on */
    {
        pdb_dec_seq s4, s5;
        PDB_TEST_OK(pdb_dec_seq_init(&s4, m, T));
        PDB_TEST_OK(pdb_dec_seq_init(&s5, m, T + NDEC));
        prefill(m, &s4, ids, T, 19, NULL, 0, got);
        PDB_TEST_OK(pdb_dec_seq_copy(&s5, &s4));
        assert_int_equal(s5.len, T);
        pdb_dec_seq_free(&s4); /* the copy owns nothing of the source */
        for (int i = 0; i < NDEC; i++) {
            pdb_dec_seg sg = {&s5, ids + T + i, 1, got};
            PDB_TEST_OK(pdb_dec_forward(m, &sg, 1));
            if (memcmp(got, ref + (i + 1) * V, sizeof(float) * V)) fail_msg("copied sequence: decode %d differs", i);
        }
        pdb_dec_seq small;
        PDB_TEST_OK(pdb_dec_seq_init(&small, m, 10));
        assert_int_equal(pdb_dec_seq_copy(&small, &s5), PDB_INVALID);
        pdb_dec_seq_free(&small);
        pdb_dec_seq_free(&s5);
    }
    /* a wrong window in the mounted state is noticed (the state pools matter) */
    pdb_dec_seq s3;
    PDB_TEST_OK(pdb_dec_seq_init(&s3, m, T));
    memcpy(blocks2, blocks + bb, bb);
    /* pool "win" comes first: row 1 = position 249, seen by 256; under official its rows are FP8 rows whose
     * f32 rotary dims come first (pdb_v4_rows.h): add 1 to its first rotary value */
    pdb_v4_row kvr = pdb_v4_row_kv(pdb_dec_model_config(m), 0);
    float fv;
    memcpy(&fv, blocks2 + kvr.bytes, 4);
    fv += 1.0f;
    memcpy(blocks2 + kvr.bytes, &fv, 4);
    pdb_dec_seq_put_block(&s3, 0, BS, blocks);
    pdb_dec_seq_put_block(&s3, 1, BS, blocks2);
    s3.len = 2 * BS;
    prefill(m, &s3, ids, T, BS, NULL, 0, got);
    assert_memory_not_equal(got, ref, sizeof(float) * V);
    pdb_dec_seq_free(&s3);
    printf("  V4 decoder = reference bit for bit (prompt %d + %d greedy); chunks 7/45 = %d; mounted 1 and 2 blocks "
           "(%llu bytes each) continue bit-identically\n", T, NDEC, BS, (unsigned long long)bb);
    pdb_dec_seq_free(&s0);
    free(blocks);
    free(blocks2);
    free(ref);
    free(got);
    pdb_dec_model_close(m);
}

static void test_fingerprint_semantics(void **st) {
    pdb_dec_model *a, *b;
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &a));
    PDB_TEST_OK(pdb_dec_model_open(dex, NULL, &b));
    assert_string_equal(pdb_dec_model_semantics(b), "deepseek_v4/exact/pools-f32/v2");
    assert_memory_not_equal(pdb_dec_model_fingerprint(a), pdb_dec_model_fingerprint(b), 32);
    pdb_dec_model_close(a);
    pdb_dec_model_close(b);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad", root);
    assert_int_equal(pdb_quantize_model_ex(hf, bad, "none", "fast", 0), PDB_INVALID);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, n;
    int32_t toks[16];
    int64_t cached;
} collect;

static int on_event(void *u, const pdb_dec_event *ev) {
    collect *c = u;
    pthread_mutex_lock(&c->mu);
    c->cached = ev->cached_tokens;
    if (ev->finish == PDB_FINISH_NONE) { if (c->n < 16) c->toks[c->n++] = ev->token; }
    else { c->done = 1; pthread_cond_broadcast(&c->cv); }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void run(pdb_dec_service *s, const int32_t *ids, int64_t n, collect *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pdb_dec_request r = {.ids = ids, .n_ids = n, .max_tokens = 5, .ignore_eos = 1, .on_event = on_event, .user = c};
    PDB_TEST_OK(pdb_dec_service_submit(s, &r, NULL));
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void service_hits(const char *model, const char *cdir) {
    enum { N = 2 * BS + 50 };
    int32_t ids[N];
    pdb_test_ids(ids, N, 1000, 11);
    pdb_dec_service_opts o = {.model_dir = model, .cache_dir = cdir, .block_size = BS, .threads = 1, .max_batch = 4};
    pdb_dec_service *s = NULL;
    PDB_TEST_OK(pdb_dec_service_open(&o, &s));
    collect a, b;
    run(s, ids, N, &a);
    run(s, ids, N, &b);
    assert_int_equal(a.cached, 0);
    assert_int_equal(b.cached, 2 * BS);
    assert_int_equal(a.n, 5);
    assert_memory_equal(a.toks, b.toks, sizeof(int32_t) * 5);
    pdb_dec_stats stt;
    pdb_dec_service_stats(s, &stt);
    assert_int_equal(stt.store_blocks_written, 2);
    pdb_dec_service_close(s);
    o.block_size = 192; /* multiple of 16 but not of 128 */
    assert_int_not_equal(pdb_dec_service_open(&o, &s), PDB_OK);
    printf("  service (%s): repeated V4 prompt hits %d cached tokens, same 5 greedy tokens\n", model, 2 * BS);
}

static void test_service_hits(void **st) { service_hits(dec, cache); }

/* n choices on V4: each further choice is a copy of the first one's sequence mid-block; greedy
 * choices equal the n = 1 greedy answer, a seeded choice 0 equals the seeded n = 1 answer. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, n[3];
    int32_t toks[3][8];
} choices;

static int on_choice(void *u, const pdb_dec_event *ev) {
    choices *c = u;
    pthread_mutex_lock(&c->mu);
    if (ev->finish == PDB_FINISH_NONE && c->n[ev->choice] < 8) c->toks[ev->choice][c->n[ev->choice]++] = ev->token;
    if (ev->last) { c->done = 1; pthread_cond_broadcast(&c->cv); }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void run_choices(pdb_dec_service *s, const int32_t *ids, int64_t n, int n_choices, float temp, choices *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pdb_dec_request r = {.ids = ids, .n_ids = n, .max_tokens = 8, .ignore_eos = 1, .n_choices = n_choices, .on_event = on_choice,
                         .user = c, .sample = {.temperature = temp, .top_p = 1, .seed = 9}};
    PDB_TEST_OK(pdb_dec_service_submit(s, &r, NULL));
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void test_service_choices(void **st) {
    enum { N = BS + 61 };
    int32_t ids[N];
    pdb_test_ids(ids, N, 1000, 17);
    pdb_dec_service_opts o = {.model_dir = dec, .cache_dir = NULL, .block_size = BS, .threads = 1, .max_batch = 4};
    pdb_dec_service *s = NULL;
    PDB_TEST_OK(pdb_dec_service_open(&o, &s));
    choices g1, g3, t1, t2;
    run_choices(s, ids, N, 1, 0, &g1);
    run_choices(s, ids, N, 3, 0, &g3);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(g3.n[k], 8);
        assert_memory_equal(g3.toks[k], g1.toks[0], sizeof(int32_t) * 8);
    }
    run_choices(s, ids, N, 1, 1.0f, &t1);
    run_choices(s, ids, N, 2, 1.0f, &t2);
    assert_memory_equal(t2.toks[0], t1.toks[0], sizeof(int32_t) * 8);
    assert_memory_not_equal(t2.toks[1], t2.toks[0], sizeof(int32_t) * 8);
    pdb_dec_service_close(s);
    printf("  V4 n = 3 greedy choices (copies mid-block) = the n = 1 answer; seeded n = 2: choice 0 = n = 1\n");
}

/* The tensor's dtype in the MX checkpoint and whether it has an "_mx_scale" companion. */
static void expect_tensor(const pdb_st *s, const char *name, pdb_dtype dt, int mx) {
    const pdb_tensor_view *v = pdb_st_find(s, name);
    char sn[300];
    snprintf(sn, sizeof sn, "%s_mx_scale", name);
    if (!v) fail_msg("MX checkpoint: %s missing", name);
    if (v->dtype != dt || (pdb_st_find(s, sn) != NULL) != mx)
        fail_msg("MX checkpoint: %s is %s%s", name, pdb_dtype_name(v->dtype), pdb_st_find(s, sn) ? " with an MX scale" : "");
}

/* The loader holds an MX weight as stored: a pdb_qmat of the right format viewing the
 * checkpoint's own bytes and scales (no copy). */
static void expect_stored(const pdb_st *s, const char *name, int fp4, const pdb_qmat *w) {
    const pdb_tensor_view *q, *sc;
    int is4;
    PDB_TEST_OK(pdb_st_get_mx(s, name, -1, -1, &q, &sc, &is4));
    assert_non_null(q);
    assert_int_equal(is4, fp4);
    int64_t R = q->shape[0], C = fp4 ? 2 * q->shape[1] : q->shape[1];
    assert_int_equal(w->fmt, fp4 ? PDB_QF_MXFP4 : PDB_QF_MXFP8);
    assert_int_equal(w->rows, R);
    assert_int_equal(w->cols, C);
    if (w->data != q->data || w->scales != (const uint8_t *)sc->data) fail_msg("%s: the loader's weight is not a view of the stored bytes", name);
}

static void test_mx_decoder(void **st) {
    enum { T = 2 * BS + 21 };
    pdb_st *s;
    PDB_TEST_OK(pdb_st_open(dmx, &s));
    expect_tensor(s, "model.layers.2.ffn.experts.3.w2.weight", PDB_DT_U8, 1);         /* routed expert: MXFP4 */
    expect_tensor(s, "model.layers.0.attn.wq_a.weight", PDB_DT_F8_E4M3, 1);            /* attention: MXFP8 */
    expect_tensor(s, "model.layers.2.attn.compressor.wgate.weight", PDB_DT_F8_E4M3, 1);
    expect_tensor(s, "model.layers.2.attn.indexer.wq_b.weight", PDB_DT_F8_E4M3, 1);
    expect_tensor(s, "model.layers.3.attn.compressor.wkv.weight", PDB_DT_F8_E4M3, 1);
    expect_tensor(s, "model.layers.1.ffn.shared_experts.w2.weight", PDB_DT_F8_E4M3, 1);
    expect_tensor(s, "head.weight", PDB_DT_F8_E4M3, 1);
    expect_tensor(s, "model.embed_tokens.weight", PDB_DT_BF16, 0);                     /* kept */
    expect_tensor(s, "model.layers.2.ffn.gate.weight", PDB_DT_BF16, 0);
    expect_tensor(s, "model.layers.0.ffn.gate.tid2eid", PDB_DT_I64, 0);
    expect_tensor(s, "model.layers.2.attn.attn_sink", PDB_DT_BF16, 0);
    expect_tensor(s, "model.layers.2.hc_attn_fn", PDB_DT_BF16, 0);
    expect_tensor(s, "model.layers.2.attn.compressor.ape", PDB_DT_BF16, 0);
    expect_tensor(s, "model.layers.2.attn.norm.weight", PDB_DT_BF16, 0);
    pdb_config c;
    PDB_TEST_OK(pdb_config_load(dmx, &c));
    pdb_v4_model *mm, *hm;
    PDB_TEST_OK(pdb_v4_load_from(&c, s, &mm));
    PDB_TEST_OK(pdb_v4_load(hf, &hm));
    int64_t H = c.hidden_size;
    expect_stored(s, "model.layers.2.ffn.experts.3.w2.weight", 1, &mm->layers[2].w2[3]);
    expect_stored(s, "model.layers.0.attn.wkv.weight", 0, &mm->layers[0].wkv);
    expect_stored(s, "head.weight", 0, &mm->head);
    assert_int_equal(mm->embed.fmt, PDB_QF_BF16); /* kept as stored too */
    assert_int_equal(mm->layers[2].gate.fmt, PDB_QF_BF16);
    /* quantization changed the weights, within MX's error: FP4 steps are at most 1/3 of the block's amax */
    double worst = 0, amax = 0;
    int64_t changed = 0;
    float *rq = malloc(sizeof(float) * (size_t)H), *rh = malloc(sizeof(float) * (size_t)H);
    for (int64_t r = 0; r < c.head_dim; r++) {
        pdb_qmat_row_f32(&mm->layers[0].wkv, r, rq);
        pdb_qmat_row_f32(&hm->layers[0].wkv, r, rh);
        for (int64_t i = 0; i < H; i++) {
            double d = fabs((double)rq[i] - rh[i]);
            changed += d > 0;
            worst = d > worst ? d : worst;
            amax = fabs(rh[i]) > amax ? fabs(rh[i]) : amax;
        }
    }
    free(rq);
    free(rh);
    assert_true(changed > 0 && worst < amax / 8);
    pdb_v4_free(hm);
    /* the MX decoder = the reference forward on its own checkpoint, bit for bit; != unquantized */
    pdb_dec_model *m, *m0;
    PDB_TEST_OK(pdb_dec_model_open(dmx, NULL, &m));
    PDB_TEST_OK(pdb_dec_model_open(dec, NULL, &m0));
    assert_string_equal(pdb_dec_model_scheme(m), "mx");
    assert_memory_not_equal(pdb_dec_model_fingerprint(m), pdb_dec_model_fingerprint(m0), 32);
    int64_t V = c.vocab_size;
    int32_t ids[T];
    pdb_test_ids(ids, T, 1000, 17);
    uint64_t bb = pdb_store_layout_block_bytes(pdb_dec_model_layout(m), BS);
    char *b1 = calloc(2, bb), *b2 = calloc(2, bb), *b0 = calloc(2, bb);
    float *l1 = malloc(sizeof(float) * V), *l2 = malloc(sizeof(float) * V), *l0 = malloc(sizeof(float) * V);
    pdb_dec_seq s1, s2, s0;
    PDB_TEST_OK(pdb_dec_seq_init(&s1, m, T));
    PDB_TEST_OK(pdb_dec_seq_init(&s2, m, T));
    PDB_TEST_OK(pdb_dec_seq_init(&s0, m0, T));
    prefill(m, &s1, ids, T, BS, b1, bb, l1);
    prefill(m, &s2, ids, T, 45, b2, bb, l2);
    prefill(m0, &s0, ids, T, BS, b0, bb, l0);
    assert_memory_equal(b1, b2, 2 * bb);
    assert_memory_equal(l1, l2, sizeof(float) * V);
    assert_memory_not_equal(b1, b0, bb);
    pdb_v4_cache rc;
    PDB_TEST_OK(pdb_v4_cache_init(&rc, mm, T, PDB_V4_SEM_OFFICIAL));
    PDB_TEST_OK(pdb_v4_forward(mm, &rc, ids, T, 0, l2));
    assert_memory_equal(l1, l2, sizeof(float) * V);
    double dl = 0;
    for (int64_t i = 0; i < V; i++) dl = fabs((double)l1[i] - l0[i]) > dl ? fabs((double)l1[i] - l0[i]) : dl;
    assert_true(dl > 0);
    printf("  MX V4 decoder: loader holds the MX bytes as stored; decoder == reference on the MX checkpoint bit for bit; chunk 45 == %d; "
           "max |dlogit| vs unquantized %.3g, argmax %lld vs %lld\n", BS, dl, (long long)argmax(l1, V), (long long)argmax(l0, V));
    pdb_v4_cache_free(&rc);
    pdb_dec_seq_free(&s1);
    pdb_dec_seq_free(&s2);
    pdb_dec_seq_free(&s0);
    free(b0); free(b1); free(b2); free(l0); free(l1); free(l2);
    pdb_dec_model_close(m);
    pdb_dec_model_close(m0);
    pdb_v4_free(mm);
    pdb_st_close(s);
    char mc[600];
    snprintf(mc, sizeof mc, "%s/cache-mx", root);
    service_hits(dmx, mc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_forward_and_blocks),
        cmocka_unit_test(test_fingerprint_semantics),
        cmocka_unit_test(test_service_hits),
        cmocka_unit_test(test_service_choices),
        cmocka_unit_test(test_mx_decoder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
