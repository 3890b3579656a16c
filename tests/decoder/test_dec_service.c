/* test_dec_service: the decode engine as a service. A repeated prompt hits its full blocks
 * (cached_tokens) with the same greedy answer; a restart still hits; a corrupted block is a
 * miss and the answer stays correct; concurrent requests (continuous batching) get the answers
 * they get alone; bad requests are refused at submit with no callback. */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_hits_restart_corruption), cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_bad_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
