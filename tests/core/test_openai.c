/* test_openai: OpenAI request parsing (every accepted form, every refused form with its status
 * and param; unknown fields refused by name), the field table against docs/api.md, response/chunk
 * JSON shapes (n choices, chat and legacy logprobs), SSE framing, UTF-8 repair and hold-back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
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
    BAD(C, "{\"prompt\":\"x\",\"n\":0}", 400, "n");
    BAD(C, "{\"prompt\":\"x\",\"n\":17}", 400, "n");
    BAD(C, "{\"prompt\":\"x\",\"n\":2,\"best_of\":3}", 400, "best_of");
    BAD(C, "{\"prompt\":\"x\",\"echo\":true,\"logprobs\":1}", 400, "echo");
    BAD(C, "{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs");
    BAD(C, "{\"prompt\":\"x\",\"logprobs\":true}", 400, "logprobs");
    BAD(C, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix");
    BAD(C, "{\"prompt\":\"x\",\"frequency_penalty\":2.5}", 400, "frequency_penalty");
    BAD(C, "{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", 400, "logit_bias");
    BAD(C, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", 400, "logit_bias");
    BAD(C, "{\"prompt\":\"x\",\"frobnicate\":1}", 400, "frobnicate");           /* unknown */
    BAD(C, "{\"prompt\":\"x\",\"frobnicate\":null}", 400, "frobnicate");        /* unknown, even null */
    BAD(C, "{\"prompt\":\"x\",\"top_logprobs\":2}", 400, "top_logprobs");       /* a chat field */
    BAD(C, "{\"prompt\":\"x\",\"stream_options\":{\"x\":true}}", 400, "stream_options.x");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400, "top_logprobs");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", 400, "top_logprobs");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", 400, "echo"); /* a completions field */
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}", 400, "functions"); /* deprecated form */
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"function_call\":\"none\"}", 400, "function_call");
    /* tools meet the other fields: JSON mode is refused while tools are active (n > 1 is served:
     * one composer per choice) */
    {
        pdb_openai_request q;
        parse_ok(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
                 &q);
        assert_true(q.n == 2 && pdb_toolcall_active(&q.tools));
        pdb_openai_request_free(&q);
    }
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"},"
           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 400, "response_format");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", 400, "tool_choice");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"parallel_tool_calls\":1}", 400, "parallel_tool_calls");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", 400,
        "response_format");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"store\":true}", 400, "store");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"service_tier\":\"flex\"}", 400, "service_tier");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"text\",\"audio\"]}", 400, "modalities");
    BAD(C, "{\"prompt\":\"x\\u0000y\"}", 400, NULL); /* NUL in a string */
    parse_bad(C, "{\"prompt\":\"\xff\xfe\"}", 13, 400, NULL);   /* invalid UTF-8 */
    parse_bad(C, "{\"prompt\":\"\xed\xa0\x80\"}", 14, 400, NULL); /* encoded surrogate */
    BAD(H, "{\"prompt\":\"x\"}", 400, "prompt"); /* a completions field */
    BAD(H, "{\"model\":\"x\"}", 400, "messages");
    BAD(H, "{\"messages\":[]}", 400, "messages");
    BAD(H, "{\"messages\":{}}", 400, "messages");
    BAD(H, "{\"messages\":[3]}", 400, "messages[0]");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[1].role");
    BAD(H, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":-5}", 400, "max_completion_tokens");
    /* message fields (issue 19 item 1): unknown keys, refused fields and fields of another role name their path */
#define U1 "{\"role\":\"user\",\"content\":\"x\""
    BAD(H, "{\"messages\":[" U1 ",\"name\":\"ann\"}]}", 400, "messages[0].name");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"system\",\"content\":\"s\",\"name\":\"x\"}]}", 400, "messages[1].name");
    BAD(H, "{\"messages\":[" U1 ",\"frobnicate\":null}]}", 400, "messages[0].frobnicate"); /* unknown, even null */
    BAD(H, "{\"messages\":[" U1 ",\"tool_calls\":[]}]}", 400, "messages[0].tool_calls");   /* an assistant's field */
    BAD(H, "{\"messages\":[" U1 ",\"tool_call_id\":\"c\"}]}", 400, "messages[0].tool_call_id");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"assistant\",\"content\":\"a\",\"refusal\":\"no\"}]}", 400, "messages[1].refusal");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"assistant\",\"content\":null,\"audio\":{\"id\":\"a\"}}]}", 400, "messages[1].audio");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}", 400,
        "messages[1].function_call");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"tool\",\"content\":\"o\",\"name\":\"f\"}]}", 400, "messages[1].name");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{}}]}]}", 400,
        "messages[0].content[0].cache_control");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
           "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"},\"index\":0}]}]}", 400, "messages[1].tool_calls[0].index");
    BAD(H, "{\"messages\":[" U1 "},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
           "\"function\":{\"name\":\"f\",\"arguments\":\"{}\",\"strict\":true}}]}]}", 400, "messages[1].tool_calls[0].function.strict");
    {   /* null is absent: an answer's own message (refusal null) goes back as it is */
        pdb_openai_request q;
        parse_ok(H, "{\"messages\":[" U1 ",\"name\":null},{\"role\":\"assistant\",\"content\":\"a\",\"refusal\":null,\"audio\":null,"
                    "\"function_call\":null,\"tool_calls\":null},{\"role\":\"user\",\"content\":\"b\",\"tool_call_id\":null}]}", &q);
        assert_int_equal(q.n_messages, 3);
        pdb_openai_request_free(&q);
    }
#undef U1

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

static json_t *load(const char *s, size_t n);

static void test_new_fields(void **state) {
    (void)state;
    pdb_openai_request r;
    parse_ok(PDB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"n\":3,\"best_of\":3,\"echo\":true,\"frequency_penalty\":0.5,"
                                    "\"presence_penalty\":-1,\"logit_bias\":{\"7\":-100,\"9\":2.5},\"user\":\"u1\"}", &r);
    assert_int_equal(r.n, 3);
    assert_true(r.echo && !r.logprobs);
    assert_true(r.frequency_penalty == 0.5 && r.presence_penalty == -1);
    assert_int_equal(r.n_bias, 2);
    assert_int_equal(r.bias_ids[0], 7);
    assert_true(r.bias_vals[0] == -100.0f && r.bias_vals[1] == 2.5f);
    assert_string_equal(r.user, "u1");
    pdb_openai_request_free(&r);
    parse_ok(PDB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":5}", &r);
    assert_true(r.logprobs && r.top_logprobs == 5 && r.n == 1);
    pdb_openai_request_free(&r);
    parse_ok(PDB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":0}", &r);
    assert_true(!r.logprobs && r.top_logprobs == 0);
    pdb_openai_request_free(&r);
    parse_ok(PDB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":20,"
                              "\"response_format\":{\"type\":\"json_object\"},\"store\":false,\"service_tier\":\"auto\","
                              "\"modalities\":[\"text\"],\"metadata\":{\"a\":\"b\"},\"prompt_cache_key\":\"k\","
                              "\"safety_identifier\":\"s\",\"tools\":null}", &r);
    assert_true(r.logprobs && r.top_logprobs == 20 && r.json_object);
    assert_string_equal(r.user, "s");
    pdb_openai_request_free(&r);
    /* the tool rows: tools, parallel_tool_calls and a forced choice (in any key order), with logprobs */
    parse_ok(PDB_OPENAI_CHAT, "{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},\"parallel_tool_calls\":false,"
                              "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                              "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}", &r);
    assert_int_equal(r.tools.n_tools, 2);
    assert_true(r.tools.single_call && r.logprobs);
    assert_string_equal(pdb_toolcall_forced_name(&r.tools), "g");
    pdb_openai_request_free(&r);
    /* tool_choice none: the tools are not active, so n and JSON mode are served */
    parse_ok(PDB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2,\"tool_choice\":\"none\","
                              "\"response_format\":{\"type\":\"json_object\"},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r);
    assert_true(r.n == 2 && r.json_object && !pdb_toolcall_active(&r.tools));
    pdb_openai_request_free(&r);
}

/* docs/api.md's field table lists exactly the parser's fields, each with the parser's rule and
 * endpoints (rows "| `name` | endpoints | rule | ..."): the doc cannot drift from the code. */
static void test_field_table_matches_doc(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/api.md", getenv("PDB_SRC") ? getenv("PDB_SRC") : ".");
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (run from the source tree or set PDB_SRC)", path);
    char line[2048];
    int in_table = 0, rows = 0;
    size_t n_fields = 0;
    while (pdb_openai_field_at(n_fields)) n_fields++;
    int *seen = calloc(n_fields, sizeof *seen);
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "<!-- fields:begin -->")) { in_table = 1; continue; }
        if (strstr(line, "<!-- fields:end -->")) break;
        if (!in_table || strncmp(line, "| `", 3)) continue;
        char name[64], eps[64], rule[32];
        if (sscanf(line, "| `%63[^`]` | %63[^|]| %31[^ |]", name, eps, rule) != 3) fail_msg("docs/api.md row: %s", line);
        size_t i = 0;
        while (i < n_fields && strcmp(pdb_openai_field_at(i)->name, name)) i++;
        if (i == n_fields) fail_msg("docs/api.md lists '%s', which the parser does not know", name);
        const pdb_openai_field_info *fi = pdb_openai_field_at(i);
        int want = (strstr(eps, "completions") && strstr(eps, "chat")) ? 3 : strstr(eps, "chat") ? 2 : 1;
        if (fi->endpoints != want) fail_msg("'%s': docs/api.md says endpoints '%s', the parser %d", name, eps, fi->endpoints);
        if (strcmp(fi->rule, rule)) fail_msg("'%s': docs/api.md says %s, the parser %s", name, rule, fi->rule);
        seen[i]++;
        rows++;
    }
    fclose(f);
    for (size_t i = 0; i < n_fields; i++)
        if (seen[i] != 1) fail_msg("'%s' appears %d times in docs/api.md's field table", pdb_openai_field_at(i)->name, seen[i]);
    assert_int_equal(rows, (int)n_fields);
    free(seen);
}

/* docs/api.md's message-field table ("| `name` | roles | rule | ...") lists exactly the parser's
 * message fields, with its roles and rules. */
static void test_message_table_matches_doc(void **state) {
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/api.md", getenv("PDB_SRC") ? getenv("PDB_SRC") : ".");
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s (run from the source tree or set PDB_SRC)", path);
    char line[4096];
    int in_table = 0, rows = 0;
    size_t n_fields = 0;
    while (pdb_openai_message_field_at(n_fields)) n_fields++;
    assert_true(n_fields >= 8);
    int *seen = calloc(n_fields, sizeof *seen);
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "<!-- message-fields:begin -->")) { in_table = 1; continue; }
        if (strstr(line, "<!-- message-fields:end -->")) break;
        if (!in_table || strncmp(line, "| `", 3)) continue;
        char name[64], roles[128], rule[32];
        if (sscanf(line, "| `%63[^`]` | %127[^|]| %31[^ |]", name, roles, rule) != 3) fail_msg("docs/api.md message row: %s", line);
        size_t i = 0;
        while (i < n_fields && strcmp(pdb_openai_message_field_at(i)->name, name)) i++;
        if (i == n_fields) fail_msg("docs/api.md lists the message field '%s', which the parser does not know", name);
        const pdb_openai_message_field_info *fi = pdb_openai_message_field_at(i);
        int want = (strstr(roles, "system") ? PDB_OPENAI_ROLE_SYSTEM : 0) | (strstr(roles, "user") ? PDB_OPENAI_ROLE_USER : 0) |
                   (strstr(roles, "assistant") ? PDB_OPENAI_ROLE_ASSISTANT : 0) | (strstr(roles, "tool") ? PDB_OPENAI_ROLE_TOOL : 0);
        if (fi->roles != want) fail_msg("message field '%s': docs/api.md says roles '%s', the parser %d", name, roles, fi->roles);
        if (strcmp(fi->rule, rule)) fail_msg("message field '%s': docs/api.md says %s, the parser %s", name, rule, fi->rule);
        seen[i]++;
        rows++;
    }
    fclose(f);
    for (size_t i = 0; i < n_fields; i++)
        if (seen[i] != 1) fail_msg("'%s' appears %d times in docs/api.md's message table", pdb_openai_message_field_at(i)->name, seen[i]);
    assert_int_equal(rows, (int)n_fields);
    free(seen);
}

static const char *fake_bytes(void *user, int32_t id, size_t *len) {
    (void)user;
    static const char *t[] = {"a", "bc", "\xE2\x82", "\xAC"};
    if (id < 0 || id > 3) return NULL;
    *len = strlen(t[id]);
    return t[id];
}

static void test_logprobs_shapes(void **state) {
    (void)state;
    pdb_openai_meta m = {.kind = PDB_OPENAI_CHAT, .id = "c", .created = 1, .model = "m", .token_bytes = fake_bytes};
    pdb_openai_logprob lp[2] = {{.id = 1, .logprob = -0.25, .n_top = 2, .top = {{1, -0.25}, {0, -1.5}}},
                                {.id = 2, .logprob = -3.0, .n_top = 1, .top = {{3, -INFINITY}}}};
    pdb_openai_result res[2] = {{.index = 0, .text = "bc", .text_len = 2, .finish_reason = "length", .logprobs = lp, .n_logprobs = 2},
                                {.index = 1, .text = "a", .text_len = 1, .finish_reason = "stop"}};
    char *out;
    size_t n;
    assert_int_equal(pdb_openai_build_response(&m, res, 2, NULL, NULL, &out, &n), PDB_OK);
    json_t *j = load(out, n), *ch = json_object_get(j, "choices");
    assert_int_equal(json_array_size(ch), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ch, 1), "index")), 1);
    assert_true(json_is_null(json_object_get(json_array_get(ch, 1), "logprobs")));
    json_t *content = json_object_get(json_object_get(json_array_get(ch, 0), "logprobs"), "content");
    assert_int_equal(json_array_size(content), 2);
    json_t *e0 = json_array_get(content, 0);
    assert_string_equal(json_string_value(json_object_get(e0, "token")), "bc");
    assert_true(json_real_value(json_object_get(e0, "logprob")) == -0.25);
    assert_int_equal(json_array_size(json_object_get(e0, "bytes")), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(e0, "bytes"), 0)), 'b');
    json_t *top = json_object_get(e0, "top_logprobs");
    assert_int_equal(json_array_size(top), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(top, 1), "token")), "a");
    json_t *e1 = json_array_get(content, 1); /* half a character: the text is repaired, the bytes are exact */
    assert_string_equal(json_string_value(json_object_get(e1, "token")), "\xEF\xBF\xBD\xEF\xBF\xBD");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(e1, "bytes"), 1)), 0x82);
    assert_true(json_real_value(json_object_get(json_array_get(json_object_get(e1, "top_logprobs"), 0), "logprob")) == -9999.0);
    json_decref(j);
    free(out);

    m.kind = PDB_OPENAI_COMPLETION; /* legacy: tokens, token_logprobs, top_logprobs dicts, text_offset */
    res[0].text_offset = 5;
    assert_int_equal(pdb_openai_build_chunk(&m, &res[0], 1, NULL, NULL, &out, &n), PDB_OK);
    j = load(out + 6, n - 8);
    json_t *l = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    assert_string_equal(json_string_value(json_array_get(json_object_get(l, "tokens"), 0)), "bc");
    assert_true(json_real_value(json_array_get(json_object_get(l, "token_logprobs"), 1)) == -3.0);
    assert_true(json_real_value(json_object_get(json_array_get(json_object_get(l, "top_logprobs"), 0), "a")) == -1.5);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 0)), 5);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 1)), 7);
    json_decref(j);
    free(out);
    m.token_bytes = NULL; /* token-id mode names tokens by id */
    assert_int_equal(pdb_openai_build_response(&m, res, 1, NULL, NULL, &out, &n), PDB_OK);
    assert_non_null(strstr(out, "\"token_id:1\""));
    free(out);
}

static json_t *load(const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, 0, &je);
    if (!j) fail_msg("bad JSON (%s): %.*s", je.text, (int)n, s);
    return j;
}

static void test_response_shapes(void **state) {
    (void)state;
    pdb_openai_meta m = {.kind = PDB_OPENAI_COMPLETION, .id = "cmpl-1", .created = 1700000000, .model = "tiny"};
    int32_t ids[3] = {4, 5, 6};
    pdb_openai_result res = {.text = "ab\xff", .text_len = 3, .finish_reason = "length", .token_ids = ids, .n_token_ids = 3};
    pdb_openai_usage u = {10, 3, 8};
    json_t *extra = json_pack("{s:{s:s}}", "pd_bridge", "verdict", "skipped short");
    char *out;
    size_t n;
    assert_int_equal(pdb_openai_build_response(&m, &res, 1, &u, extra, &out, &n), PDB_OK);
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
    assert_int_equal(pdb_openai_build_response(&m, &res, 1, &u, NULL, &out, &n), PDB_OK);
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
        cmocka_unit_test(test_new_fields), cmocka_unit_test(test_field_table_matches_doc), cmocka_unit_test(test_message_table_matches_doc), cmocka_unit_test(test_logprobs_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
