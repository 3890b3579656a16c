/* test_buf: pdb_buf appends bytes in order across growth, stays NUL-terminated, keeps embedded
 * NULs, and frees to an empty buffer; with max set the allocation never passes it, a put past it
 * fails and sets oom (later puts are no-ops); pdb_buf_grow doubles, clamps to max and refuses a
 * need past max leaving the buffer as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

static void test_max(void **state) {
    (void)state;
    pdb_buf b = {.max = 3000}; /* 2999 bytes of text and the NUL */
    char chunk[1000];
    memset(chunk, 'x', sizeof chunk);
    assert_int_equal(pdb_buf_put(&b, chunk, 1000), 1);
    assert_int_equal(b.cap, 1024);
    assert_int_equal(pdb_buf_put(&b, chunk, 1000), 1);
    assert_int_equal(b.cap, 2048);
    assert_int_equal(pdb_buf_put(&b, chunk, 999), 1); /* 2999 + NUL = max exactly */
    assert_int_equal(b.cap, 3000);                    /* clamped, not 4096 */
    assert_int_equal(b.len, 2999);
    assert_int_equal(b.p[2999], 0);
    assert_int_equal(b.oom, 0);
    assert_int_equal(pdb_buf_put(&b, "y", 1), 0); /* one byte past max */
    assert_int_equal(b.oom, 1);
    assert_int_equal(b.len, 2999);
    assert_int_equal(pdb_buf_put(&b, "", 0), 0); /* sticky */
    pdb_buf_free(&b);
    assert_int_equal(b.max, 0);
}

static void test_grow(void **state) {
    (void)state;
    char *p = NULL;
    size_t cap = 0;
    assert_int_equal(pdb_buf_grow(&p, &cap, 1, 0), 1);
    assert_int_equal(cap, 1024);
    assert_int_equal(pdb_buf_grow(&p, &cap, 1024, 0), 1); /* fits: unchanged */
    assert_int_equal(cap, 1024);
    assert_int_equal(pdb_buf_grow(&p, &cap, 5000, 0), 1);
    assert_int_equal(cap, 8192);
    char *before = p;
    assert_int_equal(pdb_buf_grow(&p, &cap, 10000, 9999), 0); /* need past max: nothing changes */
    assert_ptr_equal(p, before);
    assert_int_equal(cap, 8192);
    assert_int_equal(pdb_buf_grow(&p, &cap, 9000, 9999), 1);
    assert_int_equal(cap, 9999);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_in_order),
        cmocka_unit_test(test_embedded_nul_and_empty),
        cmocka_unit_test(test_max),
        cmocka_unit_test(test_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
