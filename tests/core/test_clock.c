/* test_clock: pdb_clock_now is monotonic, advances with real time and agrees with
 * CLOCK_MONOTONIC (the clock every duration in pdbridge is measured with). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_clock.h"

static void test_monotonic(void **state) {
    double prev = pdb_clock_now();
    for (int i = 0; i < 100000; i++) {
        double t = pdb_clock_now();
        assert_true(t >= prev);
        prev = t;
    }
}

static void test_advances_with_sleep(void **state) {
    double t0 = pdb_clock_now();
    usleep(20000);
    double d = pdb_clock_now() - t0;
    assert_true(d >= 0.019);
    assert_true(d < 5.0); /* a loaded machine may be slow, never this slow */
}

static void test_same_clock_as_monotonic(void **state) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double a = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9, b = pdb_clock_now();
    assert_true(b >= a);
    assert_true(b - a < 1.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_advances_with_sleep),
        cmocka_unit_test(test_same_clock_as_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
