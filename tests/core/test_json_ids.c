/* test_json_ids: pdb_json_ids_scan reads a plain top-level integer array into the same ids jansson
 * parses, names the first id past the vocabulary, leaves a body whose other members jansson reads
 * as before, and declines (found = 0: the caller's full parse) every input off the fast path:
 * duplicates, escaped keys, signs, fractions, exponents, leading zeros, empty and nested arrays,
 * nested keys, trailing bytes, truncation, NUL bytes, non-objects. The reader (the body in pieces)
 * gives the whole-body result at every split point, and jansson on its result (the rest, or the
 * stand-in of a declined body) answers as jansson on the body: the same error, line and column,
 * or the same values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "pdb_json_ids.h"

static pdb_json_ids scan(const char *s, int64_t max_id) {
    pdb_json_ids x;
    assert_int_equal(pdb_json_ids_scan(s, strlen(s), "token_ids", max_id, &x), PDB_OK);
    return x;
}

/* The fast path agrees with jansson on the ids and on every other member. */
static void check_same_as_jansson(const char *body) {
    pdb_json_ids x = scan(body, 1 << 30);
    assert_int_equal(x.found, 1);
    assert_int_equal(x.bad_index, -1);
    json_error_t e;
    json_t *full = json_loads(body, 0, &e), *rest = json_loadb(x.rest, x.rest_len, 0, &e);
    assert_non_null(full);
    assert_non_null(rest);
    json_t *arr = json_object_get(full, "token_ids");
    assert_int_equal((int64_t)json_array_size(arr), x.n);
    for (int64_t i = 0; i < x.n; i++) assert_int_equal(json_integer_value(json_array_get(arr, (size_t)i)), x.ids[i]);
    assert_int_equal(json_integer_value(json_object_get(rest, "token_ids")), 0);
    json_object_del(full, "token_ids");
    json_object_del(rest, "token_ids");
    assert_true(json_equal(full, rest));
    json_decref(full);
    json_decref(rest);
    pdb_json_ids_free(&x);
}

static void test_plain_arrays(void **st) {
    (void)st;
    check_same_as_jansson("{\"token_ids\":[1,2,3],\"block_size\":128,\"first_block\":0,\"fingerprint\":\"ab\"}");
    check_same_as_jansson("  {\"fingerprint\" : \"x,]}\\\"[\" , \"token_ids\" : [ 0 , 129279,\n7\t] , \"o\":{\"token_ids\":[9]}}  \n");
    check_same_as_jansson("{\"a\":[[1,2],{\"b\":[3]}],\"token_ids\":[1073741823],\"t\":true,\"n\":null,\"f\":-1.5e3}");
    /* a long random array, as the front writes it */
    size_t cap = 1 << 20, k = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    k += (size_t)snprintf(b + k, cap - k, "{\"block_size\":2048,\"token_ids\":[");
    uint64_t r = 7;
    for (int i = 0; i < 50000; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        k += (size_t)snprintf(b + k, cap - k, "%s%llu", i ? "," : "", (unsigned long long)((r >> 33) % 129280));
    }
    snprintf(b + k, cap - k, "],\"first_block\":3}");
    check_same_as_jansson(b);
    free(b);
}

static void test_bad_index(void **st) {
    (void)st;
    pdb_json_ids x = scan("{\"token_ids\":[5,999,1000,4000,2]}", 1000);
    assert_int_equal(x.found, 1);
    assert_int_equal(x.n, 5);
    assert_int_equal(x.bad_index, 2);
    assert_int_equal(x.ids[1], 999);
    pdb_json_ids_free(&x);
}

static void test_declined(void **st) {
    (void)st;
    static const char *const off[] = {
        "{\"token_ids\":[1,2],\"token_ids\":[3]}",  /* twice: jansson keeps the last */
        "{\"token\\u005fids\":[1,2]}",              /* an escaped key that may be token_ids */
        "{\"token_ids\":[1,-2]}", "{\"token_ids\":[1,2.0]}", "{\"token_ids\":[1,2e3]}", "{\"token_ids\":[01]}",
        "{\"token_ids\":[]}", "{\"token_ids\":[[1]]}", "{\"token_ids\":[1,]}", "{\"token_ids\":[1 2]}",
        "{\"token_ids\":[12345678901]}", "{\"token_ids\":\"1,2\"}", "{\"token_ids\":[1,\"2\"]}",
        "{\"o\":{\"token_ids\":[1]}}", "{\"token_ids\":[1]} x", "{\"token_ids\":[1]", "{\"token_ids\":[1", "[1,2]",
        "", "{}", "{\"token_ids\":[1],}", "{\"a\" 1,\"token_ids\":[1]}", "{\"a\":\"unterminated,\"token_ids\":[1]}",
    };
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        pdb_json_ids x = scan(off[i], 1000);
        if (x.found) fail_msg("taken: %s", off[i]);
        assert_null(x.ids);
        assert_null(x.rest);
    }
    /* NUL bytes where a value or a nested value goes (a binary body): declined, and the walk ends
     * (a bare-word skip that made no progress looped forever inside an array or object) */
    static const char nul1[] = "{\"a\":[\0],\"token_ids\":[1]}", nul2[] = "{\"a\":{\"b\":\0},\"token_ids\":[1]}",
                      nul3[] = "{\"a\":\0,\"token_ids\":[1]}";
    const char *const nuls[] = {nul1, nul2, nul3};
    const size_t nul_len[] = {sizeof nul1 - 1, sizeof nul2 - 1, sizeof nul3 - 1};
    for (size_t i = 0; i < 3; i++) {
        pdb_json_ids x;
        assert_int_equal(pdb_json_ids_scan(nuls[i], nul_len[i], "token_ids", 1000, &x), PDB_OK);
        assert_int_equal(x.found, 0);
    }
    /* truncations of a good body are all declined (never read past len) */
    const char *good = "{\"token_ids\":[10,20,30],\"block_size\":128}";
    for (size_t n = 0; n < strlen(good); n++) {
        char *c = malloc(n ? n : 1);
        memcpy(c, good, n);
        pdb_json_ids x;
        assert_int_equal(pdb_json_ids_scan(c, n, "token_ids", 1000, &x), PDB_OK);
        assert_int_equal(x.found, 0);
        free(c);
    }
}

/* ---- the reader: the body in pieces ---- */

static pdb_json_ids read_pieces(const char *b, size_t len, const size_t *cuts, size_t n_cuts, int64_t max_id) {
    pdb_json_ids_reader *rd;
    assert_int_equal(pdb_json_ids_reader_new("token_ids", max_id, &rd), PDB_OK);
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        assert_int_equal(pdb_json_ids_reader_feed(rd, b + at, to - at), PDB_OK);
        at = to;
    }
    assert_int_equal(pdb_json_ids_reader_bytes(rd), len);
    pdb_json_ids x;
    assert_int_equal(pdb_json_ids_reader_finish(rd, &x), PDB_OK);
    pdb_json_ids_reader_free(rd);
    assert_non_null(x.rest);
    return x;
}

/* top-level token_ids elements >= max_id all read as max_id (the stand-in writes them so) */
static void clamp_ids(json_t *j, int64_t max_id) {
    json_t *a = json_is_object(j) ? json_object_get(j, "token_ids") : NULL;
    for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++)
        if (json_is_integer(json_array_get(a, i)) && json_integer_value(json_array_get(a, i)) >= max_id)
            json_array_set_new(a, i, json_integer(max_id));
}

/* What the prefill server answers from: jansson on the body vs jansson on what the reader hands
 * back (the rest with the ids put back, or the stand-in): the same error at the same line and
 * column, or the same values. */
static void check_same_answer(const char *b, size_t len, const pdb_json_ids *x, int64_t max_id) {
    json_error_t e1, e2;
    json_t *full = json_loadb(b, len, 0, &e1), *got = json_loadb(x->rest, x->rest_len, 0, &e2);
    if (!got && x->found) { /* the server's error path: the stand-in gives the body's line and column */
        char *t;
        size_t tl;
        assert_int_equal(pdb_json_ids_stand_in(x, max_id, &t, &tl), PDB_OK);
        assert_null(json_loadb(t, tl, 0, &e2));
        free(t);
    }
    if (!full) {
        if (got) fail_msg("jansson fails on the body (%s) but parses the reader's text: %s", e1.text, b);
        if (e1.line != e2.line || e1.column != e2.column || strcmp(e1.text, e2.text))
            fail_msg("body %d:%d '%s', reader %d:%d '%s': %s", e1.line, e1.column, e1.text, e2.line, e2.column, e2.text, b);
        return;
    }
    if (!got) fail_msg("jansson parses the body but not the reader's text (%d:%d %s): %s", e2.line, e2.column, e2.text, b);
    if (x->found) {
        json_t *a = json_array();
        for (int64_t i = 0; i < x->n; i++) json_array_append_new(a, json_integer(x->ids[i] < 0 ? max_id : x->ids[i]));
        json_object_set_new(got, "token_ids", a);
    }
    clamp_ids(full, max_id);
    clamp_ids(got, max_id);
    if (!json_equal(full, got)) fail_msg("different values: %s", b);
    json_decref(full);
    json_decref(got);
}

/* Every split into two pieces, one-byte pieces and a few three-piece splits give the whole-body
 * scan's result, and the same answer as jansson on the body. */
static void check_splits(const char *b, size_t len, int64_t max_id) {
    pdb_json_ids whole;
    assert_int_equal(pdb_json_ids_scan(b, len, "token_ids", max_id, &whole), PDB_OK);
    pdb_json_ids ref = read_pieces(b, len, NULL, 0, max_id);
    assert_int_equal(ref.found, whole.found);
    if (whole.found) {
        assert_int_equal(ref.n, whole.n);
        assert_memory_equal(ref.ids, whole.ids, sizeof(int32_t) * (size_t)whole.n);
        assert_int_equal(ref.bad_index, whole.bad_index);
        assert_int_equal(ref.rest_len, whole.rest_len);
        assert_memory_equal(ref.rest, whole.rest, whole.rest_len);
    }
    check_same_answer(b, len, &ref, max_id);
    size_t *ones = malloc(sizeof(size_t) * (len + 1));
    assert_non_null(ones);
    for (size_t k = 0; k < len; k++) ones[k] = k;
    for (size_t k = 0; k <= len + 2; k++) {
        size_t cuts[2], nc;
        if (k <= len) cuts[0] = k, nc = 1;
        else if (k == len + 1) nc = 0;
        else cuts[0] = len / 3, cuts[1] = len - len / 5, nc = 2;
        pdb_json_ids x = k == len + 1 ? read_pieces(b, len, ones, len, max_id) : read_pieces(b, len, cuts, nc, max_id);
        if (x.found != ref.found) fail_msg("split at %zu: found %d vs %d: %s", k, x.found, ref.found, b);
        assert_int_equal(x.n, ref.n);
        assert_int_equal(x.bad_index, ref.bad_index);
        if (x.n) assert_memory_equal(x.ids, ref.ids, sizeof(int32_t) * (size_t)x.n);
        assert_int_equal(x.rest_len, ref.rest_len);
        assert_memory_equal(x.rest, ref.rest, ref.rest_len);
        pdb_json_ids_free(&x);
    }
    free(ones);
    pdb_json_ids_free(&ref);
    pdb_json_ids_free(&whole);
}

static void test_reader_splits(void **st) {
    (void)st;
    static const char *const bodies[] = {
        /* taken */
        "{\"token_ids\":[1,2,3],\"block_size\":128,\"first_block\":0,\"fingerprint\":\"ab\"}",
        "  {\"fingerprint\" : \"x,]}\\\"[\" , \"token_ids\" : [ 0 , 999,\n7\t] , \"o\":{\"token_ids\":[9]}}  \n",
        "{\"a\":[[1,2],{\"b\":[3]}],\"token_ids\":[1000, 4000000000,5],\"t\":true,\"n\":null,\"f\":-1.5e3}",
        "{\"\u00e9\":\"\xc3\xbc\",\"token_ids\":[1,2]}",
        /* declined before, inside and after the array; errors at every kind of place */
        "{\"token_ids\":[1,2,3] x}", "{\"token_ids\":[1,\n  2,\r\n 3],\n \"a\": tru}",
        "{\"token_ids\":[1, 2 ,3 ], \"token_ids\":[4]}", "{\"token_ids\":[1,2, 5000, 3],\"k\\u0061\":1}",
        "{\"token_ids\":[1,2,-3]}", "{\"token_ids\":[1,\n2,3.5 ]}", "{\"token_ids\":[1,2,01]}",
        "{\"token_ids\":[1, 2 3]}", "{\"token_ids\":[1,2", "{\"token_ids\":[1,2,", "{\"token_ids\":[1,2]",
        "{\"token_ids\":[12345678901, 2]}", "{\"token_ids\":[1,2,]}", "{\"token_ids\":[1,2]}}",
        "{\"token_ids\":[\n\n]}", "{\"token_ids\":[1,2],\"a\":\"\x01\"}", "{\"token_ids\":[3000,\n 8]\n,\n\"b\":[1,{\"c\":2}],\"d\":x}",
        "{\"\xc3\xa9\":\"\xc3\xbc\",\"token_ids\":[1,2] ,}", "{\"token_ids\":[1,2e5]}", "{\"token_ids\":[1,\"2\"]}",
        "{\"token_ids\":[1,[2]]}", "{\"token_ids\":[99999,\n\n  99999, 1]   ,\"x\":[}", "[1,2]", "", "{}",
        "{\"a\" 1,\"token_ids\":[1]}", "{\"o\":{\"token_ids\":[1]}}", "{\"token_ids\":\"1,2\"}", "{\"token_ids\":[1,2]} x",
        "{\"token_ids\":[1,2],\"token_ids\":[1,2,3",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) check_splits(bodies[i], strlen(bodies[i]), 1000);
    static const char nul[] = "{\"token_ids\":[1,\0 2]}", nul2[] = "{\"token_ids\":[1,2]\0}";
    check_splits(nul, sizeof nul - 1, 1000);
    check_splits(nul2, sizeof nul2 - 1, 1000);
    /* a longer array with irregular whitespace and newlines, then an error: every split */
    char b[4096];
    size_t k = (size_t)snprintf(b, sizeof b, "{\"block_size\": 2048,\n \"token_ids\": [");
    for (int i = 0; i < 300; i++) k += (size_t)snprintf(b + k, sizeof b - k, "%s%d%s", i ? "," : "", (i * 7919) % 1200, i % 37 == 0 ? "\n   " : i % 5 ? "" : " ");
    snprintf(b + k, sizeof b - k, "],\n  \"fingerprint\": \"ab\"}");
    check_splits(b, strlen(b), 1000);
    snprintf(b + k, sizeof b - k, "],\n  \"fingerprint\": \"ab\" \"x\"}");
    check_splits(b, strlen(b), 1000);
    snprintf(b + k, sizeof b - k, ", -1]}");
    check_splits(b, strlen(b), 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_plain_arrays), cmocka_unit_test(test_bad_index),
                                       cmocka_unit_test(test_declined), cmocka_unit_test(test_reader_splits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
