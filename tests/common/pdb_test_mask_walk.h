/* pdb_test_mask_walk: the random walk the mask tests share: a synthetic vocabulary (every
 * single byte, then pieces), and one walk that picks uniformly among the tokens a mask leaves at
 * logit 0, appends their bytes and advances the mask. Header-only; include after cmocka.h.
 * Invariant: every picked token was allowed by the mask and continued it, or the test fails. */
#ifndef PDB_TEST_MASK_WALK_H
#define PDB_TEST_MASK_WALK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* xorshift64: the walks' one random sequence */
static inline uint64_t pdb_test_rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* ids 0..255: the single bytes (singles[256] holds them); ids 256..256+np-1: pieces */
static inline void pdb_test_vocab_fill(const char **bytes, size_t *lens, char *singles, const char *const *pieces, int np) {
    for (int i = 0; i < 256; i++) { singles[i] = (char)i; bytes[i] = &singles[i]; lens[i] = 1; }
    for (int i = 0; i < np; i++) { bytes[256 + i] = pieces[i]; lens[256 + i] = strlen(pieces[i]); }
}

/* the mask under test: apply sets disallowed logits to -inf and returns how many stay allowed
 * with budget tokens left after this one; advance returns nonzero if tok continues the text */
typedef int64_t (*pdb_test_mask_apply_fn)(void *mask, float *logits, int64_t V, int64_t budget);
typedef int (*pdb_test_mask_advance_fn)(void *mask, int32_t tok);

/* walk w: up to max_tokens tokens into text (length in *tl); returns how many were taken
 * (< max_tokens when the mask allowed none) */
static inline int64_t pdb_test_mask_walk(pdb_test_mask_apply_fn apply, pdb_test_mask_advance_fn advance, void *mask,
                                         const char *const *bytes, const size_t *lens, int64_t V, float *logits,
                                         int64_t max_tokens, uint64_t *x, char *text, size_t *tl, int w) {
    int64_t used = 0;
    for (; used < max_tokens; used++) {
        for (int64_t i = 0; i < V; i++) logits[i] = 0;
        int64_t allowed = apply(mask, logits, V, max_tokens - used - 1);
        if (!allowed) break;
        int64_t pick = (int64_t)(pdb_test_rng_next(x) % (uint64_t)allowed), tok = -1;
        for (int64_t i = 0; i < V; i++)
            if (logits[i] == 0 && pick-- == 0) { tok = i; break; }
        assert_true(tok >= 0 && bytes[tok]);
        memcpy(text + *tl, bytes[tok], lens[tok]);
        *tl += lens[tok];
        if (!advance(mask, (int32_t)tok))
            fail_msg("walk %d: the mask allowed token %lld, which does not continue %.*s", w, (long long)tok, (int)*tl, text);
    }
    return used;
}

#endif
