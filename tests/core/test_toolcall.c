/* test_toolcall: the tool fields of OpenAI chat requests (tools, tool_choice, parallel_tool_calls,
 * an assistant's tool_calls, a tool message's tool_call_id) parsed with every refusal naming its
 * field, the forced-call rules, and tool_calls built into bodies and stream deltas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "pdb_openai.h"
#include "pdb_toolcall.h"

static const pdb_openai_limits lim = {.max_context = 4096};

#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\"," \
              "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}," \
              "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void ok(const char *body, pdb_openai_request *r) {
    pdb_openai_error e;
    if (pdb_openai_parse_request(PDB_OPENAI_CHAT, body, strlen(body), &lim, r, &e) != PDB_OK)
        fail_msg("expected OK for %s, got %d %s (param %s)", body, e.status, e.message, e.param);
}

static void bad(const char *body, const char *param, const char *code) {
    pdb_openai_request r;
    pdb_openai_error e;
    if (pdb_openai_parse_request(PDB_OPENAI_CHAT, body, strlen(body), &lim, &r, &e) == PDB_OK) fail_msg("expected 400 for %s", body);
    assert_int_equal(e.status, 400);
    if (strcmp(e.param, param)) fail_msg("%s: param '%s', expected '%s' (%s)", body, e.param, param, e.message);
    if (code) assert_string_equal(e.code, code);
    assert_null(r.tools.tools);
    assert_null(r.messages);
}

static void test_tools_parse(void **state) {
    (void)state;
    pdb_openai_request r;
    ok("{" MSGS "," TOOLS "}", &r);
    assert_int_equal(r.tools.n_tools, 2);
    assert_string_equal(r.tools.tools[0].name, "get_weather");
    assert_string_equal(r.tools.tools[0].description, "d");
    /* re-serialized once, keys in the client's order, jansson's default separators */
    assert_string_equal(r.tools.tools[0].parameters, "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}");
    assert_null(r.tools.tools[1].description);
    assert_null(r.tools.tools[1].parameters);
    assert_int_equal(r.tools.choice, PDB_TOOL_CHOICE_AUTO);
    assert_true(pdb_toolcall_active(&r.tools));
    assert_null(pdb_toolcall_forced_name(&r.tools));
    pdb_openai_request_free(&r);

    ok("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}},\"parallel_tool_calls\":false}", &r);
    assert_int_equal(r.tools.choice, PDB_TOOL_CHOICE_FUNCTION);
    assert_string_equal(pdb_toolcall_forced_name(&r.tools), "now");
    assert_true(r.tools.single_call);
    pdb_openai_request_free(&r);

    ok("{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", &r);
    assert_false(pdb_toolcall_active(&r.tools)); /* none: not rendered, not parsed */
    pdb_openai_request_free(&r);

    ok("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"only\"}}],\"tool_choice\":\"required\"}", &r);
    assert_string_equal(pdb_toolcall_forced_name(&r.tools), "only");
    pdb_openai_request_free(&r);

    ok("{" MSGS ",\"tool_choice\":\"auto\"}", &r); /* auto without tools: nothing to do */
    assert_false(pdb_toolcall_active(&r.tools));
    pdb_openai_request_free(&r);

    /* required among two tools: the model chooses the name (masked), no name is written for it */
    ok("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"max_tokens\":14}", &r);
    assert_null(pdb_toolcall_forced_name(&r.tools));
    assert_true(pdb_toolcall_forced_any(&r.tools) && pdb_toolcall_forced(&r.tools));
    pdb_openai_request_free(&r);
    /* a forced call needs room for the shortest call the mask can close ("now" + 9 + "{}" = 14;
     * a named one "{}" = 2), and no stop strings */
    bad("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"max_tokens\":13}", "max_tokens", "invalid_value");
    bad("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"max_completion_tokens\":13}", "max_completion_tokens", "invalid_value");
    bad("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}},\"max_tokens\":1}", "max_tokens",
        "invalid_value");
    ok("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}},\"max_tokens\":2}", &r);
    pdb_openai_request_free(&r);
    bad("{" MSGS "," TOOLS ",\"tool_choice\":\"required\",\"stop\":[\"}\"]}", "stop", "unsupported_value");
    ok("{" MSGS "," TOOLS ",\"tool_choice\":\"auto\",\"stop\":[\"}\"],\"max_tokens\":1}", &r); /* auto: not forced */
    pdb_openai_request_free(&r);
    bad("{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "invalid_value");
    bad("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}", "tool_choice", "invalid_value");
    bad("{" MSGS "," TOOLS ",\"tool_choice\":\"always\"}", "tool_choice", "invalid_value");
    bad("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"},\"x\":1}}", "tool_choice.x",
        "unknown_parameter");
    bad("{" MSGS ",\"tools\":{}}", "tools", "invalid_type");
    bad("{" MSGS ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0]", "invalid_value");
    bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"has space\"}}]}", "tools[0].function.name", "invalid_value");
    bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
        "tools[1].function.name", "invalid_value");
    bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]}", "tools[0].function.parameters",
        "invalid_type");
    bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":true}}]}", "tools[0].function",
        "unsupported_value");
    bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"examples\":[]}}]}", "tools[0].function.examples",
        "unknown_parameter");
    bad("{" MSGS ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "invalid_type");
}

static void test_tool_messages(void **state) {
    (void)state;
    pdb_openai_request r;
    ok("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
       "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
       "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
       "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"18 C\"},"
       "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]}]}", &r);
    assert_int_equal(r.n_messages, 4);
    assert_true(r.messages[1].content_null);
    assert_int_equal(r.messages[1].n_tool_calls, 1);
    assert_string_equal(r.messages[1].tool_calls[0].id, "call_1");
    assert_string_equal(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
    assert_string_equal(r.messages[2].role, "tool");
    assert_string_equal(r.messages[2].tool_call_id, "call_1");
    assert_string_equal(r.messages[2].content, "18 C");
    assert_true(r.messages[3].content_null); /* "" beside calls counts as no content */
    assert_string_equal(r.messages[3].tool_calls[0].id, "");
    assert_false(r.messages[0].content_null);
    pdb_openai_request_free(&r);
    bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":{}}]}", "messages[0].tool_calls", "invalid_type");
    bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
        "messages[0].tool_calls[0]", "invalid_value");
    bad("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"code\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}]}",
        "messages[0].tool_calls[0]", "invalid_value");
    bad("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}]}", "messages[0]", "invalid_type");
}

static void test_tool_calls_out(void **state) {
    (void)state;
    pdb_openai_meta m = {.kind = PDB_OPENAI_CHAT, .id = "chatcmpl-1", .created = 1700000000, .model = "tiny"};
    pdb_toolcall_out calls[2] = {{0, "call_a", "get_weather", "{\"city\": \"\xff\"}", 13}, {1, "call_b", "now", "", 0}};
    pdb_openai_result res = {.text = "", .finish_reason = "tool_calls", .tool_calls = calls, .n_tool_calls = 2};
    pdb_openai_usage u = {10, 3, 0};
    char *out;
    size_t n;
    assert_int_equal(pdb_openai_build_response(&m, &res, 1, &u, NULL, &out, &n), PDB_OK);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    json_t *tc = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(tc), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 0), "id")), "call_a");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 0), "type")), "function");
    json_t *fn = json_object_get(json_array_get(tc, 0), "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(fn, "arguments")), "{\"city\": \"\xEF\xBF\xBD\"}"); /* repaired */
    assert_null(json_object_get(json_array_get(tc, 0), "index"));
    json_decref(j);
    free(out);
    /* a delta continuing a call: index and arguments only */
    pdb_toolcall_out d = {1, NULL, NULL, "{\"x", 3};
    pdb_openai_result dr = {.tool_calls = &d, .n_tool_calls = 1};
    assert_int_equal(pdb_openai_build_chunk(&m, &dr, 0, NULL, NULL, &out, &n), PDB_OK);
    j = json_loads(out + 6, 0, NULL);
    json_t *delta = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    json_t *e = json_array_get(json_object_get(delta, "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(e, "index")), 1);
    assert_null(json_object_get(e, "id"));
    assert_null(json_object_get(json_object_get(e, "function"), "name"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "function"), "arguments")), "{\"x");
    assert_null(json_object_get(delta, "content"));
    json_decref(j);
    free(out);
    /* a choice carries its calls and its tokens' log-probabilities together (token-id mode names) */
    pdb_openai_logprob lp[2] = {{.id = 7, .logprob = -0.5, .n_top = 1, .top = {{7, -0.5}}}, {.id = 9, .logprob = -1.25}};
    pdb_openai_result both = {.text = "hi", .text_len = 2, .finish_reason = "tool_calls", .tool_calls = calls, .n_tool_calls = 1,
                              .logprobs = lp, .n_logprobs = 2};
    assert_int_equal(pdb_openai_build_response(&m, &both, 1, &u, NULL, &out, &n), PDB_OK);
    j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    msg = json_object_get(c0, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "hi");
    assert_int_equal(json_array_size(json_object_get(msg, "tool_calls")), 1);
    json_t *content = json_object_get(json_object_get(c0, "logprobs"), "content");
    assert_int_equal(json_array_size(content), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(content, 0), "token")), "token_id:7");
    assert_true(json_real_value(json_object_get(json_array_get(content, 1), "logprob")) == -1.25);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    json_decref(j);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_parse),
        cmocka_unit_test(test_tool_messages),
        cmocka_unit_test(test_tool_calls_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
