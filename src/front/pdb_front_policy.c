/* pdb_front_policy: the bridge decision and verdict formatting, pure functions. */
#include "pdb_front_policy.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

pdb_front_plan pdb_front_policy_decide(const pdb_front_policy *p, pdb_bridge_mode mode, int64_t n, int64_t bs,
                                       int64_t cached) {
    pdb_front_plan pl = {PDB_PLAN_SKIP, NULL, cached, cached};
    int64_t bridgeable = n > 0 ? (n - 1) / bs : 0;
    if (mode == PDB_MODE_OFF) { pl.skip_reason = "off"; return pl; }
    if (bridgeable == 0) { pl.skip_reason = mode == PDB_MODE_FORCE ? "no_full_block" : "short"; return pl; }
    if (mode == PDB_MODE_AUTO && n < p->min_bridge_tokens) { pl.skip_reason = "short"; return pl; }
    if (cached >= bridgeable) { pl.skip_reason = "warm"; return pl; }
    if (mode == PDB_MODE_AUTO && (bridgeable - cached) * bs < p->min_tail) { pl.skip_reason = "warm"; return pl; }
    int64_t end = bridgeable;
    if (p->max_bridge_tokens > 0 && mode == PDB_MODE_AUTO) {
        int64_t cap = p->max_bridge_tokens / bs;
        if (end > cap) end = cap;
        if (end <= cached) { pl.skip_reason = "too_long"; return pl; }
    }
    pl.kind = PDB_PLAN_BRIDGE;
    pl.end_block = end;
    return pl;
}

int pdb_front_parse_mode(const char *s) {
    if (!s || !*s || !strcasecmp(s, "auto")) return PDB_MODE_AUTO;
    if (!strcasecmp(s, "off")) return PDB_MODE_OFF;
    if (!strcasecmp(s, "force")) return PDB_MODE_FORCE;
    return -1;
}

void pdb_front_verdict_finish(pdb_front_verdict *v, int attempted, int64_t decoder_cached) {
    v->mounted_tokens = decoder_cached;
    if (!attempted) return; /* kind/reason already "skipped ..." */
    int64_t bs = v->block_size > 0 ? v->block_size : 1, used = decoder_cached / bs;
    if (v->blocks_written == 0) {
        snprintf(v->kind, sizeof v->kind, "declined");
        if (!v->reason[0]) snprintf(v->reason, sizeof v->reason, "no_block_arrived");
    } else if (used <= v->blocks_cached_before) {
        snprintf(v->kind, sizeof v->kind, "declined");
        snprintf(v->reason, sizeof v->reason, "decoder_miss");
    } else if (used >= v->blocks_bridgeable) {
        snprintf(v->kind, sizeof v->kind, "complete");
        v->reason[0] = 0;
    } else {
        snprintf(v->kind, sizeof v->kind, "partial");
        if (!v->reason[0])
            snprintf(v->reason, sizeof v->reason, "%s",
                     v->blocks_cached_before + v->blocks_written < v->blocks_bridgeable ? "max_bridge_tokens" : "decoder_mounted_fewer");
    }
}

void pdb_front_verdict_header(const pdb_front_verdict *v, char *out, size_t n) {
    int k;
    if (!strcmp(v->kind, "partial"))
        k = snprintf(out, n, "partial %lld/%lld", (long long)v->mounted_tokens, (long long)v->prompt_tokens);
    else if (!strcmp(v->kind, "complete"))
        k = snprintf(out, n, "complete");
    else
        k = snprintf(out, n, "%s %s", v->kind, v->reason[0] ? v->reason : "unknown");
    if (k < 0 || (size_t)k >= n) return;
    snprintf(out + k, n - (size_t)k,
             "; tokens=%lld; mounted=%lld; blocks=%lld/%lld; cached_blocks=%lld; bytes=%llu; engine_ms=%.0f; "
             "transfer_ms=%.0f; write_ms=%.0f; total_ms=%.0f%s%s",
             (long long)v->prompt_tokens, (long long)v->mounted_tokens, (long long)v->blocks_written,
             (long long)v->blocks_requested, (long long)v->blocks_cached_before, (unsigned long long)v->bytes, v->engine_ms,
             v->transfer_ms, v->write_ms, v->total_ms,
             !strcmp(v->kind, "partial") && v->reason[0] ? "; reason=" : "",
             !strcmp(v->kind, "partial") && v->reason[0] ? v->reason : "");
    if (v->resumes > 0) {
        size_t k2 = strlen(out);
        if (k2 < n) snprintf(out + k2, n - k2, "; resumes=%d; spool_blocks=%lld", v->resumes, (long long)v->spool_blocks);
    }
}
