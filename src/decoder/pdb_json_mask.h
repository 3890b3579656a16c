/* pdb_json_mask: constrained decoding of one JSON object (OpenAI's response_format json_object):
 * a byte-level pushdown recognizer of JSON text whose top-level value is an object, and the mask
 * that, before each sampling step, leaves only the tokens whose bytes extend the text so far
 * toward a complete object within the tokens left (the text starts with its '{'). Invariants: a
 * state only ever holds a prefix of some valid JSON object text (RFC 8259, UTF-8), restricted
 * so that every JSON parser takes it: no \uXXXX escapes (no lone surrogates, no NUL), integer
 * parts of at most 15 digits and exponents of at most 2 (every number a finite double, every
 * integer an int64); pdb_json_state_dist is the fewest bytes that complete it, and a mask with
 * budget B allows only tokens after which at most B bytes are still needed, so with single-byte
 * tokens for the ASCII characters (byte-level BPE vocabularies have them) a choice of
 * max_tokens >= 2 always ends with a complete object. The vocabulary is immutable after init;
 * states are small values (copied per candidate token). */
#ifndef PDB_JSON_MASK_H
#define PDB_JSON_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"
#include "pdb_tokenizer.h"

#define PDB_JSON_MAX_DEPTH 256

typedef struct pdb_json_state {
    uint8_t lex;          /* where the text is (pdb_json_mask.c: J_*) */
    uint8_t num;          /* inside a number: its part */
    uint8_t ndig;         /* digits of its integer part, or of its exponent */
    uint8_t lit, lit_pos; /* inside true/false/null: which, bytes matched */
    uint8_t key;          /* the string being read is an object key */
    uint8_t esc;          /* after a backslash in a string */
    uint8_t u8_need;      /* UTF-8 continuation bytes still due in a string */
    uint8_t u8_lo, u8_hi; /* the range of the next continuation byte */
    uint16_t depth;       /* open containers */
    uint64_t stack[PDB_JSON_MAX_DEPTH / 64]; /* bit d: container d is an object (1) or an array (0) */
} pdb_json_state;

typedef struct pdb_json_vocab pdb_json_vocab;

/* The bytes of every token id 0 .. n_vocab-1 (special tokens and ids without bytes are never
 * allowed). */
pdb_status pdb_json_vocab_from_tokenizer(const pdb_tokenizer *tok, int64_t n_vocab, pdb_json_vocab **out);
/* The same from explicit byte strings (bytes[i] of lens[i]; NULL = never allowed): tests. */
pdb_status pdb_json_vocab_from_bytes(const char *const *bytes, const size_t *lens, int64_t n_vocab, pdb_json_vocab **out);
void pdb_json_vocab_free(pdb_json_vocab *v);
/* Token id's bytes (NULL when it may never be chosen: a special token, an id without bytes or
 * outside the vocabulary): for other masks over the same vocabulary (pdb_tool_mask). */
const char *pdb_json_vocab_token(const pdb_json_vocab *v, int64_t id, size_t *len);

void pdb_json_state_init(pdb_json_state *st);
/* Feed n bytes: 1 when the text is still a prefix of a valid JSON object (st advanced), 0 when
 * not (st undefined then: feed a copy). */
int pdb_json_state_feed(pdb_json_state *st, const char *b, size_t n);
/* 1 when the object is complete (only whitespace may follow). */
int pdb_json_state_complete(const pdb_json_state *st);
/* The fewest bytes that complete the object from st. */
int64_t pdb_json_state_dist(const pdb_json_state *st);

/* Set logits [n_vocab] of every token that may not come next to -inf: its bytes must keep the
 * text a valid prefix and leave at most `budget` bytes to complete it (budget: the tokens left
 * after this one). Returns how many tokens remain allowed (0 when the object is complete: the
 * choice ends). */
int64_t pdb_json_mask_apply(const pdb_json_vocab *v, const pdb_json_state *st, float *logits, int64_t n_vocab, int64_t budget);
/* Advance st by token tok's bytes (a token the mask allowed): 1, or 0 when they are not a valid
 * continuation (a token the mask would have refused; st is undefined then). */
int pdb_json_mask_advance(const pdb_json_vocab *v, pdb_json_state *st, int32_t tok);

#endif
