/* test_dec_service: the decode engine as a service. A repeated prompt hits its full blocks
 * (cached_tokens) with the same greedy answer; a restart still hits; a corrupted block is a
 * miss and the answer stays correct; concurrent requests (continuous batching) get the answers
 * they get alone; bad requests are refused at submit with no callback; n choices share one
 * prefill (choice 0 = the n = 1 answer), log-probabilities, the mask hook and logit_bias. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>

#include "pdb_dec_service.h"
#include "pdb_make_model.h"
#include "pdb_quantize.h"
#include "pdb_test_util.h"

static char *root, hf[512], dec[512], cache[512];

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int32_t toks[64];
    int n;
    int64_t cached, prompt;
    pdb_finish why;
} collect;

static int on_event(void *u, const pdb_dec_event *ev) {
    collect *c = u;
    pthread_mutex_lock(&c->mu);
    c->cached = ev->cached_tokens;
    c->prompt = ev->prompt_tokens;
    if (ev->finish == PDB_FINISH_NONE) {
        if (c->n < 64) c->toks[c->n++] = ev->token;
    } else {
        c->why = ev->finish;
        c->done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void collect_init(collect *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static void collect_wait(collect *c) {
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void submit(pdb_dec_service *s, const int32_t *ids, int64_t n, int64_t max_tokens, collect *c) {
    collect_init(c);
    pdb_dec_request r = {.ids = ids, .n_ids = n, .max_tokens = max_tokens, .ignore_eos = 1, .on_event = on_event, .user = c};
    PDB_TEST_OK(pdb_dec_service_submit(s, &r, NULL));
}

static pdb_dec_service *open_svc(void) {
    pdb_dec_service_opts o = {.model_dir = dec, .cache_dir = cache, .block_size = 128, .threads = 2, .max_batch = 8};
    pdb_dec_service *s = NULL;
    PDB_TEST_OK(pdb_dec_service_open(&o, &s));
    return s;
}

static int setup(void **st) {
    root = pdb_test_tmpdir("svc");
    snprintf(hf, sizeof hf, "%s/hf", root);
    snprintf(dec, sizeof dec, "%s/dec", root);
    snprintf(cache, sizeof cache, "%s/cache", root);
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 21, .out_dir = hf};
    if (pdb_make_model_write(&o) || pdb_quantize_model(hf, dec, "mx", 0)) { fprintf(stderr, "%s\n", pdb_err_msg()); return -1; }
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

static void flip_one_block_byte(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "f=$(ls %s/*/*.pdbblk | head -1) && python3 -c \"import sys;p=sys.argv[1];b=bytearray(open(p,'rb').read());"
             "b[-100]^=1;open(p,'wb').write(b)\" \"$f\"",
             cache);
    assert_int_equal(system(cmd), 0);
}

static void test_prefix_hits_restart_corruption(void **st) {
    enum { T = 300, N = 8 };
    int32_t ids[T];
    pdb_test_ids(ids, T, 1000, 5);
    pdb_dec_service *s = open_svc();
    collect a, b;
    submit(s, ids, T, N, &a);
    collect_wait(&a);
    assert_int_equal(a.cached, 0);
    assert_int_equal(a.n, N);
    assert_int_equal(a.why, PDB_FINISH_LENGTH);
    submit(s, ids, T, N, &b);
    collect_wait(&b);
    assert_int_equal(b.cached, 256);
    assert_memory_equal(a.toks, b.toks, sizeof(int32_t) * N);
    pdb_dec_service_close(s);
    s = open_svc(); /* restart */
    submit(s, ids, T, N, &b);
    collect_wait(&b);
    assert_int_equal(b.cached, 256);
    assert_memory_equal(a.toks, b.toks, sizeof(int32_t) * N);
    pdb_dec_service_close(s);
    flip_one_block_byte();
    s = open_svc();
    submit(s, ids, T, N, &b);
    collect_wait(&b);
    assert_true(b.cached < 256); /* the bad block (and what follows it) is not served */
    assert_memory_equal(a.toks, b.toks, sizeof(int32_t) * N);
    pdb_dec_stats stt;
    pdb_dec_service_stats(s, &stt);
    assert_true(stt.store_corrupt >= 1);
    pdb_dec_service_close(s);
}

static void test_concurrent_equals_alone(void **st) {
    enum { R = 6, N = 10 };
    int32_t ids[R][200];
    int64_t lens[R] = {20, 200, 7, 150, 60, 131};
    collect alone[R], together[R];
    pdb_dec_service *s = open_svc();
    for (int i = 0; i < R; i++) {
        pdb_test_ids(ids[i], lens[i], 1000, 100 + (uint32_t)i);
        submit(s, ids[i], lens[i], N, &alone[i]);
        collect_wait(&alone[i]);
    }
    pdb_dec_service_close(s);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache); /* cold again */
    assert_int_equal(system(cmd), 0);
    s = open_svc();
    for (int i = 0; i < R; i++) submit(s, ids[i], lens[i], N, &together[i]);
    for (int i = 0; i < R; i++) {
        collect_wait(&together[i]);
        assert_int_equal(together[i].n, N);
        if (memcmp(alone[i].toks, together[i].toks, sizeof(int32_t) * N)) fail_msg("request %d differs when batched", i);
    }
    pdb_dec_service_close(s);
}

static void test_bad_requests(void **st) {
    pdb_dec_service *s = open_svc();
    int32_t bad[3] = {1, 2, 1000};
    collect c;
    collect_init(&c);
    pdb_dec_request r = {.ids = bad, .n_ids = 3, .max_tokens = 4, .on_event = on_event, .user = &c};
    assert_int_equal(pdb_dec_service_submit(s, &r, NULL), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "1000"));
    r.n_ids = 2;
    r.max_tokens = 1 << 20;
    assert_int_equal(pdb_dec_service_submit(s, &r, NULL), PDB_TOO_LARGE);
    r.max_tokens = -1;
    assert_int_equal(pdb_dec_service_submit(s, &r, NULL), PDB_INVALID);
    r.n_ids = 0;
    r.max_tokens = 1;
    assert_int_equal(pdb_dec_service_submit(s, &r, NULL), PDB_INVALID);
    assert_int_equal(c.done, 0);
    pdb_dec_service_close(s);
}

/* n choices: per-choice tokens and log-probabilities, finals counted, done at the `last` event. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, finals, lasts;
    int32_t toks[4][32];
    double lp[4][32], top0[4][32];
    int32_t top0_id[4][32];
    int n[4];
    pdb_finish why[4];
} multi;

static int on_multi(void *u, const pdb_dec_event *ev) {
    multi *c = u;
    pthread_mutex_lock(&c->mu);
    int k = ev->choice;
    assert_true(k >= 0 && k < 4);
    if (ev->finish == PDB_FINISH_NONE) {
        if (c->n[k] < 32) {
            c->lp[k][c->n[k]] = ev->logprob;
            c->top0[k][c->n[k]] = ev->n_top ? ev->top_lp[0] : 0;
            c->top0_id[k][c->n[k]] = ev->n_top ? ev->top_ids[0] : -1;
            for (int i = 1; i < ev->n_top; i++) assert_true(ev->top_lp[i] <= ev->top_lp[i - 1]);
            c->toks[k][c->n[k]++] = ev->token;
        }
    } else {
        c->why[k] = ev->finish;
        c->finals++;
        c->lasts += ev->last;
        if (ev->last) { c->done = 1; pthread_cond_broadcast(&c->cv); }
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void multi_run(pdb_dec_service *s, pdb_dec_request *r, multi *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    r->on_event = on_multi;
    r->user = c;
    PDB_TEST_OK(pdb_dec_service_submit(s, r, NULL));
    pthread_mutex_lock(&c->mu);
    while (!c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* A test mask: only token 5, three times, then the constraint is met. */
static int mask_five(void *u, void *state, float *logits, int64_t n_vocab, int64_t budget) {
    (void)u, (void)budget;
    int *count = state;
    if (*count >= 3) return 0;
    for (int64_t i = 0; i < n_vocab; i++) if (i != 5) logits[i] = -INFINITY;
    return 1;
}
static void mask_five_advance(void *u, void *state, int32_t tok) { (void)u; assert_int_equal(tok, 5); ++*(int *)state; }
static void mask_five_init(void *u, void *state) { (void)u; *(int *)state = 0; }

static void test_choices(void **st) {
    pdb_dec_service *s = open_svc();
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = (int32_t)((i * 31 + 5) % 900 + 2);
    pdb_dec_stats before, after;
    pdb_dec_service_stats(s, &before);
    pdb_dec_request r = {.ids = ids, .n_ids = 300, .max_tokens = 12, .ignore_eos = 1,
                         .sample = {.temperature = 0.9f, .top_p = 1, .seed = 7}};
    multi one, three, greedy;
    multi_run(s, &r, &one);
    r.n_choices = 3;
    multi_run(s, &r, &three);
    pdb_dec_service_stats(s, &after);
    assert_int_equal(three.finals, 3);
    assert_int_equal(three.lasts, 1);
    for (int k = 0; k < 3; k++) assert_true(three.n[k] == 12 && three.why[k] == PDB_FINISH_LENGTH);
    assert_memory_equal(three.toks[0], one.toks[0], sizeof(int32_t) * 12); /* choice 0 = the n = 1 answer */
    /* one prefill: the n = 1 request computed its 300 tokens (and wrote 2 blocks); the n = 3 one
     * mounted 256 and computed the 44-token tail once for its three choices */
    assert_int_equal(after.prefill_tokens - before.prefill_tokens, 300 + 44);
    assert_int_equal(after.cached_tokens - before.cached_tokens, 256);
    assert_memory_not_equal(three.toks[1], three.toks[0], sizeof(int32_t) * 12);
    assert_memory_not_equal(three.toks[2], three.toks[1], sizeof(int32_t) * 12);
    /* the prompt's 2 full blocks were written once (by the first request; the second hit them) */
    assert_int_equal(after.store_blocks_written - before.store_blocks_written, 2);
    /* greedy choices are the same answer; the logprob of a greedy token is the top-1's */
    r.sample.temperature = 0;
    r.n_choices = 2;
    r.logprobs = 1;
    r.top_logprobs = 4;
    multi_run(s, &r, &greedy);
    assert_memory_equal(greedy.toks[0], greedy.toks[1], sizeof(int32_t) * 12);
    for (int i = 0; i < 12; i++) {
        assert_true(greedy.lp[0][i] <= 0 && greedy.lp[0][i] == greedy.top0[0][i] && greedy.top0_id[0][i] == greedy.toks[0][i]);
        assert_true(greedy.lp[1][i] == greedy.lp[0][i]);
    }
    /* the mask hook: only what it allows, and the choice ends when it says so */
    multi masked;
    pdb_dec_request rm = {.ids = ids, .n_ids = 10, .max_tokens = 12, .n_choices = 2, .mask = mask_five,
                          .mask_advance = mask_five_advance, .mask_init = mask_five_init, .mask_state_bytes = sizeof(int),
                          .sample = {.temperature = 1, .top_p = 1, .seed = 1}};
    multi_run(s, &rm, &masked);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(masked.n[k], 3);
        assert_int_equal(masked.why[k], PDB_FINISH_STOP);
    }
    /* logit_bias +100 on one token makes it the greedy choice everywhere */
    int32_t bid = 77;
    float bval = 100;
    pdb_dec_request rb = {.ids = ids, .n_ids = 10, .max_tokens = 5, .ignore_eos = 1, .bias_ids = &bid, .bias_vals = &bval, .n_bias = 1};
    multi biased;
    multi_run(s, &rb, &biased);
    for (int i = 0; i < 5; i++) assert_int_equal(biased.toks[0][i], 77);
    /* refused at submit: more choices than the batch, a bias id outside the vocabulary */
    r.n_choices = 9;
    assert_int_equal(pdb_dec_service_submit(s, &r, NULL), PDB_INVALID);
    r.n_choices = 1;
    bid = 1 << 30;
    assert_int_equal(pdb_dec_service_submit(s, &rb, NULL), PDB_INVALID);
    printf("  n = 3 from one prefill: choice 0 = the n = 1 answer, choices differ; greedy n = 2 equal, logprob = top-1; mask and "
           "logit_bias honoured\n");
    pdb_dec_service_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_hits_restart_corruption), cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_bad_requests), cmocka_unit_test(test_choices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
