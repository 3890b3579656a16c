/* test_limits: every limit derived by pdb_limits_derive follows the window (raising
 * max_position_embeddings raises each one; a smaller --max-context lowers them), the numbers
 * are the documented formulas, out-of-range inputs and a --max-context above the model's
 * window are refused naming both numbers, the start-time checks name flag, value and need, and
 * the request rule refuses past-window prompts and an unfitting default max_tokens (400
 * context_length_exceeded) instead of clamping it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "pdb_limits.h"

/* V4-Flash at block size 2048: 39,882,752 pool bytes per block (docs/limits.md section 0). */
static pdb_limits_in v4flash(int64_t window) {
    return (pdb_limits_in){.model_window = window, .block_size = 2048, .vocab_size = 129280, .block_bytes = 39882752};
}

static void derive_ok(const pdb_limits_in *in, pdb_limits *l) {
    pdb_status st = pdb_limits_derive(in, l);
    if (st != PDB_OK) fail_msg("derive: %s", pdb_err_msg());
}

static void test_formulas_at_1m(void **unused) {
    pdb_limits_in in = v4flash(1048576);
    pdb_limits l;
    derive_ok(&in, &l);
    assert_int_equal(l.window, 1048576);
    assert_int_equal(l.max_prompt_tokens, 1048575);
    assert_int_equal(l.prefill_max_tokens, 1048576);
    assert_int_equal(l.id_json_bytes, 8); /* 129279: 6 digits + ", " */
    assert_int_equal(l.min_body_bytes, 1048576ull * 8 + PDB_LIMITS_BODY_FIELDS);
    assert_int_equal(l.max_body_bytes, 1048576ull * 16 + PDB_LIMITS_BODY_OVERHEAD); /* text budget wins */
    assert_int_equal(l.window_blocks, 511);
    assert_int_equal(l.block_file_bytes, 39882752ull + 2048 * 4 + PDB_LIMITS_BLOCK_HEADER_BYTES);
    assert_int_equal(l.window_store_bytes, 511ull * l.block_file_bytes);
    assert_true(l.window_store_bytes > 20380086272ull); /* >= the audit's 19.0 GiB of pool bytes */
    assert_int_equal(l.segment_bytes, 39882752ull + PDB_LIMITS_SEGMENT_OVERHEAD);
    assert_int_equal(l.window_spill_bytes, 511ull * l.segment_bytes);
    assert_int_equal(l.prefill_timeout_ms, 1048576ll * 1000 / PDB_LIMITS_MIN_TOKENS_PER_S);
    assert_int_equal(l.decoder_timeout_ms, 2 * l.prefill_timeout_ms);
    /* the HTTP idle timeout covers a streamed answer silent through a native prefill of the window */
    assert_int_equal(l.http_idle_timeout_s, (l.decoder_timeout_ms + 999) / 1000);
    assert_true(l.http_idle_timeout_s * 1000 >= l.prefill_timeout_ms);
    assert_true(l.http_idle_timeout_s > 300); /* the old fixed 300 s cut a 903K-token native prefill */
}

/* Must-show 4: raising max_position_embeddings raises every derived limit. */
static void test_raising_the_window_raises_every_limit(void **unused) {
    pdb_limits a, b;
    pdb_limits_in ia = v4flash(1048576), ib = v4flash(2097152);
    derive_ok(&ia, &a);
    derive_ok(&ib, &b);
    assert_true(b.window > a.window);
    assert_true(b.max_prompt_tokens > a.max_prompt_tokens);
    assert_true(b.prefill_max_tokens > a.prefill_max_tokens);
    assert_true(b.min_body_bytes > a.min_body_bytes);
    assert_true(b.max_body_bytes > a.max_body_bytes);
    assert_true(b.window_blocks > a.window_blocks);
    assert_true(b.window_store_bytes > a.window_store_bytes);
    assert_true(b.window_spill_bytes > a.window_spill_bytes);
    assert_true(b.prefill_timeout_ms > a.prefill_timeout_ms);
    assert_true(b.decoder_timeout_ms > a.decoder_timeout_ms);
    assert_true(b.http_idle_timeout_s > a.http_idle_timeout_s);
    /* per-block sizes do not depend on the window */
    assert_int_equal(b.block_file_bytes, a.block_file_bytes);
    assert_int_equal(b.segment_bytes, a.segment_bytes);
    /* and nowhere does a limit go down as the window grows (small windows: the floors hold) */
    pdb_limits prev;
    pdb_limits_in ip = {.model_window = 2, .block_size = 128, .vocab_size = 1000, .block_bytes = 61440};
    derive_ok(&ip, &prev);
    for (int64_t w = 4; w <= ((int64_t)1 << 26); w *= 2) {
        pdb_limits cur;
        pdb_limits_in ic = ip;
        ic.model_window = w;
        derive_ok(&ic, &cur);
        assert_true(cur.window > prev.window);
        assert_true(cur.min_body_bytes > prev.min_body_bytes);
        assert_true(cur.max_body_bytes >= prev.max_body_bytes);
        assert_true(cur.max_body_bytes >= cur.min_body_bytes);
        assert_true(cur.window_blocks >= prev.window_blocks);
        assert_true(cur.window_store_bytes >= prev.window_store_bytes);
        assert_true(cur.prefill_timeout_ms >= prev.prefill_timeout_ms);
        assert_true(cur.prefill_timeout_ms >= PDB_LIMITS_MIN_TIMEOUT_MS);
        assert_true(cur.http_idle_timeout_s >= prev.http_idle_timeout_s);
        assert_true(cur.http_idle_timeout_s * 1000 >= cur.decoder_timeout_ms);
        prev = cur;
    }
}

static void test_max_context(void **unused) {
    pdb_limits l;
    pdb_limits_in in = {.model_window = 16384, .max_context = 4096, .block_size = 128, .vocab_size = 1000, .block_bytes = 61440};
    derive_ok(&in, &l);
    assert_int_equal(l.model_window, 16384);
    assert_int_equal(l.window, 4096);
    assert_int_equal(l.window_blocks, 31);
    assert_int_equal(l.id_json_bytes, 5); /* 999 */
    assert_int_equal(l.max_body_bytes, PDB_LIMITS_MIN_BODY); /* the floor */
    in.max_context = 16385; /* above the model's window: refused, both numbers named */
    assert_int_equal(pdb_limits_derive(&in, &l), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "--max-context 16385"));
    assert_non_null(strstr(pdb_err_msg(), "16384"));
    in.max_context = 16384;
    derive_ok(&in, &l);
    assert_int_equal(l.window, 16384);
    pdb_limits_in bad[] = {
        {.model_window = 1, .block_size = 128, .vocab_size = 10, .block_bytes = 1},
        {.model_window = 100, .max_context = 1, .block_size = 128, .vocab_size = 10, .block_bytes = 1},
        {.model_window = 100, .max_context = -3, .block_size = 128, .vocab_size = 10, .block_bytes = 1},
        {.model_window = 100, .block_size = 0, .vocab_size = 10, .block_bytes = 1},
        {.model_window = 100, .block_size = 128, .vocab_size = 0, .block_bytes = 1},
        {.model_window = 100, .block_size = 128, .vocab_size = 10, .block_bytes = 0},
        {.model_window = INT64_MAX, .block_size = 1, .vocab_size = 10, .block_bytes = 1 << 30},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_int_equal(pdb_limits_derive(&bad[i], &l), PDB_INVALID);
}

static void test_start_checks_name_both_numbers(void **unused) {
    pdb_limits l;
    pdb_limits_in in = {.model_window = 16384, .block_size = 128, .vocab_size = 1000, .block_bytes = 61440};
    derive_ok(&in, &l);
    assert_int_equal(pdb_limits_check_body(&l, "--max-body", l.min_body_bytes), PDB_OK);
    assert_int_equal(pdb_limits_check_body(&l, "--max-body", l.min_body_bytes - 1), PDB_INVALID);
    char need[32];
    snprintf(need, sizeof need, "%llu", (unsigned long long)l.min_body_bytes);
    assert_non_null(strstr(pdb_err_msg(), "--max-body"));
    assert_non_null(strstr(pdb_err_msg(), need));
    assert_int_equal(pdb_limits_check_store_cap(&l, "--cache-max-bytes", 0), PDB_OK); /* unlimited */
    assert_int_equal(pdb_limits_check_store_cap(&l, "--cache-max-bytes", l.window_store_bytes), PDB_OK);
    assert_int_equal(pdb_limits_check_store_cap(&l, "--cache-max-bytes", 1000000), PDB_INVALID);
    snprintf(need, sizeof need, "%llu", (unsigned long long)l.window_store_bytes);
    assert_non_null(strstr(pdb_err_msg(), "--cache-max-bytes 1000000"));
    assert_non_null(strstr(pdb_err_msg(), need));
    assert_int_equal(pdb_limits_check_tokens(&l, "--max-tokens", 0), PDB_OK);
    assert_int_equal(pdb_limits_check_tokens(&l, "--max-tokens", 16384), PDB_OK);
    assert_int_equal(pdb_limits_check_tokens(&l, "--max-tokens", 1900), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "--max-tokens 1900"));
    assert_non_null(strstr(pdb_err_msg(), "16384"));
}

static void test_request_rule(void **unused) {
    pdb_limits l;
    pdb_limits_in in = {.model_window = 1000, .block_size = 128, .vocab_size = 1000, .block_bytes = 61440};
    derive_ok(&in, &l);
    pdb_openai_request q;
    memset(&q, 0, sizeof q);
    pdb_openai_error e;
    int64_t mt = -7;
    q.max_tokens = -1; /* absent */
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_COMPLETION, 984, &mt, &e), PDB_OK);
    assert_int_equal(mt, 16);
    /* the completions default does not fit: refused, not clamped to 5 */
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_COMPLETION, 995, &mt, &e), PDB_INVALID);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "max_tokens");
    assert_non_null(strstr(e.message, "1000"));
    /* chat: the rest of the window */
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_CHAT, 995, &mt, &e), PDB_OK);
    assert_int_equal(mt, 5);
    /* prompt at the window: refused naming it */
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_CHAT, 1000, &mt, &e), PDB_INVALID);
    assert_string_equal(e.param, "messages");
    assert_non_null(strstr(e.message, "1000"));
    q.max_tokens = 10;
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_COMPLETION, 990, &mt, &e), PDB_OK);
    assert_int_equal(mt, 10);
    assert_int_equal(pdb_limits_check_request(&l, &q, PDB_OPENAI_COMPLETION, 991, &mt, &e), PDB_INVALID);
    assert_string_equal(e.param, "max_tokens");
}

static void test_json(void **unused) {
    pdb_limits l;
    pdb_limits_in in = v4flash(1048576);
    derive_ok(&in, &l);
    json_t *j = pdb_limits_json(&l);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "window")), 1048576);
    assert_int_equal(json_integer_value(json_object_get(j, "block_size")), 2048);
    assert_int_equal((uint64_t)json_integer_value(json_object_get(j, "window_store_bytes")), l.window_store_bytes);
    assert_int_equal((uint64_t)json_integer_value(json_object_get(j, "min_body_bytes")), l.min_body_bytes);
    assert_int_equal(json_integer_value(json_object_get(j, "http_idle_timeout_s")), l.http_idle_timeout_s);
    json_decref(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formulas_at_1m),
        cmocka_unit_test(test_raising_the_window_raises_every_limit),
        cmocka_unit_test(test_max_context),
        cmocka_unit_test(test_start_checks_name_both_numbers),
        cmocka_unit_test(test_request_rule),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
