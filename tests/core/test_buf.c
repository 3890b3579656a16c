/* test_buf: pdb_buf appends bytes in order across growth, stays NUL-terminated, keeps embedded
 * NULs, and frees to an empty buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pdb_buf.h"

static void test_grows_in_order(void **state) {
    (void)state;
    pdb_buf b = {0};
    char expect[5000];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) { /* 1000 x 5 bytes: past the first 1024 and several doublings */
        char piece[6];
        snprintf(piece, sizeof piece, "%05d", i);
        pdb_buf_puts(&b, piece);
        memcpy(expect + n, piece, 5);
        n += 5;
    }
    assert_false(b.oom);
    assert_int_equal(b.len, 5000);
    assert_true(b.cap >= 5001);
    assert_memory_equal(b.p, expect, 5000);
    assert_int_equal(b.p[b.len], 0);
    pdb_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_embedded_nul_and_empty(void **state) {
    (void)state;
    pdb_buf b = {0};
    pdb_buf_put(&b, "", 0);
    assert_non_null(b.p); /* even an empty put leaves a terminated string */
    assert_int_equal(b.len, 0);
    assert_int_equal(b.p[0], 0);
    pdb_buf_put(&b, "a\0b", 3);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.p, "a\0b", 4);
    pdb_buf_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_in_order),
        cmocka_unit_test(test_embedded_nul_and_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
