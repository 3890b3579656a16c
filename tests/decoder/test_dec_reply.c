/* test_dec_reply: the answer composer. Invariants checked: generated text with DeepSeek tool-call
 * markers becomes content + tool_calls (OpenAI) or text + tool_use blocks (Anthropic); the stream
 * is the same answer cut into events (tool_call deltas assemble to the body's call; the Messages
 * events come in their order with matching indices); finish reasons: tool_calls / tool_use only
 * for a call not cut by max_tokens (the forced-call bound counts as made), length / max_tokens,
 * stop_sequence with the string, end_turn; a calls block's end (or the first call when parallel
 * calls are off) says "stop generating"; a choice of several carries its index, leaves usage and
 * [DONE] to the last choice, and can be kept for one body of all (pdb_dec_reply_result). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "pdb_dec_reply.h"
#include "pdb_tools.h"

#define CALL(name, args) PDB_TOOLS_CALL_BEGIN "function" PDB_TOOLS_SEP name "\n```json\n" args "\n```" PDB_TOOLS_CALL_END

static pdb_dec_reply *mk(pdb_dec_reply_api api, int stream, int tools, const char *forced, int single) {
    pdb_dec_reply_opts o = {.api = api, .stream = stream, .meta = {PDB_OPENAI_CHAT, "chatcmpl-abc", 1700000000, "tiny"},
                            .parse_tools = tools, .forced_name = forced, .single_call = single, .include_usage = 1};
    pdb_dec_reply *r = NULL;
    assert_int_equal(pdb_dec_reply_new(&o, &r), PDB_OK);
    return r;
}

/* Feed s in pieces of `step` bytes; returns the last feed's value. */
static int feed(pdb_dec_reply *r, const char *s, size_t step) {
    pdb_openai_usage u = {50, 1, 32};
    int rc = 0;
    for (size_t i = 0, n = strlen(s); i < n && rc == 0; i += step) rc = pdb_dec_reply_feed(r, s + i, i + step <= n ? step : n - i, NULL, NULL, 0, &u);
    return rc;
}

static json_t *finish_body(pdb_dec_reply *r, int length, int bound, const char *stop) {
    pdb_dec_reply_end e = {.length = length, .bound = bound, .stop_sequence = stop, .usage = {50, 9, 32}};
    assert_int_equal(pdb_dec_reply_finish(r, &e), PDB_OK);
    size_t n = 0;
    char *b = pdb_dec_reply_take(r, &n);
    assert_non_null(b);
    json_t *j = json_loadb(b, n, 0, NULL);
    free(b);
    return j;
}

/* The stream's events: every "data: " payload parsed (OpenAI ends with [DONE], counted in *done). */
static json_t *finish_stream(pdb_dec_reply *r, int length, int bound, int *done) {
    pdb_dec_reply_end e = {.length = length, .bound = bound, .usage = {50, 9, 32}};
    assert_int_equal(pdb_dec_reply_finish(r, &e), PDB_OK);
    size_t n = 0;
    char *b = pdb_dec_reply_take(r, &n);
    assert_non_null(b);
    json_t *a = json_array();
    *done = 0;
    for (char *p = b; (p = strstr(p, "data: ")); p += 6) {
        char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (!strncmp(p + 6, "[DONE]", 6)) { (*done)++; continue; }
        json_t *j = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        assert_non_null(j);
        json_array_append_new(a, j);
    }
    free(b);
    return a;
}

static void test_openai_body(void **state) {
    (void)state;
    pdb_dec_reply *r = mk(PDB_DEC_REPLY_OPENAI, 0, 1, NULL, 0);
    assert_int_equal(feed(r, "Sure." PDB_TOOLS_CALLS_BEGIN CALL("get_weather", "{\"city\": \"Paris\"}") "\n"
                             CALL("now", "{}") PDB_TOOLS_CALLS_END, 3), 1); /* the block ended: stop */
    json_t *j = finish_body(r, 0, 0, NULL);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_t *msg = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Sure.");
    json_t *tc = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(tc), 2);
    json_t *f0 = json_object_get(json_array_get(tc, 0), "function");
    assert_string_equal(json_string_value(json_object_get(f0, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(f0, "arguments")), "{\"city\": \"Paris\"}");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 0), "id")), "call_abc_0");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tc, 1), "id")), "call_abc_1");
    assert_string_equal(pdb_dec_reply_reason(r), "tool_calls");
    json_decref(j);
    pdb_dec_reply_free(r);

    /* no call: plain content; a stop string is "stop" */
    r = mk(PDB_DEC_REPLY_OPENAI, 0, 1, NULL, 0);
    assert_int_equal(feed(r, "just text <| not a marker", 4), 0);
    j = finish_body(r, 0, 0, "END");
    ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "just text <| not a marker");
    assert_null(json_object_get(json_object_get(ch, "message"), "tool_calls"));
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    json_decref(j);
    pdb_dec_reply_free(r);

    /* parallel calls off: the first call ends the answer */
    r = mk(PDB_DEC_REPLY_OPENAI, 0, 1, NULL, 1);
    assert_int_equal(feed(r, PDB_TOOLS_CALLS_BEGIN CALL("a", "{}") "\n" CALL("b", "{}"), 1), 1);
    j = finish_body(r, 0, 0, NULL);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_array_size(json_object_get(json_object_get(ch, "message"), "tool_calls")), 1);
    json_decref(j);
    pdb_dec_reply_free(r);

    /* a forced call cut by max_tokens is "length" (the call is still reported) */
    r = mk(PDB_DEC_REPLY_OPENAI, 0, 1, "f", 0);
    assert_int_equal(feed(r, "{\"x\": 1", 2), 0);
    j = finish_body(r, 1, 0, NULL);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_t *f = json_object_get(json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0), "function");
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), "{\"x\": 1");
    json_decref(j);
    pdb_dec_reply_free(r);
}

static void test_openai_stream(void **state) {
    (void)state;
    pdb_dec_reply *r = mk(PDB_DEC_REPLY_OPENAI, 1, 1, "get_weather", 0);
    assert_int_equal(feed(r, "{\"city\": ", 1), 0);
    assert_int_equal(feed(r, "\"Rome\"}\n``", 3), 0);
    int done = 0;
    json_t *ev = finish_stream(r, 1, 1, &done); /* the server's bound closed the call */
    assert_int_equal(done, 1);
    size_t i;
    json_t *c;
    char args[256] = "";
    const char *name = NULL, *finish = NULL;
    json_array_foreach(ev, i, c) {
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0), *d = json_object_get(ch, "delta");
        if (i == 0) {
            assert_string_equal(json_string_value(json_object_get(d, "role")), "assistant");
            assert_null(json_object_get(c, "usage")); /* usage only on every chunk when asked */
        }
        json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
        if (tc) {
            assert_int_equal(json_integer_value(json_object_get(tc, "index")), 0);
            json_t *fn = json_object_get(tc, "function");
            if (json_object_get(fn, "name")) name = json_string_value(json_object_get(fn, "name"));
            strcat(args, json_string_value(json_object_get(fn, "arguments")));
        }
        if (json_is_string(json_object_get(ch, "finish_reason"))) finish = json_string_value(json_object_get(ch, "finish_reason"));
    }
    assert_string_equal(name, "get_weather");
    assert_string_equal(args, "{\"city\": \"Rome\"}"); /* the dangling fence start is not arguments */
    assert_string_equal(finish, "tool_calls");
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(last, "usage"), "completion_tokens")), 9);
    json_decref(ev);
    pdb_dec_reply_free(r);
}

static void test_anthropic(void **state) {
    (void)state;
    pdb_dec_reply *r = mk(PDB_DEC_REPLY_ANTHROPIC, 1, 1, NULL, 0);
    assert_int_equal(feed(r, "Let me look." PDB_TOOLS_CALLS_BEGIN CALL("get_weather", "{\"city\": \"Oslo\"}") PDB_TOOLS_CALLS_END, 2), 1);
    int done = 0;
    json_t *ev = finish_stream(r, 0, 0, &done);
    assert_int_equal(done, 0);
    const char *want[] = {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
                          "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"};
    /* collapse repeated deltas, then compare the order */
    size_t k = 0, i;
    json_t *e;
    char text[128] = "";
    json_array_foreach(ev, i, e) {
        const char *t = json_string_value(json_object_get(e, "type"));
        if (i && !strcmp(t, "content_block_delta") && !strcmp(json_string_value(json_object_get(json_array_get(ev, i - 1), "type")), t)) {
        } else {
            assert_true(k < 9);
            assert_string_equal(t, want[k++]);
        }
        json_t *d = json_object_get(e, "delta");
        if (!strcmp(t, "content_block_delta") && json_object_get(d, "text")) {
            assert_int_equal(json_integer_value(json_object_get(e, "index")), 0);
            strcat(text, json_string_value(json_object_get(d, "text")));
        }
        if (!strcmp(t, "content_block_start") && k == 5) {
            json_t *cb = json_object_get(e, "content_block");
            assert_int_equal(json_integer_value(json_object_get(e, "index")), 1);
            assert_string_equal(json_string_value(json_object_get(cb, "type")), "tool_use");
            assert_string_equal(json_string_value(json_object_get(cb, "name")), "get_weather");
            assert_string_equal(json_string_value(json_object_get(cb, "id")), "toolu_abc_0");
        }
        if (!strcmp(t, "content_block_delta") && json_object_get(d, "partial_json"))
            assert_string_equal(json_string_value(json_object_get(d, "partial_json")), "{\"city\":\"Oslo\"}");
        if (!strcmp(t, "message_start"))
            assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(e, "message"), "usage"),
                                                                "cache_read_input_tokens")), 32);
        if (!strcmp(t, "message_delta"))
            assert_string_equal(json_string_value(json_object_get(json_object_get(e, "delta"), "stop_reason")), "tool_use");
    }
    assert_int_equal(k, 9);
    assert_string_equal(text, "Let me look.");
    json_decref(ev);
    pdb_dec_reply_free(r);

    /* non-stream, no tools: end_turn, max_tokens, stop_sequence with its string */
    const struct { int length; const char *stop, *reason; } cases[] = {{0, NULL, "end_turn"}, {1, NULL, "max_tokens"}, {0, "END", "stop_sequence"}};
    for (size_t c = 0; c < 3; c++) {
        r = mk(PDB_DEC_REPLY_ANTHROPIC, 0, 0, NULL, 0);
        assert_int_equal(feed(r, "hello " PDB_TOOLS_CALLS_BEGIN, 5), 0); /* tools off: markers are text */
        json_t *j = finish_body(r, cases[c].length, 0, cases[c].stop);
        assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), cases[c].reason);
        json_t *ss = json_object_get(j, "stop_sequence");
        if (cases[c].stop) assert_string_equal(json_string_value(ss), "END");
        else assert_true(json_is_null(ss));
        json_t *b = json_array_get(json_object_get(j, "content"), 0);
        assert_string_equal(json_string_value(json_object_get(b, "text")), "hello " PDB_TOOLS_CALLS_BEGIN);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "input_tokens")), 18);
        json_decref(j);
        pdb_dec_reply_free(r);
    }
    /* a stream with no text at all still opens and closes the message */
    r = mk(PDB_DEC_REPLY_ANTHROPIC, 1, 0, NULL, 0);
    ev = finish_stream(r, 1, 0, &done);
    assert_int_equal(json_array_size(ev), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "type")), "message_start");
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 2), "type")), "message_stop");
    json_decref(ev);
    pdb_dec_reply_free(r);
}

/* n > 1: one composer per choice. A choice's stream carries its index and, when other choices
 * still run, ends with its finish but without usage or [DONE]; a choice kept for a body of
 * several (no_body) gives its result (content, calls, reason) and no bytes. */
static void test_choice_of_several(void **state) {
    (void)state;
    pdb_dec_reply_opts o = {.api = PDB_DEC_REPLY_OPENAI, .stream = 1, .meta = {PDB_OPENAI_CHAT, "chatcmpl-abc", 1700000000, "tiny"},
                            .parse_tools = 1, .include_usage = 1, .index = 1};
    pdb_dec_reply *r = NULL;
    assert_int_equal(pdb_dec_reply_new(&o, &r), PDB_OK);
    assert_int_equal(feed(r, "Hi" PDB_TOOLS_CALLS_BEGIN CALL("f", "{\"a\": 1}") PDB_TOOLS_CALLS_END, 3), 1);
    pdb_dec_reply_end e = {.usage = {50, 9, 32}, .not_last = 1};
    assert_int_equal(pdb_dec_reply_finish(r, &e), PDB_OK);
    size_t n = 0;
    char *b = pdb_dec_reply_take(r, &n);
    assert_non_null(b);
    assert_null(strstr(b, "[DONE]"));
    assert_null(strstr(b, "\"usage\""));
    assert_non_null(strstr(b, "\"finish_reason\":\"tool_calls\""));
    for (char *p = b; (p = strstr(p, "\"index\":")); p += 8) /* every choice index is 1 (call indices are 0) */
        assert_true(p[8] == '1' || p[8] == '0');
    assert_non_null(strstr(b, "\"choices\":[{\"index\":1"));
    assert_null(strstr(b, "\"choices\":[{\"index\":0"));
    free(b);
    pdb_dec_reply_free(r);

    o.stream = 0;
    o.index = 3;
    assert_int_equal(pdb_dec_reply_new(&o, &r), PDB_OK);
    assert_int_equal(feed(r, "Hi" PDB_TOOLS_CALLS_BEGIN CALL("f", "{\"a\": 1}") PDB_TOOLS_CALLS_END, 5), 1);
    pdb_dec_reply_end e2 = {.usage = {50, 9, 32}, .no_body = 1};
    assert_int_equal(pdb_dec_reply_finish(r, &e2), PDB_OK);
    assert_null(pdb_dec_reply_take(r, &n));
    const pdb_openai_result *res = pdb_dec_reply_result(r);
    assert_int_equal(res->index, 3);
    assert_string_equal(res->finish_reason, "tool_calls");
    assert_int_equal(res->text_len, 2);
    assert_memory_equal(res->text, "Hi", 2);
    assert_int_equal(res->n_tool_calls, 1);
    assert_string_equal(res->tool_calls[0].name, "f");
    assert_int_equal(res->tool_calls[0].arguments_len, 8);
    assert_memory_equal(res->tool_calls[0].arguments, "{\"a\": 1}", 8);
    pdb_dec_reply_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_body),
        cmocka_unit_test(test_openai_stream),
        cmocka_unit_test(test_anthropic),
        cmocka_unit_test(test_choice_of_several),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
