/* test_file: pdb_file's whole-file reads (exact bound, empty input, streams, errors naming the
 * source), mkdir -p (nested, existing, a file in the way) and the atomic copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "pdb_file.h"
#include "pdb_test_util.h"

static char *g_dir;

static int setup(void **state) {
    g_dir = pdb_test_tmpdir("file");
    return 0;
}

static int teardown(void **state) {
    pdb_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* Write n bytes (a repeating pattern) to g_dir/name; the path goes to path. */
static void write_file(const char *name, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc('a' + (int)(i % 26), f);
    assert_int_equal(fclose(f), 0);
}

static void test_read_sizes(void **state) {
    /* around the first buffer (64 KiB) and its doublings, and the bound itself */
    const size_t sizes[] = {0, 1, 65535, 65536, 65537, 200000, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        char path[512], *buf = NULL;
        size_t len = 7;
        write_file("r.txt", sizes[k], path, sizeof path);
        PDB_TEST_OK(pdb_file_read_all(path, 300000, &buf, &len));
        assert_int_equal(len, sizes[k]);
        assert_int_equal(buf[len], 0);
        for (size_t i = 0; i < len; i++)
            if (buf[i] != 'a' + (int)(i % 26)) fail_msg("size %zu: byte %zu differs", sizes[k], i);
        free(buf);
    }
}

static void test_read_bound(void **state) {
    char path[512], *buf = (char *)1;
    size_t len = 7;
    write_file("b.txt", 1000, path, sizeof path);
    PDB_TEST_OK(pdb_file_read_all(path, 1000, &buf, &len)); /* exactly the bound: fine */
    assert_int_equal(len, 1000);
    free(buf);
    assert_int_equal(pdb_file_read_all(path, 999, &buf, &len), PDB_TOO_LARGE);
    assert_null(buf);
    assert_int_equal(len, 0);
    assert_non_null(strstr(pdb_err_msg(), path));
    assert_int_equal(pdb_file_read_all(path, 0, &buf, &len), PDB_TOO_LARGE);
    write_file("e.txt", 0, path, sizeof path);
    PDB_TEST_OK(pdb_file_read_all(path, 0, &buf, &len)); /* empty within a bound of 0 */
    assert_int_equal(len, 0);
    assert_int_equal(buf[0], 0);
    free(buf);
}

static void test_read_errors(void **state) {
    char path[512], *buf = (char *)1;
    size_t len = 7;
    snprintf(path, sizeof path, "%s/missing.txt", g_dir);
    assert_int_equal(pdb_file_read_all(path, 100, &buf, &len), PDB_IO);
    assert_null(buf);
    assert_non_null(strstr(pdb_err_msg(), path));
    assert_int_equal(pdb_file_read_all(g_dir, 100, &buf, &len), PDB_IO); /* a directory: read error */
    assert_non_null(strstr(pdb_err_msg(), g_dir));
}

static void test_read_stream(void **state) {
    char path[512], *buf;
    size_t len;
    write_file("s.txt", 5000, path, sizeof path);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fgetc(f), 'a'); /* from the current position to the end */
    PDB_TEST_OK(pdb_file_read_stream(f, "the stream", 10000, &buf, &len));
    assert_int_equal(len, 4999);
    assert_int_equal(buf[0], 'b');
    free(buf);
    rewind(f);
    assert_int_equal(pdb_file_read_stream(f, "the stream", 4999, &buf, &len), PDB_TOO_LARGE);
    assert_non_null(strstr(pdb_err_msg(), "the stream"));
    fclose(f);
}

static void test_mkdirs(void **state) {
    char p[512], q[600];
    struct stat sb;
    snprintf(p, sizeof p, "%s/a/b/c", g_dir);
    PDB_TEST_OK(pdb_file_mkdirs(p));
    assert_int_equal(stat(p, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    mode_t um = umask(0);
    umask(um);
    assert_int_equal(sb.st_mode & 0777, 0755 & ~um); /* mode 0755 less the umask */
    PDB_TEST_OK(pdb_file_mkdirs(p)); /* existing: fine */
    snprintf(q, sizeof q, "%s/", p);
    PDB_TEST_OK(pdb_file_mkdirs(q)); /* a trailing slash */
    write_file("plain", 3, q, sizeof q);
    snprintf(p, sizeof p, "%s/plain/x", g_dir);
    assert_int_equal(pdb_file_mkdirs(p), PDB_IO); /* a file in the way */
    assert_non_null(strstr(pdb_err_msg(), "plain"));
    assert_int_equal(pdb_file_mkdirs(""), PDB_INVALID);
}

static void test_copy(void **state) {
    char src[512], dst[512], *buf;
    size_t len;
    write_file("src.bin", 70000, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/dst.bin", g_dir);
    PDB_TEST_OK(pdb_file_copy(src, dst));
    PDB_TEST_OK(pdb_file_read_all(dst, 70000, &buf, &len));
    assert_int_equal(len, 70000);
    assert_int_equal(buf[69999], 'a' + 69999 % 26);
    free(buf);
    snprintf(src, sizeof src, "%s/none", g_dir);
    assert_int_equal(pdb_file_copy(src, dst), PDB_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_sizes),
        cmocka_unit_test(test_read_bound),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_read_stream),
        cmocka_unit_test(test_mkdirs),
        cmocka_unit_test(test_copy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
