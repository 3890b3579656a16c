/* test_tool_mask: the forced tool call's mask as the sampler uses it: random walks over a
 * synthetic vocabulary (every single byte, pieces of the names, of the fence and of JSON, and
 * pieces that cross from the name into the arguments), choosing uniformly among the tokens the
 * mask allows with random budgets from the minimum up, must always give NAME "\n```json\n"
 * OBJECT with NAME one of the tools and OBJECT parsed by jansson, within the budget; every name
 * is chosen by some walk; the tool-call parser (head mode, as the decoder's reply uses it) reads
 * back the same name and arguments. A named call (no names) gives an object only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_tool_mask.h"
#include "pdb_tools.h"
#include "pdb_test_mask_walk.h"

typedef struct { pdb_tool_mask *m; pdb_tool_mask_state st; } tool_walk;
static int64_t tool_walk_apply(void *m, float *logits, int64_t V, int64_t budget) {
    tool_walk *t = m;
    return pdb_tool_mask_apply(t->m, &t->st, logits, V, budget);
}
static int tool_walk_advance(void *m, int32_t tok) {
    tool_walk *t = m;
    return pdb_tool_mask_advance(t->m, &t->st, tok);
}

enum { NP = 24, V = 256 + NP + 1 };
static const char *const pieces[NP] = {"get", "_weather", "get_", "weather", "get_time", "now", "no", "w\n", "\n```", "```json",
                                       "json\n", "\n```json\n", "\n```json\n{", "time\n```json\n{\"", "{\"", "\":", "\": \"", "\", \"",
                                       "true", "}}", "]}", "[{", " ", "abc"};

typedef struct { char *name, *args; size_t name_len, args_len; int calls, ended; } parsed;

static int on_event(void *user, pdb_tools_event ev, int call, const char *s, size_t n) {
    parsed *p = user;
    (void)call;
    if (ev == PDB_TOOLS_EV_CALL) { /* s is not NUL-terminated: strndup would read s[n] */
        p->calls++;
        free(p->name);
        p->name = malloc(n + 1);
        memcpy(p->name, s, n);
        p->name[n] = 0;
        p->name_len = n;
    }
    if (ev == PDB_TOOLS_EV_ARGS) {
        p->args = realloc(p->args, p->args_len + n + 1);
        memcpy(p->args + p->args_len, s, n);
        p->args_len += n;
        p->args[p->args_len] = 0;
    }
    if (ev == PDB_TOOLS_EV_CALL_END) p->ended++;
    if (ev == PDB_TOOLS_EV_TEXT) fail_msg("content bytes in a forced call: %.*s", (int)n, s);
    return 0;
}

/* walks over names[n_names] (0: a named call); returns how many walks chose each name in seen */
static void walks(const char *const *names, size_t n_names, int n_walks, int *seen) {
    const char *bytes[V];
    size_t lens[V];
    char singles[256];
    pdb_test_vocab_fill(bytes, lens, singles, pieces, NP);
    bytes[V - 1] = NULL; lens[V - 1] = 0; /* a special token: never allowed */
    pdb_json_vocab *v;
    assert_int_equal(pdb_json_vocab_from_bytes(bytes, lens, V, &v), PDB_OK);
    pdb_tool_mask *m;
    assert_int_equal(pdb_tool_mask_new(v, names, n_names, &m), PDB_OK);
    int64_t min = pdb_tool_mask_min_tokens(m);
    float logits[V];
    char *text = malloc(1 << 16);
    uint64_t x = 0x9E3779B97F4A7C15ull + n_names;
    for (int w = 0; w < n_walks; w++) {
        int64_t max_tokens = min + (int64_t)(pdb_test_rng_next(&x) % (w % 3 == 0 ? 4 : 120));
        tool_walk tw = {.m = m};
        pdb_tool_mask_state_init(m, &tw.st);
        size_t tl = 0;
        pdb_test_mask_walk(tool_walk_apply, tool_walk_advance, &tw, bytes, lens, V, logits, max_tokens, &x, text, &tl, w);
        if (!pdb_tool_mask_done(&tw.st)) fail_msg("walk %d (max_tokens %lld): the call is not complete: %.*s", w, (long long)max_tokens, (int)tl, text);
        /* NAME "\n```json\n" OBJECT */
        size_t k = 0, obj = 0;
        if (n_names) {
            const char *fence = strstr(text, PDB_TOOLS_ARGS_OPEN);
            assert_non_null(fence);
            obj = (size_t)(fence - text) + strlen(PDB_TOOLS_ARGS_OPEN);
            for (k = 0; k < n_names; k++)
                if (strlen(names[k]) == (size_t)(fence - text) && !memcmp(text, names[k], strlen(names[k]))) break;
            if (k == n_names) fail_msg("walk %d: the name part is not one of the tools: %.*s", w, (int)tl, text);
            seen[k]++;
        }
        json_error_t je;
        json_t *j = json_loadb(text + obj, tl - obj, 0, &je);
        if (!j || !json_is_object(j)) fail_msg("walk %d: the arguments are not one object (%s): %.*s", w, je.text, (int)tl, text);
        json_decref(j);
        if (n_names) { /* the reply's parser reads the same call back, fed in random pieces */
            pdb_tools_parser p;
            pdb_tools_parser_init_head(&p);
            parsed got = {0};
            for (size_t off = 0; off < tl;) {
                size_t step = 1 + (size_t)(pdb_test_rng_next(&x) % 7);
                if (step > tl - off) step = tl - off;
                assert_int_equal(pdb_tools_parser_feed(&p, text + off, step, on_event, &got), 0);
                off += step;
            }
            assert_int_equal(pdb_tools_parser_finish(&p, on_event, &got), 0);
            pdb_tools_parser_free(&p);
            assert_int_equal(got.calls, 1);
            assert_int_equal(got.ended, 1);
            assert_string_equal(got.name, names[k]);
            if (got.args_len != tl - obj || memcmp(got.args, text + obj, got.args_len))
                fail_msg("walk %d: parsed arguments %s != %.*s", w, got.args ? got.args : "", (int)(tl - obj), text + obj);
            free(got.name);
            free(got.args);
        }
    }
    free(text);
    pdb_tool_mask_free(m);
    pdb_json_vocab_free(v);
}

static void test_choose_among_names(void **state) {
    (void)state;
    const char *names[] = {"get_weather", "get_time", "now", "no-op_2"};
    int seen[4] = {0};
    walks(names, 4, 2000, seen);
    for (int k = 0; k < 4; k++) {
        print_message("%s: chosen by %d walks\n", names[k], seen[k]);
        assert_true(seen[k] > 0);
    }
}

static void test_named_call(void **state) {
    (void)state;
    walks(NULL, 0, 1000, NULL);
}

static void test_limits(void **state) {
    (void)state;
    const char *b[2] = {"a", "b"};
    size_t l[2] = {1, 1};
    pdb_json_vocab *v;
    assert_int_equal(pdb_json_vocab_from_bytes(b, l, 2, &v), PDB_OK);
    pdb_tool_mask *m;
    const char *names[] = {"abc", "de"};
    assert_int_equal(pdb_tool_mask_new(v, names, 2, &m), PDB_OK);
    assert_int_equal(pdb_tool_mask_min_tokens(m), 2 + 9 + 2); /* "de", the fence, "{}" */
    pdb_tool_mask_free(m);
    assert_int_equal(pdb_tool_mask_new(v, NULL, 0, &m), PDB_OK);
    assert_int_equal(pdb_tool_mask_min_tokens(m), 2);
    pdb_tool_mask_free(m);
    const char *bad[] = {"a\nb"};
    assert_int_equal(pdb_tool_mask_new(v, bad, 1, &m), PDB_INVALID);
    assert_null(m);
    pdb_json_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_choose_among_names), cmocka_unit_test(test_named_call),
                                       cmocka_unit_test(test_limits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
