/* test_json_mask: the JSON object recognizer (valid and invalid texts, the distance to
 * completion) and the mask as the sampler uses it: random walks over a synthetic vocabulary
 * (every single byte plus multi-byte pieces of JSON), choosing uniformly among the tokens the
 * mask allows with random budgets, must always end in a text jansson parses as an object, within
 * the budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_json_mask.h"
#include "pdb_test_mask_walk.h"

static int accepts(const char *text) {
    pdb_json_state st;
    pdb_json_state_init(&st);
    return pdb_json_state_feed(&st, text, strlen(text)) && pdb_json_state_complete(&st);
}

static int prefix_ok(const char *text) {
    pdb_json_state st;
    pdb_json_state_init(&st);
    return pdb_json_state_feed(&st, text, strlen(text));
}

static void test_recognizer(void **state) {
    (void)state;
    const char *good[] = {"{}", "{\n}\t", "{\"a\":1}", "{\"a\":[1,2.5,-0,3e+7,1E-2,true,false,null,\"x\"]}",
                          "{\"\":{\"b\":{}}}", "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", "{\"u\":\"\xE2\x82\xAC \xF0\x9F\x98\x80\"}",
                          "{\"a\" : [ ] , \"b\" : [ [ ] ] }", "{\"n\":0.0e0}", "{\"i\":-123456789012345,\"e\":1e99}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!accepts(good[i])) fail_msg("refused %s", good[i]);
    const char *bad[] = {" {}", "[]", "1", "\"s\"", "{a:1}", "{\"a\"}", "{\"a\":}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}",
                         "{\"a\":-}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":True}", "{,}", "{\"a\":1,}", "{\"a\":[1,]}",
                         "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u0041\"}", "{\"a\":\"\xC0\xAF\"}",
                         "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xE2\x82\"}", "{}{}", "{} x", "{\"a\":1234567890123456}", "{\"a\":1e100}", "{\"a\":1]", "{\"a\":[1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (accepts(bad[i])) fail_msg("accepted %s", bad[i]);
    assert_true(prefix_ok("{\"a\":[1,{\"b\":\"x"));
    assert_false(prefix_ok("x"));
    assert_false(prefix_ok("{\"a\"1"));
    /* distances: the shortest completions */
    struct { const char *p; int64_t d; } dd[] = {
        {"", 2}, {"{", 1}, {"{\"", 4}, {"{\"ab", 4}, {"{\"a\"", 3}, {"{\"a\":", 2}, {"{\"a\":[", 2}, {"{\"a\":[1", 2},
        {"{\"a\":[1,", 3}, {"{\"a\":-", 2}, {"{\"a\":1.", 2}, {"{\"a\":1e+", 2}, {"{\"a\":t", 4}, {"{\"a\":\"\\", 3},
        {"{\"a\":\"\xF0\x9F", 4}, {"{\"a\":1,", 5}, {"{}", 0},
    };
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++) {
        pdb_json_state st;
        pdb_json_state_init(&st);
        assert_true(pdb_json_state_feed(&st, dd[i].p, strlen(dd[i].p)));
        if (pdb_json_state_dist(&st) != dd[i].d)
            fail_msg("dist(%s) = %lld, want %lld", dd[i].p, (long long)pdb_json_state_dist(&st), (long long)dd[i].d);
    }
    /* depth is bounded: a 257th open container is refused */
    pdb_json_state st;
    pdb_json_state_init(&st);
    assert_true(pdb_json_state_feed(&st, "{\"a\":", 5));
    int ok = 1;
    for (int i = 0; i < PDB_JSON_MAX_DEPTH - 1 && ok; i++) ok = pdb_json_state_feed(&st, "[", 1);
    assert_true(ok);
    assert_false(pdb_json_state_feed(&st, "[", 1));
}

typedef struct { pdb_json_vocab *v; pdb_json_state st; } json_walk;
static int64_t json_walk_apply(void *m, float *logits, int64_t V, int64_t budget) {
    json_walk *j = m;
    return pdb_json_mask_apply(j->v, &j->st, logits, V, budget);
}
static int json_walk_advance(void *m, int32_t tok) {
    json_walk *j = m;
    return pdb_json_mask_advance(j->v, &j->st, tok);
}

static void test_random_walks(void **state) {
    (void)state;
    /* the vocabulary: all 256 single bytes, pieces of JSON, and pieces that are never valid here */
    const char *pieces[] = {"{\"", "\":", "\": \"", "\", \"", "true", "false", "null", "}}", "]}", "[{", "0.5e-3", "\\n",
                            "\\\"", "\xE2\x82\xAC", "\xE2\x82", "\xAC\xAC", "\xF0\x9F\x98\x80", "  ", "\n\n", "abc", ", ",
                            "12", "-", "\"}", "{}", "[]", "\\u00", "}{", "\x01", "} x"};
    enum { NP = sizeof pieces / sizeof pieces[0], V = 256 + NP + 2 };
    const char *bytes[V];
    size_t lens[V];
    char singles[256];
    pdb_test_vocab_fill(bytes, lens, singles, pieces, NP);
    bytes[V - 2] = NULL; lens[V - 2] = 0;           /* an id without bytes */
    bytes[V - 1] = "{}"; lens[V - 1] = 2;
    pdb_json_vocab *v;
    assert_int_equal(pdb_json_vocab_from_bytes(bytes, lens, V, &v), PDB_OK);
    float *logits = malloc(sizeof(float) * V);
    char *text = malloc(1 << 16);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int walks = 3000, complete_early = 0;
    for (int w = 0; w < walks; w++) {
        int64_t max_tokens = 2 + (int64_t)(pdb_test_rng_next(&x) % (w % 3 == 0 ? 8 : 200));
        json_walk jw = {.v = v};
        pdb_json_state_init(&jw.st);
        size_t tl = 0;
        int64_t used = pdb_test_mask_walk(json_walk_apply, json_walk_advance, &jw, bytes, lens, V, logits, max_tokens, &x, text, &tl, w);
        if (used < max_tokens) complete_early++;
        json_error_t je;
        json_t *j = json_loadb(text, tl, 0, &je);
        if (!j || !json_is_object(j)) fail_msg("walk %d (max_tokens %lld) ended in invalid JSON (%s): %.*s", w, (long long)max_tokens, je.text,
                                               (int)tl, text);
        assert_true(pdb_json_state_complete(&jw.st));
        /* the recognizer's own verdict on the whole text, from a fresh state; and it starts with '{' */
        pdb_json_state fresh;
        pdb_json_state_init(&fresh);
        if (!pdb_json_state_feed(&fresh, text, tl) || !pdb_json_state_complete(&fresh) || text[0] != '{')
            fail_msg("walk %d: the text is not one object from its first byte: %.*s", w, (int)tl, text);
        json_decref(j);
    }
    print_message("%d random walks, all valid objects; %d completed before their budget\n", walks, complete_early);
    assert_true(complete_early > 0);
    free(text);
    free(logits);
    pdb_json_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_recognizer), cmocka_unit_test(test_random_walks)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
