/* test_openai: OpenAI request parsing (every accepted form, every refused form with its status
 * and param), response/chunk JSON shapes, SSE framing, UTF-8 repair and hold-back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "pdb_openai.h"

static const pdb_openai_limits lim = {.max_context = 4096};

static void parse_ok(pdb_openai_kind k, const char *body, pdb_openai_request *r) {
    pdb_openai_error e;
    pdb_status st = pdb_openai_parse_request(k, body, strlen(body), &lim, r, &e);
    if (st != PDB_OK) fail_msg("expected OK for %s, got %d %s (param %s)", body, e.status, e.message, e.param);
}

static void parse_bad(pdb_openai_kind k, const char *body, size_t len, int status, const char *param) {
    pdb_openai_request r;
    pdb_openai_error e;
    pdb_status st = pdb_openai_parse_request(k, body, len, &lim, &r, &e);
    if (st == PDB_OK) fail_msg("expected %d for %s", status, body);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param ? param : "");
    assert_true(strlen(e.message) > 0);
    char *j = pdb_openai_error_json(&e); /* always valid JSON of the right shape */
    json_error_t je;
    json_t *root = json_loads(j, 0, &je);
    assert_non_null(root);
    json_t *err = json_object_get(root, "error");
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_string_equal(json_string_value(json_object_get(err, "type")), status == 404 ? "not_found_error" : "invalid_request_error");
    if (param) assert_string_equal(json_string_value(json_object_get(err, "param")), param);
    else assert_true(json_is_null(json_object_get(err, "param")));
    json_decref(root);
    free(j);
    assert_null(r.prompt_ids);
    assert_null(r.model);
}
#define BAD(k, body, status, param) parse_bad(k, body, strlen(body), status, param)

static void test_completion_forms(void **state) {
    (void)state;
    pdb_openai_request r;
    parse_ok(PDB_OPENAI_COMPLETION, "{\"model\":\"m\",\"prompt\":\"héllo\",\"max_tokens\":5}", &r);
    assert_false(r.prompt_is_ids);
    assert_string_equal(r.prompt_text, "héllo");
    assert_int_equal(r.prompt_len, 6);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.max_tokens, 5);
    assert_true(r.temperature == 1.0 && r.top_p == 1.0 && r.top_k == 0 && !r.has_seed && !r.stream);
    pdb_openai_request_free(&r);

    parse_ok(PDB_OPENAI_COMPLETION, "{\"prompt\":[1,2,3],\"return_token_ids\":true,\"temperature\":0,\"seed\":7,\"top_k\":-1}", &r);
    assert_true(r.prompt_is_ids);
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 3);
    assert_true(r.return_token_ids);
    assert_true(r.has_seed);
    assert_int_equal(r.seed, 7);
    assert_int_equal(r.max_tokens, -1);
    assert_null(r.model);
    pdb_openai_request_free(&r);

    parse_ok(PDB_OPENAI_COMPLETION, "{\"prompt\":[\"one string\"],\"stop\":\"\\n\",\"stream\":true,"
                                    "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,\"top_p\":0.5,\"top_k\":40}", &r);
    assert_string_equal(r.prompt_text, "one string");
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "\n");
    assert_true(r.stream && r.include_usage && r.ignore_eos);
    assert_true(r.top_p == 0.5 && r.top_k == 40);
    pdb_openai_request_free(&r);

    parse_ok(PDB_OPENAI_COMPLETION, "{\"prompt\":[[5,6]],\"stop\":[\"a\",\"bb\",\"\",\"ccc\"],\"max_tokens\":16.0,\"n\":1,\"logprobs\":null}", &r);
    assert_true(r.prompt_is_ids);
    assert_int_equal(r.n_prompt_ids, 2);
    assert_int_equal(r.n_stop, 3); /* the empty stop string is dropped */
    assert_int_equal(r.max_tokens, 16);
    pdb_openai_request_free(&r);
}

static void test_chat_forms(void **state) {
    (void)state;
    pdb_openai_request r;
    parse_ok(PDB_OPENAI_CHAT,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"},"
             "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
             "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_completion_tokens\":9,\"max_tokens\":3}", &r);
    assert_int_equal(r.n_messages, 4);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[1].content, "hi");
    assert_string_equal(r.messages[2].content, "");
    assert_string_equal(r.messages[3].content, "a\nb");
    assert_int_equal(r.max_tokens, 9);
    pdb_openai_request_free(&r);
    parse_ok(PDB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}],\"max_tokens\":2}", &r);
    assert_string_equal(r.messages[0].role, "system");
    assert_int_equal(r.max_tokens, 2);
    pdb_openai_request_free(&r);
}

static void test_bad_requests(void **state) {
    (void)state;
    const pdb_openai_kind C = PDB_OPENAI_COMPLETION, H = PDB_OPENAI_CHAT;
    BAD(C, "{\"prompt\": \"x\",", 400, NULL);
    BAD(C, "", 400, NULL);
    BAD(C, "[1,2]", 400, NULL);
    BAD(C, "{\"prompt\":\"x\",\"prompt\":\"y\"}", 400, NULL); /* duplicate key */
    BAD(C, "{}", 400, "prompt");
    BAD(C, "{\"prompt\":5}", 400, "prompt");
    BAD(C, "{\"prompt\":[]}", 400, "prompt");
    BAD(C, "{\"prompt\":[1,\"a\"]}", 400, "prompt");
    BAD(C, "{\"prompt\":[1,-2]}", 400, "prompt");
    BAD(C, "{\"prompt\":[1,4294967296]}", 400, "prompt");
    BAD(C, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt");
    BAD(C, "{\"prompt\":[{}]}", 400, "prompt");
    BAD(C, "{\"prompt\":\"x\",\"model\":3}", 400, "model");
    BAD(C, "{\"prompt\":\"x\",\"max_tokens\":-1}", 400, "max_tokens");
    BAD(C, "{\"prompt\":\"x\",\"max_tokens\":1000000000}", 400, "max_tokens");
    BAD(C, "{\"prompt\":\"x\",\"max_tokens\":\"5\"}", 400, "max_tokens");
    BAD(C, "{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "max_tokens");
    BAD(C, "{\"prompt\":\"x\",\"temperature\":-0.1}", 400, "temperature");
    BAD(C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400, "temperature");
    BAD(C, "{\"prompt\":\"x\",\"top_p\":0}", 400, "top_p");
    BAD(C, "{\"prompt\":\"x\",\"top_p\":1.01}", 400, "top_p");
    BAD(C, "{\"prompt\":\"x\",\"top_k\":-2}", 400, "top_k");
    BAD(C, "{\"prompt\":\"x\",\"seed\":\"s\"}", 400, "seed");
    BAD(C, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop");
    BAD(C, "{\"prompt\":\"x\",\"stop\":[1]}", 400, "stop");
    BAD(C, "{\"prompt\":\"x\",\"stop\":7}", 400, "stop");
    BAD(C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "stream");
    BAD(C, "{\"prompt\":\"x\",\"stream_options\":3}", 400, "stream_options");
    BAD(C, "{\"prompt\":\"x\",\"return_token_ids\":1}", 400, "return_token_ids");
    BAD(C, "{\"prompt\":\"x\",\"n\":2}", 400, "n");
    BAD(C, "{\"prompt\":\"x\",\"echo\":true}", 400, "echo");
    BAD(C, "{\"prompt\":\"x\\u0000y\"}", 400, NULL); /* NUL in a string */
    parse_bad(C, "{\"prompt\":\"\xff\xfe\"}", 13, 400, NULL);   /* invalid UTF-8 */
    parse_bad(C, "{\"prompt\":\"\xed\xa0\x80\"}", 14, 400, NULL); /* encoded surrogate */
    BAD(H, "{\"prompt\":\"x\"}", 400, "messages");
    BAD(H, "{\"messages\":[]}", 400, "messages");
    BAD(H, "{\"messages\":{}}", 400, "messages");
    BAD(H, "{\"messages\":[3]}", 400, "messages[0]");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[1].role");
    BAD(H, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":-5}", 400, "max_completion_tokens");

    /* unknown model -> 404 */
    pdb_openai_request r;
    parse_ok(C, "{\"prompt\":\"x\",\"model\":\"other\"}", &r);
    pdb_openai_error e;
    assert_int_equal(pdb_openai_check_model(&r, "mine", &e), PDB_NOT_FOUND);
    assert_int_equal(e.status, 404);
    assert_string_equal(e.param, "model");
    assert_string_equal(e.code, "model_not_found");
    assert_int_equal(pdb_openai_check_model(&r, "other", &e), PDB_OK);
    pdb_openai_request_free(&r);
}

static void test_json_error_position(void **state) {
    (void)state;
    pdb_openai_request r;
    pdb_openai_error e;
    const char *body = "{\n  \"prompt\": \"x\"\n  \"max_tokens\": 3}";
    assert_int_not_equal(pdb_openai_parse_request(PDB_OPENAI_COMPLETION, body, strlen(body), &lim, &r, &e), PDB_OK);
    assert_non_null(strstr(e.message, "line 3"));
    assert_non_null(strstr(e.message, "column"));
}

static json_t *load(const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, 0, &je);
    if (!j) fail_msg("bad JSON (%s): %.*s", je.text, (int)n, s);
    return j;
}

static void test_response_shapes(void **state) {
    (void)state;
    pdb_openai_meta m = {PDB_OPENAI_COMPLETION, "cmpl-1", 1700000000, "tiny"};
    int32_t ids[3] = {4, 5, 6};
    pdb_openai_result res = {"ab\xff", 3, "length", ids, 3, NULL, 0};
    pdb_openai_usage u = {10, 3, 8};
    json_t *extra = json_pack("{s:{s:s}}", "pd_bridge", "verdict", "skipped short");
    char *out;
    size_t n;
    assert_int_equal(pdb_openai_build_response(&m, &res, &u, extra, &out, &n), PDB_OK);
    json_t *j = load(out, n);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_string_equal(json_string_value(json_object_get(j, "id")), "cmpl-1");
    assert_int_equal(json_integer_value(json_object_get(j, "created")), 1700000000);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "ab\xEF\xBF\xBD");
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    assert_int_equal(json_array_size(json_object_get(c, "token_ids")), 3);
    json_t *us = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(us, "total_tokens")), 13);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 8);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "pd_bridge"), "verdict")), "skipped short");
    json_decref(j);
    free(out);

    m.kind = PDB_OPENAI_CHAT;
    res.token_ids = NULL;
    res.text = "hi";
    res.text_len = 2;
    res.finish_reason = "stop";
    assert_int_equal(pdb_openai_build_response(&m, &res, &u, NULL, &out, &n), PDB_OK);
    j = load(out, n);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "message"), "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "message"), "content")), "hi");
    assert_null(json_object_get(c, "token_ids"));
    json_decref(j);
    free(out);

    /* chunks: SSE framing, role on the first chat chunk, finish + usage + extra on the last */
    res.finish_reason = NULL;
    assert_int_equal(pdb_openai_build_chunk(&m, &res, 1, NULL, NULL, &out, &n), PDB_OK);
    assert_int_equal(strncmp(out, "data: {", 7), 0);
    assert_string_equal(out + n - 2, "\n\n");
    assert_int_equal(strlen(out), n);
    j = load(out + 6, n - 8);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(c, "delta"), "role")), "assistant");
    assert_true(json_is_null(json_object_get(c, "finish_reason")));
    assert_null(json_object_get(j, "usage"));
    json_decref(j);
    free(out);
    res.text_len = 0;
    res.finish_reason = "stop";
    assert_int_equal(pdb_openai_build_chunk(&m, &res, 0, &u, extra, &out, &n), PDB_OK);
    j = load(out + 6, n - 8);
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_null(json_object_get(json_object_get(c, "delta"), "content"));
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    assert_non_null(json_object_get(j, "usage"));
    assert_non_null(json_object_get(j, "pd_bridge"));
    json_decref(j);
    free(out);

    m.kind = PDB_OPENAI_COMPLETION;
    res.text = "x";
    res.text_len = 1;
    res.token_ids = ids;
    res.n_token_ids = 1;
    assert_int_equal(pdb_openai_build_chunk(&m, &res, 1, NULL, NULL, &out, &n), PDB_OK);
    j = load(out + 6, n - 8);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), "x");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(c, "token_ids"), 0)), 4);
    json_decref(j);
    free(out);

    pdb_openai_error e;
    pdb_openai_set_error(&e, 500, NULL, NULL, "engine failed");
    assert_int_equal(pdb_openai_build_error_chunk(&e, &out, &n), PDB_OK);
    j = load(out + 6, n - 8);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "server_error");
    json_decref(j);
    free(out);
    assert_string_equal(PDB_OPENAI_SSE_DONE, "data: [DONE]\n\n");
    json_decref(extra);
}

static void test_utf8(void **state) {
    (void)state;
    assert_int_equal(pdb_openai_utf8_complete_prefix("abc", 3), 3);
    assert_int_equal(pdb_openai_utf8_complete_prefix("ab\xE2\x82", 4), 2);  /* € cut */
    assert_int_equal(pdb_openai_utf8_complete_prefix("ab\xE2\x82\xAC", 5), 5);
    assert_int_equal(pdb_openai_utf8_complete_prefix("\xF0\x9F\x98", 3), 0); /* emoji cut */
    assert_int_equal(pdb_openai_utf8_complete_prefix("a\xFF", 2), 2);        /* invalid: not held */
    assert_int_equal(pdb_openai_utf8_complete_prefix("a\x80", 2), 2);
    assert_int_equal(pdb_openai_utf8_complete_prefix("", 0), 0);
    json_t *j = pdb_openai_json_text("\xC0\xAFok\xE2\x82", 6);
    assert_string_equal(json_string_value(j), "\xEF\xBF\xBD\xEF\xBF\xBDok\xEF\xBF\xBD\xEF\xBF\xBD");
    json_decref(j);
    pdb_openai_error e;
    char big[600];
    memset(big, 'a', sizeof big);
    memcpy(big + 509, "\xE2\x82\xAC", 3);
    big[599] = 0;
    pdb_openai_set_error(&e, 400, "p", NULL, "%s", big); /* cut inside the € stays valid UTF-8 */
    char *s = pdb_openai_error_json(&e);
    assert_non_null(s);
    assert_null(strstr(s, "\\uFFFD"));
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_forms), cmocka_unit_test(test_chat_forms), cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_json_error_position), cmocka_unit_test(test_response_shapes), cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
