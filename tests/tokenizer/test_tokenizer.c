/* test_tokenizer: pdb_tokenizer and pdb_chat. Invariants checked: ids identical to HF
 * `tokenizers` on every golden string (tests/golden/tokenizer/deepseek_v3.jsonl, from
 * tools/gen_tokenizer_golden.py), decode(encode(s)) == s, the chat template equals the
 * jinja2 rendering, added tokens split leftmost-longest, both merge forms load, and bad files
 * fail with a message naming the file and field. The real tokenizer (installed by
 * scripts/setup.sh) is required: a missing file is a failure, not a skip. */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_chat.h"
#include "pdb_tokenizer.h"

#define USER_TOK "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASSISTANT_TOK "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define BOS_TOK "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS_TOK "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static pdb_tokenizer *g_tok; /* the real DeepSeek V3 tokenizer, loaded once */

static const char *src_root(void) {
    const char *s = getenv("PDB_SRC");
    return s && *s ? s : ".";
}

static char *src_path(const char *rel) {
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", src_root(), rel);
    return b;
}

static int setup_real(void **state) {
    (void)state;
    const char *p = src_path(".cache/tokenizer/deepseek_v3/tokenizer.json");
    pdb_status st = pdb_tokenizer_load(p, &g_tok);
    if (st != PDB_OK) {
        fprintf(stderr, "cannot load the real tokenizer (scripts/setup.sh installs it): %s: %s\n", pdb_status_str(st),
                pdb_err_msg());
        return -1;
    }
    return 0;
}

static int teardown_real(void **state) {
    (void)state;
    pdb_tokenizer_free(g_tok);
    g_tok = NULL;
    return 0;
}

static void print_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    if (n > 200) fprintf(f, "...(%zu bytes)", n);
}

static void check_roundtrip(const pdb_tokenizer *tok, const char *s, size_t n) {
    int32_t *ids;
    int64_t n_ids;
    assert_int_equal(pdb_tokenizer_encode(tok, s, n, &ids, &n_ids), PDB_OK);
    char *back;
    size_t back_len;
    assert_int_equal(pdb_tokenizer_decode(tok, ids, n_ids, &back, &back_len), PDB_OK);
    if (back_len != n || memcmp(back, s, n)) {
        fprintf(stderr, "roundtrip differs for \"");
        print_escaped(stderr, s, n);
        fprintf(stderr, "\"\n");
        fail();
    }
    free(back);
    free(ids);
}

/* Encode s and compare with the expected ids; prints the first difference. Returns 1 if equal. */
static int ids_match(const pdb_tokenizer *tok, const char *s, size_t n, json_t *want) {
    int32_t *ids;
    int64_t n_ids;
    pdb_status st = pdb_tokenizer_encode(tok, s, n, &ids, &n_ids);
    if (st != PDB_OK) {
        fprintf(stderr, "encode failed: %s\n", pdb_err_msg());
        return 0;
    }
    int64_t nw = (int64_t)json_array_size(want), i = 0;
    while (i < n_ids && i < nw && ids[i] == json_integer_value(json_array_get(want, (size_t)i))) i++;
    int ok = i == n_ids && i == nw;
    if (!ok) {
        fprintf(stderr, "MISMATCH \"");
        print_escaped(stderr, s, n);
        fprintf(stderr, "\"\n  first difference at %lld: got", (long long)i);
        for (int64_t k = i; k < n_ids && k < i + 8; k++) fprintf(stderr, " %d", ids[k]);
        fprintf(stderr, " (n=%lld); want", (long long)n_ids);
        for (int64_t k = i; k < nw && k < i + 8; k++)
            fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, (size_t)k)));
        fprintf(stderr, " (n=%lld)\n", (long long)nw);
    }
    free(ids);
    return ok;
}

/* Lines of a jsonl file as parsed objects (NULs in strings allowed). */
static json_t *load_jsonl(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open (generate it with tools/gen_tokenizer_golden.py)\n", path);
        return NULL;
    }
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        json_error_t err;
        json_t *j = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &err);
        if (!j) {
            fprintf(stderr, "%s:%d: %s\n", path, lineno, err.text);
            json_decref(arr);
            arr = NULL;
            break;
        }
        json_array_append_new(arr, j);
    }
    free(line);
    fclose(f);
    return arr;
}

static void test_golden_ids(void **state) {
    (void)state;
    json_t *lines = load_jsonl(src_path("tests/golden/tokenizer/deepseek_v3.jsonl"));
    assert_non_null(lines);
    assert_true(json_array_size(lines) >= 300);
    size_t bad = 0, i;
    json_t *o;
    json_array_foreach(lines, i, o) {
        json_t *text = json_object_get(o, "text"), *ids = json_object_get(o, "ids");
        assert_true(json_is_string(text) && json_is_array(ids));
        if (!ids_match(g_tok, json_string_value(text), json_string_length(text), ids)) bad++;
        check_roundtrip(g_tok, json_string_value(text), json_string_length(text));
    }
    fprintf(stderr, "golden: %zu strings, %zu mismatches\n", json_array_size(lines), bad);
    json_decref(lines);
    assert_int_equal(bad, 0);
}

static void test_golden_chat(void **state) {
    (void)state;
    json_t *lines = load_jsonl(src_path("tests/golden/tokenizer/deepseek_v3_chat.jsonl"));
    assert_non_null(lines);
    assert_true(json_array_size(lines) >= 10);
    size_t i;
    json_t *o;
    json_array_foreach(lines, i, o) {
        json_t *msgs = json_object_get(o, "messages");
        size_t n = json_array_size(msgs);
        pdb_chat_message *m = calloc(n + 1, sizeof *m);
        assert_non_null(m);
        for (size_t k = 0; k < n; k++) {
            m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        char *text;
        size_t len;
        assert_int_equal(pdb_chat_render_prompt(m, n, json_is_true(json_object_get(o, "add_generation_prompt")), &text, &len),
                         PDB_OK);
        json_t *want = json_object_get(o, "text");
        assert_int_equal(len, json_string_length(want));
        assert_memory_equal(text, json_string_value(want), len);
        json_t *ids = json_object_get(o, "ids");
        if (json_is_array(ids)) assert_true(ids_match(g_tok, text, len, ids));
        free(text);
        free(m);
    }
    json_decref(lines);
}

static int64_t encode_n(const pdb_tokenizer *tok, const char *s, int32_t *out, int64_t max) {
    int32_t *ids;
    int64_t n;
    assert_int_equal(pdb_tokenizer_encode(tok, s, strlen(s), &ids, &n), PDB_OK);
    assert_true(n <= max);
    if (n) memcpy(out, ids, (size_t)n * sizeof *ids);
    free(ids);
    return n;
}

static void test_special_split(void **state) {
    (void)state;
    int32_t user = pdb_tokenizer_token_to_id(g_tok, USER_TOK, strlen(USER_TOK));
    int32_t asst = pdb_tokenizer_token_to_id(g_tok, ASSISTANT_TOK, strlen(ASSISTANT_TOK));
    assert_int_equal(user, 128803);
    assert_int_equal(asst, 128804);
    assert_int_equal(pdb_tokenizer_bos_id(g_tok), 0);
    assert_int_equal(pdb_tokenizer_eos_id(g_tok), 1);
    assert_int_equal(pdb_tokenizer_vocab_size(g_tok), 128815);
    assert_true(pdb_tokenizer_is_special(g_tok, 0));
    assert_false(pdb_tokenizer_is_special(g_tok, user)); /* "special": false in the file */
    assert_string_equal(pdb_tokenizer_id_to_token(g_tok, user), USER_TOK);
    assert_null(pdb_tokenizer_id_to_token(g_tok, 128815));

    /* text around an added token is encoded as if the token were a boundary */
    int32_t a[64], b[64], c[64];
    int64_t na = encode_n(g_tok, "Hi there", a, 64);
    int64_t nb = encode_n(g_tok, " friend", b, 64);
    int64_t nc = encode_n(g_tok, "Hi there" USER_TOK " friend" ASSISTANT_TOK ASSISTANT_TOK, c, 64);
    assert_int_equal(nc, na + 1 + nb + 2);
    assert_memory_equal(c, a, (size_t)na * sizeof *a);
    assert_int_equal(c[na], user);
    assert_memory_equal(c + na + 1, b, (size_t)nb * sizeof *b);
    assert_int_equal(c[na + 1 + nb], asst);
    assert_int_equal(c[na + 2 + nb], asst);
    /* an incomplete token is plain text */
    int64_t np = encode_n(g_tok, "<\xef\xbd\x9cUser", c, 64);
    for (int64_t i = 0; i < np; i++) assert_int_not_equal(c[i], user);
    /* BOS text -> id 0 */
    assert_int_equal(encode_n(g_tok, BOS_TOK, c, 64), 1);
    assert_int_equal(c[0], 0);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    static const char *cases[] = {"\xff", "ab\xc3(", "\xe2\x82", "x\xed\xa0\x80y", "\xc0\xaf", "\xf4\x90\x80\x80",
                                  "ok \xfe\xff ok", "\xe4\xb8\xad\xe4\xb8"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_roundtrip(g_tok, cases[i], strlen(cases[i]));
    /* random bytes (deterministic): any byte string survives encode -> decode */
    uint32_t x = 12345;
    char buf[300];
    for (int r = 0; r < 300; r++) {
        size_t n = (size_t)(r % 300);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            uint32_t v = x >> 16;
            /* mix ASCII, continuation bytes, lead bytes and the bytes of the added tokens */
            if (v % 4 == 0) buf[i] = "<\xef\xbd\x9c>Us \n"[v % 9];
            else buf[i] = (char)(v % 4 == 1 ? 0x80 + (v >> 3) % 64 : (v >> 4) & 0xff);
        }
        check_roundtrip(g_tok, buf, n);
    }
    /* an invalid byte is a word of its own: text after it encodes as if it started there */
    int32_t a[32], b[32];
    int64_t na = encode_n(g_tok, "\xff hello", a, 32);
    int64_t nb = encode_n(g_tok, " hello", b, 32);
    assert_int_equal(na, nb + 1);
    assert_memory_equal(a + 1, b, (size_t)nb * sizeof *b);
    size_t l;
    const char *bytes = pdb_tokenizer_token_bytes(g_tok, a[0], &l);
    assert_int_equal(l, 1);
    assert_int_equal((unsigned char)bytes[0], 0xff);
}

static void test_decode_bad_id(void **state) {
    (void)state;
    int32_t ids[] = {100, 1 << 20};
    char *t;
    size_t l;
    assert_int_equal(pdb_tokenizer_decode(g_tok, ids, 2, &t, &l), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "ids[1]"));
    assert_int_equal(pdb_tokenizer_decode(g_tok, ids, 0, &t, &l), PDB_OK);
    assert_int_equal(l, 0);
    free(t);
}

typedef struct {
    const char *text;
    size_t len;
    const int32_t *want;
    int64_t n_want;
    int ok;
} thread_job;

static void *thread_encode(void *arg) {
    thread_job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 5; r++) {
        int32_t *ids;
        int64_t n;
        if (pdb_tokenizer_encode(g_tok, j->text, j->len, &ids, &n) != PDB_OK) { j->ok = 0; return NULL; }
        if (n != j->n_want || memcmp(ids, j->want, (size_t)n * sizeof *ids)) j->ok = 0;
        free(ids);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    const char *piece = "The quick brown fox 123456 跳过了 lazy dogs!\n\t  " USER_TOK "x";
    size_t pl = strlen(piece), n = pl * 500;
    char *text = malloc(n);
    assert_non_null(text);
    for (size_t i = 0; i < 500; i++) memcpy(text + i * pl, piece, pl);
    int32_t *want;
    int64_t n_want;
    assert_int_equal(pdb_tokenizer_encode(g_tok, text, n, &want, &n_want), PDB_OK);
    pthread_t th[8];
    thread_job jobs[8];
    for (int i = 0; i < 8; i++) {
        jobs[i] = (thread_job){.text = text, .len = n, .want = want, .n_want = n_want};
        assert_int_equal(pthread_create(&th[i], NULL, thread_encode, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
    }
    free(want);
    free(text);
}

/* ---- chat template ---------------------------------------------------------------------- */

static void test_chat_template(void **state) {
    (void)state;
    pdb_chat_message m[] = {{"system", "S1", NULL, 0}, {"user", "Hi", NULL, 0}, {"assistant", "Yo", NULL, 0},
                            {"system", "S2", NULL, 0}, {"user", "Q", NULL, 0}};
    char *t;
    size_t l;
    assert_int_equal(pdb_chat_render_prompt(m, 5, true, &t, &l), PDB_OK);
    assert_string_equal(t, BOS_TOK "S1\n\nS2" USER_TOK "Hi" ASSISTANT_TOK "Yo" EOS_TOK USER_TOK "Q" ASSISTANT_TOK);
    assert_int_equal(l, strlen(t));
    free(t);
    assert_int_equal(pdb_chat_render_prompt(m + 1, 1, false, &t, &l), PDB_OK);
    assert_string_equal(t, BOS_TOK USER_TOK "Hi");
    free(t);
    assert_int_equal(pdb_chat_render_prompt(NULL, 0, false, &t, &l), PDB_OK);
    assert_string_equal(t, BOS_TOK);
    free(t);

    /* tool outputs and calls render (tests/tokenizer/test_tools.c checks them against jinja2);
     * an assistant message with neither content nor calls is refused */
    pdb_chat_message calls[] = {{"assistant", NULL, NULL, 0}};
    assert_int_equal(pdb_chat_render_prompt(calls, 1, true, &t, &l), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "messages[0]"));
    assert_null(t);
    pdb_chat_message odd[] = {{"user", "x", NULL, 0}, {"narrator", "y", NULL, 0}};
    assert_int_equal(pdb_chat_render_prompt(odd, 2, true, &t, &l), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "narrator"));
    pdb_chat_message nocontent[] = {{"user", NULL, NULL, 0}};
    assert_int_equal(pdb_chat_render_prompt(nocontent, 1, true, &t, &l), PDB_INVALID);
}

/* ---- a tiny hand-made tokenizer.json ----------------------------------------------------- */

static char g_dir[256];

static void write_file(const char *name, const char *content) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static const char *tiny_path(void) {
    static char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", g_dir);
    return p;
}

static int setup_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pdb_test_tok_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    const char *names[] = {"tokenizer.json", "tokenizer_config.json", "bad.json", "novocab.json", "badmerge.json"};
    char p[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

/* vocab: a b c ab bc abc Ġ Ġa Ġab; merges: "b c" (rank 0) string form, ["a","b"] (1) array
 * form, "Ġ a" (2), ["Ġa","b"] (3), "a bc" (4). "abc" -> a + bc -> abc via rank 4. */
static const char *tiny_json(const char *merges) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"normalizer\":null,"
             "\"added_tokens\":[{\"id\":20,\"content\":\"<x>\",\"special\":true,\"normalized\":false},"
             "{\"id\":21,\"content\":\"<xy>\",\"special\":false,\"normalized\":true}],"
             "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
             "\"decoder\":{\"type\":\"ByteLevel\"},"
             "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5,"
             "\"\\u0120\":6,\"\\u0120a\":7,\"\\u0120ab\":8,\"<\":9,\">\":10,\"x\":11},"
             "\"merges\":%s}}",
             merges);
    return buf;
}

static void test_tiny_tokenizer(void **state) {
    (void)state;
    write_file("tokenizer.json", tiny_json("[\"b c\",[\"a\",\"b\"],\"\\u0120 a\",[\"\\u0120a\",\"b\"],\"a bc\"]"));
    pdb_tokenizer *t;
    assert_int_equal(pdb_tokenizer_load(g_dir, &t), PDB_OK); /* a directory works too */
    assert_int_equal(pdb_tokenizer_vocab_size(t), 22);
    assert_int_equal(pdb_tokenizer_bos_id(t), -1);
    int32_t ids[32];
    int64_t n = encode_n(t, "abc", ids, 32);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 5); /* b c first (rank 0), then a bc (rank 4) */
    n = encode_n(t, "ab", ids, 32);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3); /* array-form merge */
    n = encode_n(t, "ab abc", ids, 32);
    /* " abc": Ġ a b c -> b c (0) -> Ġ a (2) -> Ġa bc? no merge -> [Ġa, bc] */
    int32_t want[] = {3, 7, 4};
    assert_int_equal(n, 3);
    assert_memory_equal(ids, want, sizeof want);
    n = encode_n(t, "ab<x>c<xy><x", ids, 32);
    int32_t want2[] = {3, 20, 2, 21, 9, 11};
    assert_int_equal(n, 6);
    assert_memory_equal(ids, want2, sizeof want2);
    n = encode_n(t, "abd", ids, 32); /* a char the vocab lacks is dropped, as in HF (no unk) */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3);
    assert_int_equal(pdb_tokenizer_token_to_id(t, "\xc4\xa0" "ab", 4), 8);
    assert_string_equal(pdb_tokenizer_id_to_token(t, 7), "\xc4\xa0" "a");
    char *text;
    size_t len;
    int32_t dec[] = {8, 20, 4};
    assert_int_equal(pdb_tokenizer_decode(t, dec, 3, &text, &len), PDB_OK);
    assert_string_equal(text, " ab<x>bc");
    free(text);
    pdb_tokenizer_free(t);

    /* bos/eos from tokenizer_config.json (string and object forms) */
    write_file("tokenizer_config.json", "{\"bos_token\":\"<x>\",\"eos_token\":{\"content\":\"<xy>\"}}");
    assert_int_equal(pdb_tokenizer_load(tiny_path(), &t), PDB_OK);
    assert_int_equal(pdb_tokenizer_bos_id(t), 20);
    assert_int_equal(pdb_tokenizer_eos_id(t), 21);
    pdb_tokenizer_free(t);
    write_file("tokenizer_config.json", "{\"bos_token\":\"<nope>\"}");
    assert_int_equal(pdb_tokenizer_load(tiny_path(), &t), PDB_CORRUPT);
    assert_non_null(strstr(pdb_err_msg(), "tokenizer_config.json"));
    assert_non_null(strstr(pdb_err_msg(), "bos_token"));
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", g_dir);
    unlink(p);
}

static void test_bad_files(void **state) {
    (void)state;
    pdb_tokenizer *t = (pdb_tokenizer *)1;
    char p[512];
    snprintf(p, sizeof p, "%s/missing.json", g_dir);
    assert_int_equal(pdb_tokenizer_load(p, &t), PDB_IO);
    assert_null(t);
    assert_non_null(strstr(pdb_err_msg(), p));

    write_file("bad.json", "{\"model\": {\"vocab\": {\"a\": 0,}}");
    snprintf(p, sizeof p, "%s/bad.json", g_dir);
    assert_int_equal(pdb_tokenizer_load(p, &t), PDB_CORRUPT);
    assert_non_null(strstr(pdb_err_msg(), p));
    assert_non_null(strstr(pdb_err_msg(), "line 1"));

    write_file("novocab.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}, \"decoder\": {\"type\": \"ByteLevel\"}}");
    snprintf(p, sizeof p, "%s/novocab.json", g_dir);
    assert_int_equal(pdb_tokenizer_load(p, &t), PDB_CORRUPT);
    assert_non_null(strstr(pdb_err_msg(), p));
    assert_non_null(strstr(pdb_err_msg(), "model.vocab"));

    write_file("badmerge.json", tiny_json("[\"a b\", \"a q\"]"));
    snprintf(p, sizeof p, "%s/badmerge.json", g_dir);
    assert_int_equal(pdb_tokenizer_load(p, &t), PDB_CORRUPT);
    assert_non_null(strstr(pdb_err_msg(), "model.merges[1]"));
    assert_non_null(strstr(pdb_err_msg(), p));

    write_file("badmerge.json", tiny_json("[\"a c\"]")); /* "ac" is not in the vocab */
    assert_int_equal(pdb_tokenizer_load(p, &t), PDB_CORRUPT);
    assert_non_null(strstr(pdb_err_msg(), "model.merges[0]"));
}

int main(void) {
    const struct CMUnitTest real[] = {
        cmocka_unit_test(test_golden_ids),   cmocka_unit_test(test_golden_chat), cmocka_unit_test(test_special_split),
        cmocka_unit_test(test_invalid_utf8), cmocka_unit_test(test_decode_bad_id), cmocka_unit_test(test_threads),
    };
    const struct CMUnitTest offline[] = {
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_tiny_tokenizer),
        cmocka_unit_test(test_bad_files),
    };
    int fails = cmocka_run_group_tests_name("tokenizer_offline", offline, setup_dir, teardown_dir);
    fails += cmocka_run_group_tests_name("tokenizer_deepseek_v3", real, setup_real, teardown_real);
    return fails ? 1 : 0;
}
