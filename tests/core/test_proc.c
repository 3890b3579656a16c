/* test_proc: pdb_proc reads VmRSS/VmHWM from a status file (kB -> bytes), gives 0 and does not
 * crash where the file is missing or the fields are absent, reads this process's own values
 * (> 0, peak >= now) on Linux, and writes the two gauges whole even into a short buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_proc.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_fixture(void **state) {
    char path[] = "/tmp/pdb_test_proc_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "Name:\tpdbridge\nVmPeak:\t  999999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t4\n");
    pdb_proc_memory m;
    pdb_proc_read_memory_file(path, &m);
    assert_int_equal(m.rss_bytes, 1024ull * 1024);
    assert_int_equal(m.peak_rss_bytes, 2048ull * 1024);
    write_file(path, "Name:\tkernel thread\nVmRSS: not a number\n"); /* no usable field: 0, no crash */
    pdb_proc_read_memory_file(path, &m);
    assert_int_equal(m.rss_bytes, 0);
    assert_int_equal(m.peak_rss_bytes, 0);
    unlink(path);
}

static void test_missing_file(void **state) {
    pdb_proc_memory m = {7, 7};
    pdb_proc_read_memory_file("/nonexistent/pdb_proc/status", &m);
    assert_int_equal(m.rss_bytes, 0);
    assert_int_equal(m.peak_rss_bytes, 0);
    pdb_proc_read_memory_file(NULL, &m);
    assert_int_equal(m.peak_rss_bytes, 0);
}

static void test_self(void **state) {
    if (access("/proc/self/status", R_OK)) skip();
    pdb_proc_memory m;
    pdb_proc_read_memory(&m);
    assert_true(m.rss_bytes > 0);
    assert_true(m.peak_rss_bytes >= m.rss_bytes);
    assert_true(pdb_proc_mem_available() > 0);
}

static void test_metrics_text(void **state) {
    char b[1024];
    size_t n = pdb_proc_metrics_text(b, sizeof b);
    assert_int_equal(n, strlen(b));
    assert_non_null(strstr(b, "# TYPE pdb_process_rss_bytes gauge\npdb_process_rss_bytes "));
    assert_non_null(strstr(b, "# TYPE pdb_process_peak_rss_bytes gauge\npdb_process_peak_rss_bytes "));
    assert_int_equal(b[n - 1], '\n');
    char s[100]; /* too short for both: whole lines only, NUL-terminated */
    n = pdb_proc_metrics_text(s, sizeof s);
    assert_true(n < sizeof s);
    assert_int_equal(n, strlen(s));
    assert_true(n == 0 || s[n - 1] == '\n');
    assert_int_equal(pdb_proc_metrics_text(s, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture), cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_self), cmocka_unit_test(test_metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
