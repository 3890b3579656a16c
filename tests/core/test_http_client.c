/* test_http_client: pdb_http_client against a pdb_http server started in the test: GET and POST
 * (body and headers as sent), the bearer key, status codes passed through, the body bound,
 * streamed bodies and a receiver that stops them, header lines (and extra request headers), timeouts and an unreachable
 * server (errors name the URL). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_http.h"
#include "pdb_http_client.h"
#include "pdb_test_util.h"

#define KEY "s3cret"

static pdb_http_server *g_srv;
static char g_base[64];

/* /echo: "METHOD|content-type|body"; /hdr: the X-PD-Bridge-Mode header (or "-"); /big: 3000 bytes; /missing: 404; /slow: answers after 1.5 s;
 * /stream: three chunks of 1000 bytes ('a', 'b', 'c'); /drop: "len|len after pdb_http_request_drop_body|body after". Every path but /health needs the key. */
static void handler(void *user, pdb_http_request *r) {
    const char *path = pdb_http_request_path(r);
    if (!strcmp(path, "/echo")) {
        const char *ct = pdb_http_request_header(r, "Content-Type");
        char *out = malloc(pdb_http_request_body_len(r) + 128);
        int n = sprintf(out, "%s|%s|%s", pdb_http_request_method(r), ct ? ct : "-", pdb_http_request_body(r));
        pdb_http_header h = {"X-Test", "seen"};
        pdb_http_respond(r, 200, "text/plain", out, (size_t)n, &h, 1);
        free(out);
    } else if (!strcmp(path, "/drop")) { /* the body's length, then dropped: "" of length 0 after */
        char out[64];
        size_t before = pdb_http_request_body_len(r);
        pdb_http_request_drop_body(r);
        int n = snprintf(out, sizeof out, "%zu|%zu|%s", before, pdb_http_request_body_len(r), pdb_http_request_body(r));
        pdb_http_respond(r, 200, "text/plain", out, (size_t)n, NULL, 0);
    } else if (!strcmp(path, "/hdr")) { /* the caller's extra header */
        const char *m = pdb_http_request_header(r, "X-PD-Bridge-Mode");
        pdb_http_respond(r, 200, "text/plain", m ? m : "-", strlen(m ? m : "-"), NULL, 0);
    } else if (!strcmp(path, "/big")) {
        char big[3000];
        memset(big, 'x', sizeof big);
        pdb_http_respond(r, 200, "text/plain", big, sizeof big, NULL, 0);
    } else if (!strcmp(path, "/slow")) {
        usleep(1500000);
        pdb_http_respond(r, 200, "text/plain", "late", 4, NULL, 0);
    } else if (!strcmp(path, "/stream")) {
        pdb_http_stream *s;
        if (pdb_http_respond_stream(r, 200, "text/plain", NULL, 0, 0, NULL, &s)) return;
        char chunk[1000];
        for (int k = 0; k < 3; k++) {
            memset(chunk, 'a' + k, sizeof chunk);
            if (pdb_http_stream_write(s, chunk, sizeof chunk, 1000)) break;
        }
        pdb_http_stream_close(s);
    } else {
        pdb_http_respond(r, 404, "text/plain", "no", 2, NULL, 0);
    }
}

static int setup(void **state) {
    pdb_http_opts o = {.port = 0, .api_key = KEY, .handler = handler};
    if (pdb_http_server_start(&o, &g_srv)) return -1;
    snprintf(g_base, sizeof g_base, "http://127.0.0.1:%d", pdb_http_server_port(g_srv));
    return pdb_http_client_init() == PDB_OK ? 0 : -1;
}

static int teardown(void **state) {
    pdb_http_server_stop(g_srv);
    return 0;
}

static void url(char *out, size_t n, const char *path) { snprintf(out, n, "%s%s", g_base, path); }

static void test_get_and_post(void **state) {
    char u[128];
    url(u, sizeof u, "/echo");
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 5000};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 200);
    assert_string_equal(rp.body, "GET|-|");
    assert_int_equal(rp.len, 6);
    assert_string_equal(rp.error, "");
    free(rp.body);
    c.body = "{\"a\":1}";
    c.json = 1;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 200);
    assert_string_equal(rp.body, "POST|application/json|{\"a\":1}");
    free(rp.body);
}

static void test_drop_body(void **state) {
    char u[128];
    url(u, sizeof u, "/drop");
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 5000, .body = "{\"token_ids\":[1,2,3]}", .json = 1};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 200);
    assert_string_equal(rp.body, "21|0|");
    free(rp.body);
}

static void test_extra_headers(void **state) {
    char u[128];
    url(u, sizeof u, "/hdr");
    const char *const hs[] = {"X-PD-Bridge-Mode: force", NULL};
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 5000, .headers = hs};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 200);
    assert_string_equal(rp.body, "force");
    free(rp.body);
    c.headers = NULL;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_string_equal(rp.body, "-");
    free(rp.body);
}

static void test_key_and_status(void **state) {
    char u[128];
    url(u, sizeof u, "/echo");
    pdb_http_call c = {.url = u, .timeout_ms = 5000};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp)); /* an answer, whatever its status */
    assert_int_equal(rp.status, 401);
    free(rp.body);
    c.bearer = "wrong";
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 401);
    free(rp.body);
    url(u, sizeof u, "/missing");
    c.bearer = KEY;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 404);
    assert_string_equal(rp.body, "no");
    free(rp.body);
}

static void test_body_bound(void **state) {
    char u[128];
    url(u, sizeof u, "/big");
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 5000, .max_body = 3000};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp)); /* exactly the bound */
    assert_int_equal(rp.len, 3000);
    free(rp.body);
    c.max_body = 2999;
    assert_int_equal(pdb_http_client_call(&c, &rp), PDB_TOO_LARGE);
    assert_non_null(strstr(pdb_err_msg(), u));
    assert_int_equal(rp.unreachable, 0);
    free(rp.body);
}

typedef struct { char got[4000]; size_t n; int calls, stop_after, status, x_test; } sink;

static int on_body(void *u, int status, const char *p, size_t n) {
    sink *s = u;
    s->status = status;
    if (s->n + n <= sizeof s->got) memcpy(s->got + s->n, p, n);
    s->n += n;
    return ++s->calls != s->stop_after;
}

static void on_header(void *u, const char *line, size_t n) {
    sink *s = u;
    if (n >= 7 && !strncasecmp(line, "X-Test:", 7)) s->x_test = 1;
}

static void test_stream(void **state) {
    char u[128];
    url(u, sizeof u, "/stream");
    sink s = {0};
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 5000, .on_body = on_body, .user = &s};
    pdb_http_reply rp;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(rp.status, 200);
    assert_null(rp.body);
    assert_int_equal(s.status, 200);
    assert_int_equal(s.n, 3000);
    for (size_t i = 0; i < 3000; i++)
        if (s.got[i] != 'a' + (int)(i / 1000)) fail_msg("byte %zu is %c", i, s.got[i]);
    s = (sink){.stop_after = 1};
    assert_int_equal(pdb_http_client_call(&c, &rp), PDB_IO); /* the receiver stopped it */
    assert_int_equal(s.calls, 1);
    assert_non_null(strstr(pdb_err_msg(), u));
    url(u, sizeof u, "/echo");
    s = (sink){0};
    c.on_header = on_header;
    PDB_TEST_OK(pdb_http_client_call(&c, &rp));
    assert_int_equal(s.x_test, 1);
    assert_int_equal(s.n, 6);
}

static void test_timeout(void **state) {
    char u[128];
    url(u, sizeof u, "/slow");
    pdb_http_call c = {.url = u, .bearer = KEY, .timeout_ms = 300};
    pdb_http_reply rp;
    assert_int_equal(pdb_http_client_call(&c, &rp), PDB_TIMEOUT);
    assert_int_equal(rp.status, 0);
    assert_int_equal(rp.unreachable, 0);
    assert_non_null(strstr(pdb_err_msg(), u));
    assert_true(rp.error[0] != 0);
    free(rp.body);
}

static void test_unreachable(void **state) {
    /* a port that was free a moment ago: nothing listens there */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    char u[128];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/x", ntohs(a.sin_port));
    pdb_http_call c = {.url = u, .connect_timeout_ms = 2000, .timeout_ms = 5000};
    pdb_http_reply rp;
    assert_int_equal(pdb_http_client_call(&c, &rp), PDB_IO);
    assert_int_equal(rp.unreachable, 1);
    assert_int_equal(rp.status, 0);
    assert_non_null(strstr(pdb_err_msg(), u));
    free(rp.body);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_and_post),
        cmocka_unit_test(test_extra_headers),
        cmocka_unit_test(test_drop_body),
        cmocka_unit_test(test_key_and_status),
        cmocka_unit_test(test_body_bound),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_unreachable),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
