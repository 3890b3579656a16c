/* test_json_ids: pdb_json_ids_scan reads a plain top-level integer array into the same ids jansson
 * parses, names the first id past the vocabulary, leaves a body whose other members jansson reads
 * as before, and declines (found = 0: the caller's full parse) every input off the fast path:
 * duplicates, escaped keys, signs, fractions, exponents, leading zeros, empty and nested arrays,
 * nested keys, trailing bytes, truncation, NUL bytes, non-objects. */
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

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_plain_arrays), cmocka_unit_test(test_bad_index),
                                       cmocka_unit_test(test_declined)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
