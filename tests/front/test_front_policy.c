/* test_front_policy: the bridge decision and the verdict rules as pure functions: off / short /
 * warm / min_tail / force / max_bridge_tokens, and complete / partial / declined from what the
 * store got and what the decoder reports (a native answer is never labelled bridged). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "pdb_front_policy.h"

static const pdb_front_policy P = {.min_bridge_tokens = 1024, .min_tail = 512, .max_bridge_tokens = 0};

static void test_decide(void **st) {
    pdb_front_plan p = pdb_front_policy_decide(&P, PDB_MODE_OFF, 5000, 1024, 0);
    assert_int_equal(p.kind, PDB_PLAN_SKIP);
    assert_string_equal(p.skip_reason, "off");
    p = pdb_front_policy_decide(&P, PDB_MODE_AUTO, 900, 128, 0);           /* below min_bridge_tokens */
    assert_string_equal(p.skip_reason, "short");
    p = pdb_front_policy_decide(&P, PDB_MODE_AUTO, 1024, 1024, 0);         /* no block leaves a token to compute */
    assert_string_equal(p.skip_reason, "short");
    p = pdb_front_policy_decide(&P, PDB_MODE_FORCE, 1024, 1024, 0);
    assert_string_equal(p.skip_reason, "no_full_block");
    p = pdb_front_policy_decide(&P, PDB_MODE_AUTO, 5000, 1024, 0);         /* (5000-1)/1024 = 4 blocks */
    assert_int_equal(p.kind, PDB_PLAN_BRIDGE);
    assert_int_equal(p.first_block, 0);
    assert_int_equal(p.end_block, 4);
    p = pdb_front_policy_decide(&P, PDB_MODE_AUTO, 5000, 1024, 4);         /* all cached */
    assert_string_equal(p.skip_reason, "warm");
    p = pdb_front_policy_decide(&P, PDB_MODE_AUTO, 5000, 128, 36);         /* 3 blocks * 128 < min_tail 512 */
    assert_string_equal(p.skip_reason, "warm");
    p = pdb_front_policy_decide(&P, PDB_MODE_FORCE, 5000, 128, 36);        /* force ignores the thresholds */
    assert_int_equal(p.kind, PDB_PLAN_BRIDGE);
    assert_int_equal(p.first_block, 36);
    assert_int_equal(p.end_block, 39);
    pdb_front_policy cap = P;
    cap.max_bridge_tokens = 2048;
    p = pdb_front_policy_decide(&cap, PDB_MODE_AUTO, 9000, 1024, 0);
    assert_int_equal(p.end_block, 2);
    p = pdb_front_policy_decide(&cap, PDB_MODE_AUTO, 9000, 1024, 2);
    assert_string_equal(p.skip_reason, "too_long");
    assert_int_equal(pdb_front_parse_mode(NULL), PDB_MODE_AUTO);
    assert_int_equal(pdb_front_parse_mode("FORCE"), PDB_MODE_FORCE);
    assert_int_equal(pdb_front_parse_mode("Off"), PDB_MODE_OFF);
    assert_int_equal(pdb_front_parse_mode("sometimes"), -1);
}

static pdb_front_verdict base(int64_t written, int64_t requested, int64_t before) {
    pdb_front_verdict v;
    memset(&v, 0, sizeof v);
    v.prompt_tokens = 700;
    v.block_size = 128;
    v.blocks_bridgeable = 5;
    v.blocks_requested = requested;
    v.blocks_written = written;
    v.blocks_cached_before = before;
    return v;
}

static void test_verdicts(void **st) {
    char h[512];
    pdb_front_verdict v = base(5, 5, 0);
    pdb_front_verdict_finish(&v, 1, 640);
    assert_string_equal(v.kind, "complete");
    pdb_front_verdict_header(&v, h, sizeof h);
    assert_non_null(strstr(h, "complete; tokens=700; mounted=640; blocks=5/5"));
    v = base(5, 5, 0);                      /* blocks written, but the decoder used none of them */
    pdb_front_verdict_finish(&v, 1, 0);
    assert_string_equal(v.kind, "declined");
    assert_string_equal(v.reason, "decoder_miss");
    v = base(0, 5, 0);
    snprintf(v.reason, sizeof v.reason, "prefill_unreachable");
    pdb_front_verdict_finish(&v, 1, 0);
    pdb_front_verdict_header(&v, h, sizeof h);
    assert_non_null(strstr(h, "declined prefill_unreachable;"));
    v = base(2, 5, 0);
    snprintf(v.reason, sizeof v.reason, "prefill_connection_lost");
    v.resumes = 2;
    v.spool_blocks = 3;
    pdb_front_verdict_finish(&v, 1, 256);
    pdb_front_verdict_header(&v, h, sizeof h);
    assert_string_equal(v.kind, "partial");
    assert_non_null(strstr(h, "partial 256/700;"));
    assert_non_null(strstr(h, "reason=prefill_connection_lost"));
    assert_non_null(strstr(h, "resumes=2; spool_blocks=3"));
    v = base(5, 5, 0);                      /* all written, the decoder mounted only 3 */
    pdb_front_verdict_finish(&v, 1, 384);
    assert_string_equal(v.kind, "partial");
    assert_string_equal(v.reason, "decoder_mounted_fewer");
    v = base(0, 0, 5);                      /* nothing attempted: the skip reason stands */
    snprintf(v.kind, sizeof v.kind, "skipped");
    snprintf(v.reason, sizeof v.reason, "warm");
    pdb_front_verdict_finish(&v, 0, 640);
    pdb_front_verdict_header(&v, h, sizeof h);
    assert_non_null(strstr(h, "skipped warm; tokens=700; mounted=640"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decide), cmocka_unit_test(test_verdicts)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
