/* pdb_front_policy: whether to bridge a request, and the verdict every response carries.
 * Verdict grammar (header X-PD-Bridge and the "pd_bridge" object):
 *   complete | partial B/T | declined <reason> | skipped <reason>, then "; key=value" pairs.
 * B = prompt tokens the decoder found in its store (mounted), T = prompt tokens.
 * Invariants: a verdict is computed only from what happened (blocks verified in the store, the
 * decoder's own cached_tokens); "complete" and "partial" require the decoder to report at least
 * one bridged block as cached, so a native answer can never be labelled bridged. */
#ifndef PDB_FRONT_POLICY_H
#define PDB_FRONT_POLICY_H

#include <stddef.h>
#include <stdint.h>

typedef enum pdb_bridge_mode { PDB_MODE_AUTO = 0, PDB_MODE_OFF, PDB_MODE_FORCE } pdb_bridge_mode;

typedef struct pdb_front_policy {
    int64_t min_bridge_tokens;  /* auto: prompts shorter are served natively ("skipped short") */
    int64_t min_tail;           /* auto: bridge only when the uncached full blocks hold >= this many tokens */
    int64_t max_bridge_tokens;  /* bridge at most this many tokens (0 = no limit) */
} pdb_front_policy;

typedef enum pdb_plan_kind { PDB_PLAN_SKIP = 0, PDB_PLAN_BRIDGE } pdb_plan_kind;

typedef struct pdb_front_plan {
    pdb_plan_kind kind;
    const char *skip_reason;    /* "off", "short", "warm", "no_full_block" */
    int64_t first_block;        /* first block to request (= cached blocks) */
    int64_t end_block;          /* one past the last block to request */
} pdb_front_plan;

/* n_tokens: prompt length; block_size; cached_blocks: leading blocks already in the store.
 * Bridgeable blocks are the full blocks that leave at least one prompt token to compute:
 * (n_tokens - 1) / block_size (the decoder mounts no more than that). */
pdb_front_plan pdb_front_policy_decide(const pdb_front_policy *p, pdb_bridge_mode mode, int64_t n_tokens,
                                       int64_t block_size, int64_t cached_blocks);
/* "auto" | "off" | "force" (case-insensitive); -1 when unknown. NULL/empty = auto. */
int pdb_front_parse_mode(const char *s);

typedef struct pdb_front_verdict {
    char kind[16];              /* complete | partial | declined | skipped */
    char reason[96];            /* declined / skipped reason; partial: why it stopped ("" if none) */
    int64_t prompt_tokens, mounted_tokens;          /* mounted = decoder's cached_tokens */
    int64_t block_size, blocks_bridgeable;          /* (prompt_tokens - 1) / block_size */
    int64_t blocks_requested, blocks_written, blocks_cached_before;
    uint64_t bytes;
    int resumes;                                    /* transfers resumed from a block boundary */
    int64_t spool_blocks;                           /* of those, blocks the prefill server resent from its spool */
    double engine_ms, transfer_ms, write_ms, total_ms;
} pdb_front_verdict;

/* Finalise the verdict after the decoder answered: attempted = a bridge was tried;
 * decoder_cached = the decoder's own usage cached_tokens for this request. Rules: nothing
 * written -> declined <bridge reason>; the decoder used no bridged block -> declined
 * decoder_miss; every bridgeable block mounted -> complete; otherwise partial B/T. */
void pdb_front_verdict_finish(pdb_front_verdict *v, int bridged_attempted, int64_t decoder_cached);
/* Header value into out (always NUL-terminated). */
void pdb_front_verdict_header(const pdb_front_verdict *v, char *out, size_t n);

#endif
