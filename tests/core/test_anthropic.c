/* test_anthropic: the Messages API conversion: system (string and blocks), content blocks (text,
 * tool_use, tool_result) mapped to the internal conversation in order, tools and tool_choice,
 * sampling fields and their ranges, every unknown or unsupported field refused with a 400
 * naming it; the message body, the tool_use input rule, the event framing and the error shape. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "pdb_anthropic.h"

static const pdb_openai_limits lim = {.max_context = 4096};

static void ok(const char *body, pdb_openai_request *r) {
    pdb_openai_error e;
    if (pdb_anthropic_parse_request(body, strlen(body), &lim, r, &e) != PDB_OK)
        fail_msg("expected OK for %s, got %d %s (param %s)", body, e.status, e.message, e.param);
}

static void bad(const char *body, const char *param) {
    pdb_openai_request r;
    pdb_openai_error e;
    if (pdb_anthropic_parse_request(body, strlen(body), &lim, &r, &e) == PDB_OK) fail_msg("expected 400 for %s", body);
    assert_int_equal(e.status, 400);
    if (strcmp(e.param, param)) fail_msg("%s: param '%s', expected '%s' (%s)", body, e.param, param, e.message);
    assert_non_null(strstr(e.message, param)); /* the Messages error has no param: the message names it */
    assert_null(r.messages);
    assert_null(r.model);
    char *j = pdb_anthropic_error_json(&e);
    json_t *root = json_loads(j, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(root, "type")), "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "error"), "type")), "invalid_request_error");
    json_decref(root);
    free(j);
}

#define HEAD "\"model\":\"m\",\"max_tokens\":8,"

static void test_conversion(void **state) {
    (void)state;
    pdb_openai_request r;
    ok("{" HEAD "\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":0.5,\"top_p\":0.9,"
       "\"top_k\":5,\"stop_sequences\":[\"END\"],\"stream\":true,\"metadata\":{\"user_id\":\"u\"}}", &r);
    assert_int_equal(r.kind, PDB_OPENAI_CHAT);
    assert_string_equal(r.model, "m");
    assert_int_equal(r.max_tokens, 8);
    assert_int_equal(r.n_messages, 2);
    assert_string_equal(r.messages[0].role, "system");
    assert_string_equal(r.messages[0].content, "Be brief.");
    assert_string_equal(r.messages[1].content, "hi");
    assert_true(r.temperature == 0.5 && r.top_p == 0.9 && r.top_k == 5 && r.stream);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "END");
    pdb_openai_request_free(&r);

    /* blocks: system blocks joined; the user's tool_results become tool messages in order, the
     * text after them a user message; the assistant's tool_use its calls (content null) */
    ok("{" HEAD "\"system\":[{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"text\",\"text\":\"B\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
       "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q1\"},{\"type\":\"text\",\"text\":\"q2\"}]},"
       "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\",\"n\":2}},"
       "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"now\",\"input\":{}}]},"
       "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"18 C\"}]},"
       "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":\"boom\",\"is_error\":true},{\"type\":\"text\",\"text\":\"thanks\"}]}],"
       "\"tools\":[{\"name\":\"get_weather\",\"description\":\"w\",\"input_schema\":{\"type\":\"object\"}},{\"name\":\"now\",\"input_schema\":{}}],"
       "\"tool_choice\":{\"type\":\"tool\",\"name\":\"now\",\"disable_parallel_tool_use\":true}}", &r);
    assert_int_equal(r.n_messages, 6);
    assert_string_equal(r.messages[0].content, "A\nB");
    assert_string_equal(r.messages[1].role, "user");
    assert_string_equal(r.messages[1].content, "q1\nq2");
    assert_string_equal(r.messages[2].role, "assistant");
    assert_true(r.messages[2].content_null);
    assert_int_equal(r.messages[2].n_tool_calls, 2);
    assert_string_equal(r.messages[2].tool_calls[0].id, "toolu_1");
    assert_string_equal(r.messages[2].tool_calls[0].arguments, "{\"city\": \"Paris\", \"n\": 2}");
    assert_string_equal(r.messages[2].tool_calls[1].arguments, "{}");
    assert_string_equal(r.messages[3].role, "tool");
    assert_string_equal(r.messages[3].tool_call_id, "toolu_1");
    assert_string_equal(r.messages[3].content, "18 C");
    assert_string_equal(r.messages[4].content, "Error: boom");
    assert_string_equal(r.messages[5].role, "user");
    assert_string_equal(r.messages[5].content, "thanks");
    assert_int_equal(r.tools.n_tools, 2);
    assert_string_equal(r.tools.tools[0].parameters, "{\"type\": \"object\"}");
    assert_int_equal(r.tools.choice, PDB_TOOL_CHOICE_FUNCTION);
    assert_string_equal(pdb_toolcall_forced_name(&r.tools), "now");
    assert_true(r.tools.single_call);
    pdb_openai_request_free(&r);

    ok("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"a\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"}}", &r);
    assert_string_equal(pdb_toolcall_forced_name(&r.tools), "a");
    pdb_openai_request_free(&r);
    /* any among two tools: the model chooses the name under the mask ("ab" + 9 + "{}" = 13 tokens at least) */
    ok("{\"model\":\"m\",\"max_tokens\":13,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"ab\","
       "\"input_schema\":{}},{\"name\":\"abc\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"}}", &r);
    assert_null(pdb_toolcall_forced_name(&r.tools));
    assert_true(pdb_toolcall_forced_any(&r.tools));
    pdb_openai_request_free(&r);
    ok("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"a\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"none\"}}", &r);
    assert_false(pdb_toolcall_active(&r.tools));
    pdb_openai_request_free(&r);
}

static void test_refusals(void **state) {
    (void)state;
    bad("{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "model");
    bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "max_tokens");
    bad("{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "max_tokens");
    bad("{\"model\":\"m\",\"max_tokens\":5000,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "max_tokens");
    bad("{" HEAD "\"messages\":[]}", "messages");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"thinking\":{\"type\":\"enabled\"}}", "thinking");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"n\":2}", "n");
    bad("{" HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"q\"}]}", "messages[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\",\"name\":\"x\"}]}", "messages[0].name");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}", "messages[0].content[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\",\"extra\":1}]}]}",
        "messages[0].content[0].extra");
    bad("{" HEAD "\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"i\",\"name\":\"n\",\"input\":[]}]}]}",
        "messages[0].content[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}", "messages[0].content[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"temperature\":1.5}", "temperature");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"top_p\":0}", "top_p");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"top_k\":-1}", "top_k");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop_sequences");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}]}",
        "tools[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"a\"}]}", "tools[0]");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"a\",\"input_schema\":{}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"}}", "tool_choice");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tool_choice\":{\"type\":\"sometimes\"}}", "tool_choice.type");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"metadata\":{\"tier\":1}}", "metadata.tier");
    bad("{\"model\":\"m\",\"max_tokens\":12,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"ab\","
        "\"input_schema\":{}},{\"name\":\"abc\",\"input_schema\":{}}],\"tool_choice\":{\"type\":\"any\"}}", "max_tokens");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"tools\":[{\"name\":\"a\",\"input_schema\":{}}],"
        "\"tool_choice\":{\"type\":\"tool\",\"name\":\"a\"},\"stop_sequences\":[\"x\"]}", "stop_sequences");
    bad("{" HEAD "\"system\":[{\"type\":\"image\"}],\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "system[0]");
    /* every block's unknown key names its path (issue 19 item 1) */
    bad("{" HEAD "\"system\":[{\"type\":\"text\",\"text\":\"s\",\"x\":1}],\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "system[0].x");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"i\","
        "\"name\":\"n\",\"input\":{},\"caller\":{}}]}]}", "messages[1].content[0].caller");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"i\",\"status\":\"ok\"}]}]}",
        "messages[0].content[0].status");
    bad("{" HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"i\",\"content\":[{\"type\":\"text\","
        "\"text\":\"r\",\"y\":2}]}]}]}", "messages[0].content[0].content[0].y");
}

static void test_building(void **state) {
    (void)state;
    json_t *in = pdb_anthropic_tool_input("{\"city\": \"Paris\"}", 17);
    assert_string_equal(json_string_value(json_object_get(in, "city")), "Paris");
    json_decref(in);
    in = pdb_anthropic_tool_input(" \n", 2);
    assert_int_equal(json_object_size(in), 0);
    json_decref(in);
    in = pdb_anthropic_tool_input("[1, 2]", 6); /* not an object: kept, wrapped */
    assert_string_equal(json_string_value(json_object_get(in, "pdbridge_unparsed_arguments")), "[1, 2]");
    json_decref(in);

    pdb_anthropic_block blocks[2] = {{0, "Hello", 5, NULL, NULL, NULL, 0}, {1, NULL, 0, "toolu_1", "get_weather", "{\"city\":\"Rome\"}", 15}};
    pdb_anthropic_usage u = {100, 7, 64};
    char *out;
    size_t n;
    assert_int_equal(pdb_anthropic_build_message("msg_1", "m", blocks, 2, "tool_use", NULL, &u, NULL, &out, &n), PDB_OK);
    json_t *j = json_loads(out, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    assert_true(json_is_null(json_object_get(j, "stop_sequence")));
    json_t *c = json_object_get(j, "content");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "text")), "Hello");
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(c, 1), "input"), "city")), "Rome");
    json_t *us = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(us, "input_tokens")), 36); /* prompt minus cache reads */
    assert_int_equal(json_integer_value(json_object_get(us, "cache_read_input_tokens")), 64);
    assert_int_equal(json_integer_value(json_object_get(us, "output_tokens")), 7);
    json_decref(j);
    free(out);

    pdb_anthropic_sse b = {0};
    pdb_anthropic_sse_message_start(&b, "msg_1", "m", &u);
    pdb_anthropic_sse_text_delta(&b, 0, "a\xff", 2);
    pdb_anthropic_sse_message_stop(&b, NULL);
    assert_false(b.oom);
    assert_true(!strncmp(b.p, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"", 72));
    assert_non_null(strstr(b.p, "\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
                                "\"delta\":{\"type\":\"text_delta\",\"text\":\"a\xEF\xBF\xBD\"}}\n\n"));
    assert_non_null(strstr(b.p, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    pdb_anthropic_sse_free(&b);

    pdb_openai_error e;
    pdb_openai_set_error(&e, 404, "model", "model_not_found", "no model x");
    char *ej = pdb_anthropic_error_json(&e);
    assert_string_equal(ej, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"no model x\"}}");
    free(ej);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversion),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_building),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
