/* test_http_idle: pdb_http's idle timeout (MHD's connection timeout) also cuts a streamed answer
 * whose headers went out and whose first byte comes later than the timeout -- as a native decoder's
 * stream waits through a long prefill (a 903K-token prompt was cut at 300 s, bench/results/
 * long_prompt_session9.md); with an idle timeout longer than the silence the same stream arrives
 * whole. This is why every server takes its idle timeout from pdb_limits (http_idle_timeout_s). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_http.h"
#include "pdb_http_client.h"
#include "pdb_test_util.h"

/* The stream's producer: 2.5 s of silence, then one chunk, then the end. */
static void *late_writer(void *arg) {
    pdb_http_stream *s = arg;
    usleep(2500000);
    pdb_http_stream_write(s, "late data", 9, 1000);
    pdb_http_stream_close(s);
    return NULL;
}

static void handler(void *user, pdb_http_request *r) {
    (void)user;
    pdb_http_stream *s;
    if (pdb_http_respond_stream(r, 200, "text/plain", NULL, 0, 0, NULL, &s)) return;
    pthread_t th;
    if (pthread_create(&th, NULL, late_writer, s)) { pdb_http_stream_close(s); return; }
    pthread_detach(th);
}

typedef struct { char got[64]; size_t n; } sink;

static int on_body(void *u, int status, const char *data, size_t n) {
    (void)status;
    sink *k = u;
    if (k->n + n < sizeof k->got) { memcpy(k->got + k->n, data, n); k->n += n; }
    return 1; /* go on */
}

/* One streamed request to a server with this idle timeout: PDB_OK and what arrived. */
static pdb_status fetch(unsigned idle_s, sink *k) {
    pdb_http_server *srv;
    pdb_http_opts o = {.port = 0, .idle_timeout_s = idle_s, .handler = handler};
    assert_int_equal(pdb_http_server_start(&o, &srv), PDB_OK);
    char u[96];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/s", pdb_http_server_port(srv));
    pdb_http_call c = {.url = u, .timeout_ms = 10000, .on_body = on_body, .user = k};
    pdb_http_reply rp;
    pdb_status st = pdb_http_client_call(&c, &rp);
    free(rp.body);
    usleep(200000); /* let the writer thread finish before the server goes */
    pdb_http_server_stop(srv);
    return st;
}

static void test_silent_stream_cut_by_short_idle_timeout(void **st) {
    (void)st;
    sink k = {0};
    pdb_status s = fetch(1, &k);
    assert_int_not_equal(s, PDB_OK); /* cut: "transfer closed with outstanding read data remaining" */
    assert_int_equal(k.n, 0);        /* the late bytes never arrive */
    print_message("     cut after the 1 s idle timeout: %s\n", pdb_err_msg());
}

static void test_silent_stream_kept_by_long_idle_timeout(void **st) {
    (void)st;
    sink k = {0};
    assert_int_equal(fetch(6, &k), PDB_OK);
    assert_int_equal(k.n, 9);
    assert_memory_equal(k.got, "late data", 9);
}

int main(void) {
    if (pdb_http_client_init()) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_silent_stream_cut_by_short_idle_timeout),
                                       cmocka_unit_test(test_silent_stream_kept_by_long_idle_timeout)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
