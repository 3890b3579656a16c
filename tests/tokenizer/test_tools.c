/* test_tools: pdb_tools and the tool parts of pdb_chat. Invariants checked: conversations with
 * tools, assistant tool calls and tool outputs render exactly as jinja2 renders the shipped
 * template (tests/golden/tokenizer/deepseek_v3_tools.jsonl, from tools/gen_tools_golden.py),
 * the markers are single special tokens of the real tokenizer, the forced prefix is the
 * template's call opening, and the parser gives the same events whether the text arrives in
 * one piece or byte by byte (content, names and arguments exact; markers and fences removed;
 * broken calls closed or kept as content, never lost), also on 2,000 seeded random texts made of
 * markers and fragments; a request's prompt ids (pdb_prompt, shared by the front and the
 * decoder) carry the tools section unless tool_choice is none and end with the forced prefix. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pdb_chat.h"
#include "pdb_openai.h"
#include "pdb_prompt.h"
#include "pdb_tokenizer.h"
#include "pdb_tools.h"

static char *src_path(const char *rel) {
    static char buf[4][4096];
    static int k;
    const char *s = getenv("PDB_SRC");
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", s && *s ? s : ".", rel);
    return b;
}

/* ---- golden renderings ---------------------------------------------------------------------- */

static void test_golden_tools(void **state) {
    (void)state;
    FILE *f = fopen(src_path("tests/golden/tokenizer/deepseek_v3_tools.jsonl"), "rb");
    assert_non_null(f);
    char line[65536];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        assert_non_null(o);
        json_t *msgs = json_object_get(o, "messages"), *tools = json_object_get(o, "tools");
        size_t n = json_array_size(msgs), nt = json_array_size(tools);
        pdb_chat_message *m = calloc(n + 2, sizeof *m);
        pdb_chat_tool_call *calls = calloc(64, sizeof *calls);
        assert_true(m && calls);
        size_t c = 0;
        for (size_t k = 0; k < n; k++) {
            json_t *jm = json_array_get(msgs, k), *tc = json_object_get(jm, "tool_calls");
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content")); /* NULL for null */
            m[k].tool_calls = calls + c;
            for (size_t j = 0; j < json_array_size(tc); j++, c++) {
                json_t *fn = json_object_get(json_array_get(tc, j), "function");
                calls[c] = (pdb_chat_tool_call){json_string_value(json_object_get(fn, "name")),
                                                json_string_value(json_object_get(fn, "arguments"))};
                m[k].n_tool_calls++;
            }
        }
        char *section = NULL, *params[16] = {0};
        size_t section_len = 0, nm = n;
        if (nt) {
            pdb_tools_def defs[16];
            assert_true(nt <= 16);
            for (size_t k = 0; k < nt; k++) {
                json_t *fn = json_object_get(json_array_get(tools, k), "function");
                json_t *p = json_object_get(fn, "parameters");
                params[k] = p ? json_dumps(p, JSON_PRESERVE_ORDER) : NULL;
                defs[k] = (pdb_tools_def){json_string_value(json_object_get(fn, "name")),
                                          json_string_value(json_object_get(fn, "description")), params[k]};
            }
            assert_int_equal(pdb_tools_render_section(defs, nt, &section, &section_len), PDB_OK);
            assert_int_equal(strlen(section), section_len);
            m[nm++] = (pdb_chat_message){"system", section, NULL, 0};
        }
        char *text = NULL;
        size_t len = 0;
        pdb_status st = pdb_chat_render_prompt(m, nm, true, &text, &len);
        if (st != PDB_OK) fprintf(stderr, "case %d: %s\n", cases, pdb_err_msg());
        assert_int_equal(st, PDB_OK);
        json_t *want = json_object_get(o, "text");
        if (len != json_string_length(want) || memcmp(text, json_string_value(want), len))
            fprintf(stderr, "case %d differs:\n got: %s\nwant: %s\n", cases, text, json_string_value(want));
        assert_int_equal(len, json_string_length(want));
        assert_memory_equal(text, json_string_value(want), len);
        assert_int_equal(pdb_chat_ends_with_tool(m, nm), n && !strcmp(m[n - 1].role, "tool"));
        free(text);
        free(section);
        for (size_t k = 0; k < nt; k++) free(params[k]);
        free(calls);
        free(m);
        json_decref(o);
        cases++;
    }
    fclose(f);
    assert_true(cases >= 12);
}

/* Every marker the format uses is one special token of the real tokenizer. */
static void test_markers_are_tokens(void **state) {
    (void)state;
    pdb_tokenizer *tok = NULL;
    assert_int_equal(pdb_tokenizer_load(src_path(".cache/tokenizer/deepseek_v3/tokenizer.json"), &tok), PDB_OK);
    const char *markers[] = {PDB_TOOLS_CALLS_BEGIN,   PDB_TOOLS_CALLS_END,  PDB_TOOLS_CALL_BEGIN,   PDB_TOOLS_CALL_END,
                             PDB_TOOLS_SEP,           PDB_TOOLS_OUTPUTS_BEGIN, PDB_TOOLS_OUTPUTS_END, PDB_TOOLS_OUTPUT_BEGIN,
                             PDB_TOOLS_OUTPUT_END};
    for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        assert_int_equal(pdb_tokenizer_encode(tok, markers[i], strlen(markers[i]), &ids, &n), PDB_OK);
        assert_int_equal(n, 1);
        size_t bl = 0;
        const char *b = pdb_tokenizer_token_bytes(tok, ids[0], &bl);
        assert_int_equal(bl, strlen(markers[i])); /* decodes back to the marker's text */
        assert_memory_equal(b, markers[i], bl);
        free(ids);
    }
    pdb_tokenizer_free(tok);
}

static void test_forced_prefix_and_refusals(void **state) {
    (void)state;
    char *t = NULL;
    size_t l = 0;
    assert_int_equal(pdb_tools_forced_prefix("get_weather", &t, &l), PDB_OK);
    const char *want = PDB_TOOLS_CALLS_BEGIN PDB_TOOLS_CALL_BEGIN "function" PDB_TOOLS_SEP "get_weather\n```json\n";
    assert_int_equal(l, strlen(want));
    assert_string_equal(t, want);
    free(t);
    /* forced among several tools: the opening stops at the separator (the model writes the name) */
    assert_int_equal(pdb_tools_forced_prefix(NULL, &t, &l), PDB_OK);
    assert_string_equal(t, PDB_TOOLS_CALLS_BEGIN PDB_TOOLS_CALL_BEGIN "function" PDB_TOOLS_SEP);
    assert_int_equal(l, strlen(t));
    free(t);
    pdb_chat_tool_call c = {"f", "{}"};
    pdb_chat_message both[] = {{"user", "x", NULL, 0}, {"assistant", "text", &c, 1}};
    assert_int_equal(pdb_chat_render_prompt(both, 2, true, &t, &l), PDB_UNSUPPORTED);
    assert_non_null(strstr(pdb_err_msg(), "messages[1]"));
    pdb_chat_message on_user[] = {{"user", NULL, &c, 1}};
    assert_int_equal(pdb_chat_render_prompt(on_user, 1, true, &t, &l), PDB_INVALID);
    pdb_chat_message empty[] = {{"user", "x", NULL, 0}, {"assistant", NULL, NULL, 0}};
    assert_int_equal(pdb_chat_render_prompt(empty, 2, true, &t, &l), PDB_INVALID);
    pdb_chat_message tool_null[] = {{"user", "x", NULL, 0}, {"tool", NULL, NULL, 0}};
    assert_int_equal(pdb_chat_render_prompt(tool_null, 2, true, &t, &l), PDB_INVALID);
}

/* ---- parser --------------------------------------------------------------------------------- */

typedef struct {
    char out[4096]; /* events written as a transcript: T[...] C0[name] A0[...] E0 */
    size_t len;
    int last_ev, last_call;
    int stop_after_end;
} transcript;

static int tr_event(void *user, pdb_tools_event ev, int call, const char *s, size_t n) {
    transcript *t = user;
    /* merge consecutive TEXT / ARGS pieces so that the chunking does not show */
    int merge = (ev == PDB_TOOLS_EV_TEXT || ev == PDB_TOOLS_EV_ARGS) && (int)ev == t->last_ev && call == t->last_call;
    if (merge) t->len--; /* drop the closing ']' */
    else if (ev == PDB_TOOLS_EV_TEXT) t->len += (size_t)snprintf(t->out + t->len, sizeof t->out - t->len, "T[");
    else if (ev == PDB_TOOLS_EV_CALL) t->len += (size_t)snprintf(t->out + t->len, sizeof t->out - t->len, "C%d[", call);
    else if (ev == PDB_TOOLS_EV_ARGS) t->len += (size_t)snprintf(t->out + t->len, sizeof t->out - t->len, "A%d[", call);
    else t->len += (size_t)snprintf(t->out + t->len, sizeof t->out - t->len, "E%d", call);
    if (ev != PDB_TOOLS_EV_CALL_END) {
        assert_true(t->len + n + 2 < sizeof t->out);
        memcpy(t->out + t->len, s, n);
        t->len += n;
        t->out[t->len++] = ']';
    }
    t->out[t->len] = 0;
    t->last_ev = (int)ev;
    t->last_call = call;
    return ev == PDB_TOOLS_EV_CALL_END && t->stop_after_end ? 7 : 0;
}

static int g_head; /* parse_both_ways starts the parser in a call's head (pdb_tools_parser_init_head) */

static void parse_both_ways(const char *forced, const char *in, const char *want, int want_done) {
    for (int chunk = 0; chunk < 3; chunk++) {
        pdb_tools_parser p;
        if (g_head) pdb_tools_parser_init_head(&p);
        else pdb_tools_parser_init(&p, forced);
        transcript t = {.last_ev = -1};
        size_t n = strlen(in), step = chunk == 0 ? n : chunk == 1 ? 1 : 5;
        for (size_t i = 0; i < n; i += step)
            assert_int_equal(pdb_tools_parser_feed(&p, in + i, i + step <= n ? step : n - i, tr_event, &t), 0);
        assert_int_equal(pdb_tools_parser_finish(&p, tr_event, &t), 0);
        if (strcmp(t.out, want)) fprintf(stderr, "chunk %d: got  %s\n         want %s\n", chunk, t.out, want);
        assert_string_equal(t.out, want);
        assert_int_equal(pdb_tools_parser_done(&p), want_done);
        pdb_tools_parser_free(&p);
    }
}

#define CB PDB_TOOLS_CALLS_BEGIN
#define CE PDB_TOOLS_CALLS_END
#define KB PDB_TOOLS_CALL_BEGIN
#define KE PDB_TOOLS_CALL_END
#define SP PDB_TOOLS_SEP

static void test_parser(void **state) {
    (void)state;
    parse_both_ways(NULL, "plain text < with a lone < and <｜ bits", "T[plain text < with a lone < and <｜ bits]", 0);
    parse_both_ways(NULL, "Let me check." CB KB "function" SP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" KE CE,
                    "T[Let me check.]C0[get_weather]A0[{\"city\": \"Paris\"}]E0", 1);
    parse_both_ways(NULL, CB KB "function" SP "a\n```json\n{}\n```" KE "\n" KB "function" SP "b\n```json\n{\"x\": \"```\"}\n```" KE CE,
                    "C0[a]A0[{}]E0C1[b]A1[{\"x\": \"```\"}]E1", 1);
    /* the forced case: generation continues inside the arguments */
    parse_both_ways("get_weather", "{\"city\": \"Rome\"}\n```" KE CE, "C0[get_weather]A0[{\"city\": \"Rome\"}]E0", 1);
    /* cut short (max_tokens): the call is closed with what it has, a dangling fence start dropped */
    parse_both_ways("f", "{\"q\": \"abc\n``", "C0[f]A0[{\"q\": \"abc]E0", 0);
    parse_both_ways("f", "", "C0[f]E0", 0);
    /* forced among several tools: generation starts at the name, which runs to its newline */
    g_head = 1;
    parse_both_ways(NULL, "get_time\n```json\n{\"tz\": \"UTC\"}", "C0[get_time]A0[{\"tz\": \"UTC\"}]E0", 0);
    parse_both_ways(NULL, "now\n```json\n{}\n```" KE CE, "C0[now]A0[{}]E0", 1);
    parse_both_ways(NULL, "get_t", "C0[get_t]E0", 0); /* cut inside the name: the name so far */
    parse_both_ways(NULL, "", "", 0);                 /* nothing generated: no call */
    g_head = 0;
    /* no fence, a call without arguments, then text after the calls block */
    parse_both_ways(NULL, CB KB "function" SP " now \n" KE CE "tail", "C0[now]E0T[tail]", 1);
    /* a head that never ends is content; a calls block that holds no call is content */
    parse_both_ways(NULL, CB KB "function no separator", "T[function no separator]", 0);
    parse_both_ways(NULL, CB "oops", "T[oops]", 0);
    /* a callback's nonzero value stops the feed */
    pdb_tools_parser p;
    pdb_tools_parser_init(&p, NULL);
    transcript t = {.last_ev = -1, .stop_after_end = 1};
    const char *in = CB KB "function" SP "a\n```json\n{}\n```" KE KB;
    assert_int_equal(pdb_tools_parser_feed(&p, in, strlen(in), tr_event, &t), 7);
    assert_string_equal(t.out, "C0[a]A0[{}]E0");
    assert_int_equal(pdb_tools_parser_calls(&p), 1);
    pdb_tools_parser_free(&p);
}

/* Seeded random texts of markers, marker fragments and plain bytes: the events do not depend on
 * how the text is cut. */
static void test_parser_chunking_property(void **state) {
    (void)state;
    static const char *const pieces[] = {PDB_TOOLS_CALLS_BEGIN, PDB_TOOLS_CALLS_END, PDB_TOOLS_CALL_BEGIN, PDB_TOOLS_CALL_END,
                                         PDB_TOOLS_SEP, "function", "get_weather", "\n", "```json\n", "\n```", "```", "{\"a\": 1}",
                                         " ", "<", "<\xef\xbd\x9c", "tool", "text", "\xe2\x96\x81", "}"};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int it = 0; it < 2000; it++) {
        char in[1024];
        size_t n = 0;
        int parts = 1 + (int)(x % 40);
        for (int k = 0; k < parts; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            const char *pc = pieces[x % (sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(pc);
            if (n + l >= sizeof in) break;
            memcpy(in + n, pc, l);
            n += l;
        }
        in[n] = 0;
        const char *forced = it % 3 == 0 ? "f" : NULL;
        transcript whole = {.last_ev = -1};
        pdb_tools_parser p;
        pdb_tools_parser_init(&p, forced);
        assert_int_equal(pdb_tools_parser_feed(&p, in, n, tr_event, &whole), 0);
        assert_int_equal(pdb_tools_parser_finish(&p, tr_event, &whole), 0);
        int done = pdb_tools_parser_done(&p);
        pdb_tools_parser_free(&p);
        size_t step = 1 + (size_t)(x % 7);
        transcript cut = {.last_ev = -1};
        pdb_tools_parser_init(&p, forced);
        for (size_t i = 0; i < n; i += step)
            assert_int_equal(pdb_tools_parser_feed(&p, in + i, i + step <= n ? step : n - i, tr_event, &cut), 0);
        assert_int_equal(pdb_tools_parser_finish(&p, tr_event, &cut), 0);
        if (strcmp(whole.out, cut.out)) fprintf(stderr, "input %d (step %zu): %s\nwhole %s\ncut   %s\n", it, step, in, whole.out, cut.out);
        assert_string_equal(whole.out, cut.out);
        assert_int_equal(pdb_tools_parser_done(&p), done);
        pdb_tools_parser_free(&p);
    }
}

/* The prompt ids of a request with tools, as the front and the decoder compute them. */
static char *prompt_text(const pdb_tokenizer *tok, const char *body) {
    pdb_openai_request q;
    pdb_openai_error e;
    if (pdb_openai_parse_request(PDB_OPENAI_CHAT, body, strlen(body), NULL, &q, &e) != PDB_OK) fail_msg("%s: %s", body, e.message);
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(pdb_prompt_encode_request(tok, &q, &ids, &n, &e), PDB_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(pdb_tokenizer_decode(tok, ids, n, &text, &len), PDB_OK);
    free(ids);
    pdb_openai_request_free(&q);
    return text;
}

static void test_prompt_ids(void **state) {
    (void)state;
    pdb_tokenizer *tok = NULL;
    assert_int_equal(pdb_tokenizer_load(src_path(".cache/tokenizer/deepseek_v3/tokenizer.json"), &tok), PDB_OK);
#define TB "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":[{\"type\":\"function\"," \
           "\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]"
    char *t = prompt_text(tok, TB "}");
    assert_non_null(strstr(t, "## Tools\nYou can call the following functions.\n\n### get_weather\nParameters: {\"type\": \"object\"}\n"));
    const char *gen = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>";
    assert_string_equal(t + strlen(t) - strlen(gen), gen);
    free(t);
    t = prompt_text(tok, TB ",\"tool_choice\":\"none\"}");
    assert_null(strstr(t, "## Tools"));
    free(t);
    t = prompt_text(tok, TB ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}");
    const char *forced = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>" PDB_TOOLS_CALLS_BEGIN PDB_TOOLS_CALL_BEGIN "function" PDB_TOOLS_SEP
                         "get_weather\n```json\n";
    assert_true(strlen(t) > strlen(forced));
    assert_string_equal(t + strlen(t) - strlen(forced), forced);
    free(t);
    pdb_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_tools),
        cmocka_unit_test(test_markers_are_tokens),
        cmocka_unit_test(test_forced_prefix_and_refusals),
        cmocka_unit_test(test_parser),
        cmocka_unit_test(test_parser_chunking_property),
        cmocka_unit_test(test_prompt_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
