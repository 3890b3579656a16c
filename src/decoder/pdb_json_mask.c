/* pdb_json_mask: the JSON object recognizer and the vocabulary mask (see pdb_json_mask.h).
 * State machine, one byte at a time: J_START (only '{'), J_KEY_OR_END (after '{'),
 * J_KEY (after ',' in an object), J_COLON (after a key), J_VALUE (after ':' or ',' in an array),
 * J_VALUE_OR_END (after '['), J_AFTER (after a value in a container: ',' or its closer),
 * J_STRING, J_NUMBER, J_LITERAL, J_DONE (the top object closed: whitespace only). A number ends
 * at the first byte that cannot continue it, which is then read in J_AFTER. Invariant: every
 * transition keeps the text a prefix of a valid object, and dist() is exact for the grammar
 * produced here (the shortest completion: close the string, finish the number or literal, give
 * a pending key ":0" or value "0", then one closer per open container). */
#include "pdb_json_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { J_START, J_KEY_OR_END, J_KEY, J_COLON, J_VALUE, J_VALUE_OR_END, J_AFTER, J_STRING, J_NUMBER, J_LITERAL, J_DONE };
/* number parts: after '-', after a leading 0, in the integer digits, after '.', in the fraction,
 * after 'e', after the exponent's sign, in the exponent digits */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { PDB_JSON_MAX_INT_DIGITS = 15, PDB_JSON_MAX_EXP_DIGITS = 2 };
static const char *const LITERALS[3] = {"true", "false", "null"};

struct pdb_json_vocab {
    int64_t n;
    char **bytes;    /* [n] NULL = never allowed */
    uint32_t *len;   /* [n] */
    uint8_t *plain;  /* [n] 1: complete UTF-8 without '"', '\\' or control bytes (inside a string it changes nothing) */
    uint32_t *skip;  /* [n] leading whitespace bytes (outside strings and numbers they change nothing) */
};

static int j_top_is_object(const pdb_json_state *st) {
    int d = st->depth - 1;
    return (st->stack[d / 64] >> (d % 64)) & 1;
}

static int j_push(pdb_json_state *st, int object) {
    if (st->depth >= PDB_JSON_MAX_DEPTH) return 0;
    int d = st->depth++;
    if (object) st->stack[d / 64] |= (uint64_t)1 << (d % 64);
    else st->stack[d / 64] &= ~((uint64_t)1 << (d % 64));
    return 1;
}

/* A container closed: the value it was is complete. */
static void j_pop(pdb_json_state *st) {
    st->depth--;
    st->lex = st->depth ? J_AFTER : J_DONE;
}

static int j_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The start of a value at byte c (in J_VALUE / J_VALUE_OR_END). */
static int j_value_start(pdb_json_state *st, unsigned c) {
    switch (c) {
    case '{': if (!j_push(st, 1)) return 0; st->lex = J_KEY_OR_END; return 1;
    case '[': if (!j_push(st, 0)) return 0; st->lex = J_VALUE_OR_END; return 1;
    case '"': st->lex = J_STRING; st->key = 0; st->esc = 0; st->u8_need = 0; return 1;
    case '-': st->lex = J_NUMBER; st->num = N_MINUS; st->ndig = 0; return 1;
    case '0': st->lex = J_NUMBER; st->num = N_ZERO; st->ndig = 1; return 1;
    case 't': case 'f': case 'n':
        st->lex = J_LITERAL;
        st->lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
        st->lit_pos = 1;
        return 1;
    default:
        if (c >= '1' && c <= '9') { st->lex = J_NUMBER; st->num = N_INT; st->ndig = 1; return 1; }
        return 0;
    }
}

/* A byte inside a string (not an escape's). */
static int j_string_byte(pdb_json_state *st, unsigned c) {
    if (st->u8_need) {
        if (c < st->u8_lo || c > st->u8_hi) return 0;
        st->u8_need--;
        st->u8_lo = 0x80;
        st->u8_hi = 0xBF;
        return 1;
    }
    if (st->esc) {
        if (!strchr("\"\\/bfnrt", (int)c) || !c) return 0; /* \u is never produced (see the header) */
        st->esc = 0;
        return 1;
    }
    if (c == '"') {
        st->lex = st->key ? J_COLON : J_AFTER;
        return 1;
    }
    if (c == '\\') { st->esc = 1; return 1; }
    if (c < 0x20) return 0;
    if (c < 0x80) return 1;
    st->u8_lo = 0x80;
    st->u8_hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) st->u8_need = 1;
    else if (c == 0xE0) { st->u8_need = 2; st->u8_lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) st->u8_need = 2;
    else if (c == 0xED) { st->u8_need = 2; st->u8_hi = 0x9F; }
    else if (c == 0xF0) { st->u8_need = 3; st->u8_lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) st->u8_need = 3;
    else if (c == 0xF4) { st->u8_need = 3; st->u8_hi = 0x8F; }
    else return 0;
    return 1;
}

static int j_feed_byte(pdb_json_state *st, unsigned c) {
    switch (st->lex) {
    case J_START: /* the answer starts with its '{' (no leading whitespace to spend tokens on) */
        if (c != '{') return 0;
        st->lex = J_KEY_OR_END;
        return j_push(st, 1);
    case J_DONE: return j_ws(c);
    case J_KEY_OR_END:
    case J_KEY:
        if (j_ws(c)) return 1;
        if (c == '}' && st->lex == J_KEY_OR_END) { j_pop(st); return 1; }
        if (c != '"') return 0;
        st->lex = J_STRING;
        st->key = 1;
        st->esc = 0;
        st->u8_need = 0;
        return 1;
    case J_COLON:
        if (j_ws(c)) return 1;
        if (c != ':') return 0;
        st->lex = J_VALUE;
        return 1;
    case J_VALUE:
    case J_VALUE_OR_END:
        if (j_ws(c)) return 1;
        if (c == ']' && st->lex == J_VALUE_OR_END) { j_pop(st); return 1; }
        return j_value_start(st, c);
    case J_AFTER:
        if (j_ws(c)) return 1;
        if (c == ',') { st->lex = j_top_is_object(st) ? J_KEY : J_VALUE; return 1; }
        if (c == (j_top_is_object(st) ? '}' : ']')) { j_pop(st); return 1; }
        return 0;
    case J_STRING: return j_string_byte(st, c);
    case J_LITERAL: {
        const char *w = LITERALS[st->lit];
        if ((unsigned char)w[st->lit_pos] != c) return 0;
        if (!w[++st->lit_pos]) st->lex = J_AFTER;
        return 1;
    }
    case J_NUMBER: {
        int digit = c >= '0' && c <= '9';
        switch (st->num) {
        case N_MINUS:
            if (c == '0') { st->num = N_ZERO; return 1; }
            if (digit) { st->num = N_INT; st->ndig = 1; return 1; }
            return 0;
        case N_ZERO:
        case N_INT:
            if (digit && st->num == N_INT) return ++st->ndig <= PDB_JSON_MAX_INT_DIGITS;
            if (c == '.') { st->num = N_DOT; return 1; }
            if (c == 'e' || c == 'E') { st->num = N_E; return 1; }
            break; /* the number ends here */
        case N_DOT:
            if (digit) { st->num = N_FRAC; return 1; }
            return 0;
        case N_FRAC:
            if (digit) return 1;
            if (c == 'e' || c == 'E') { st->num = N_E; return 1; }
            break;
        case N_E:
            if (c == '+' || c == '-') { st->num = N_ESIGN; return 1; }
            if (digit) { st->num = N_EXP; st->ndig = 1; return 1; }
            return 0;
        case N_ESIGN:
            if (digit) { st->num = N_EXP; st->ndig = 1; return 1; }
            return 0;
        case N_EXP:
            if (digit) return ++st->ndig <= PDB_JSON_MAX_EXP_DIGITS;
            break;
        default: return 0;
        }
        st->lex = J_AFTER; /* the byte after a complete number is read as what follows it */
        return j_feed_byte(st, c);
    }
    default: return 0;
    }
}

void pdb_json_state_init(pdb_json_state *st) {
    memset(st, 0, sizeof *st);
    st->lex = J_START;
}

int pdb_json_state_feed(pdb_json_state *st, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!j_feed_byte(st, (unsigned char)b[i])) return 0;
    return 1;
}

int pdb_json_state_complete(const pdb_json_state *st) { return st->lex == J_DONE; }

int64_t pdb_json_state_dist(const pdb_json_state *st) {
    int64_t d = st->depth;
    switch (st->lex) {
    case J_START: return 2;                 /* {} */
    case J_DONE: return 0;
    case J_KEY: return d + 4;               /* "":0 */
    case J_COLON: return d + 2;             /* :0 */
    case J_VALUE: return d + 1;             /* 0 */
    case J_STRING: return d + 1 + st->esc + st->u8_need + (st->key ? 2 : 0);
    case J_NUMBER: return d + (st->num == N_MINUS || st->num == N_DOT || st->num == N_E || st->num == N_ESIGN);
    case J_LITERAL: return d + (int64_t)strlen(LITERALS[st->lit]) - st->lit_pos;
    default: return d;                      /* J_KEY_OR_END, J_VALUE_OR_END, J_AFTER: the closers */
    }
}

static pdb_status j_vocab_alloc(int64_t n, pdb_json_vocab **out) {
    *out = NULL;
    pdb_json_vocab *v = calloc(1, sizeof *v);
    if (!v) return pdb_err_set(PDB_NOMEM, "json mask vocabulary");
    v->n = n;
    v->bytes = calloc((size_t)(n ? n : 1), sizeof *v->bytes);
    v->len = calloc((size_t)(n ? n : 1), sizeof *v->len);
    v->plain = calloc((size_t)(n ? n : 1), 1);
    v->skip = calloc((size_t)(n ? n : 1), sizeof *v->skip);
    if (!v->bytes || !v->len || !v->plain || !v->skip) { pdb_json_vocab_free(v); return pdb_err_set(PDB_NOMEM, "json mask vocabulary of %lld tokens", (long long)n); }
    *out = v;
    return PDB_OK;
}

static pdb_status j_vocab_set(pdb_json_vocab *v, int64_t i, const char *b, size_t len) {
    if (!b || !len || len > 0xFFFF) return PDB_OK;
    v->bytes[i] = malloc(len);
    if (!v->bytes[i]) return pdb_err_set(PDB_NOMEM, "json mask vocabulary");
    memcpy(v->bytes[i], b, len);
    v->len[i] = (uint32_t)len;
    /* plain: what a string in its base state (no escape, no character pending) reads back to the
     * same state, byte for byte checked by the recognizer itself */
    pdb_json_state t;
    memset(&t, 0, sizeof t);
    t.lex = J_STRING;
    t.depth = 1;
    int plain = 1;
    for (size_t k = 0; k < len && plain; k++) plain = b[k] != '"' && b[k] != '\\' && j_string_byte(&t, (unsigned char)b[k]);
    v->plain[i] = (uint8_t)(plain && !t.u8_need && !t.esc);
    uint32_t k = 0;
    while (k < len && j_ws((unsigned char)b[k])) k++;
    v->skip[i] = k;
    return PDB_OK;
}

pdb_status pdb_json_vocab_from_tokenizer(const pdb_tokenizer *tok, int64_t n_vocab, pdb_json_vocab **out) {
    PDB_TRY(j_vocab_alloc(n_vocab, out));
    for (int64_t i = 0; i < n_vocab; i++) {
        if (i >= pdb_tokenizer_vocab_size(tok) || pdb_tokenizer_is_special(tok, (int32_t)i)) continue;
        size_t len = 0;
        const char *b = pdb_tokenizer_token_bytes(tok, (int32_t)i, &len);
        pdb_status st = j_vocab_set(*out, i, b, len);
        if (st) { pdb_json_vocab_free(*out); *out = NULL; return st; }
    }
    return PDB_OK;
}

pdb_status pdb_json_vocab_from_bytes(const char *const *bytes, const size_t *lens, int64_t n_vocab, pdb_json_vocab **out) {
    PDB_TRY(j_vocab_alloc(n_vocab, out));
    for (int64_t i = 0; i < n_vocab; i++) {
        pdb_status st = j_vocab_set(*out, i, bytes[i], lens[i]);
        if (st) { pdb_json_vocab_free(*out); *out = NULL; return st; }
    }
    return PDB_OK;
}

const char *pdb_json_vocab_token(const pdb_json_vocab *v, int64_t id, size_t *len) {
    if (id < 0 || id >= v->n || !v->bytes[id]) return NULL;
    *len = v->len[id];
    return v->bytes[id];
}

void pdb_json_vocab_free(pdb_json_vocab *v) {
    if (!v) return;
    for (int64_t i = 0; v->bytes && i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->plain);
    free(v->skip);
    free(v);
}

int64_t pdb_json_mask_apply(const pdb_json_vocab *v, const pdb_json_state *st, float *logits, int64_t n_vocab, int64_t budget) {
    if (pdb_json_state_complete(st)) return 0;
    /* which first bytes can follow at all: most tokens fail on their first byte */
    uint8_t first_ok[256];
    for (int c = 0; c < 256; c++) {
        pdb_json_state t = *st;
        first_ok[c] = (uint8_t)j_feed_byte(&t, (unsigned)c);
    }
    /* in a string's base state a plain token leaves the state as it is: allowed iff the state's
     * distance fits the budget, without reading its bytes (most steps of most answers) */
    int base_string = st->lex == J_STRING && !st->esc && !st->u8_need, same_ok = pdb_json_state_dist(st) <= budget;
    /* between tokens of the grammar (not in a string, a number or a literal; not before the
     * first '{', which must come first) whitespace changes
     * nothing: a token is judged by its first other byte, and one of whitespace only like a
     * plain token in a string (most of a vocabulary's tokens start with a space) */
    int ws_noop = st->lex != J_STRING && st->lex != J_NUMBER && st->lex != J_LITERAL && st->lex != J_START;
    int64_t allowed = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        int ok = 0;
        if (i >= v->n || !v->bytes[i]) {
            ok = 0;
        } else if (base_string && v->plain[i]) {
            ok = same_ok;
        } else if (ws_noop) {
            uint32_t k = v->skip[i];
            if (k == v->len[i]) ok = same_ok;
            else if (first_ok[(unsigned char)v->bytes[i][k]]) {
                pdb_json_state t = *st;
                ok = pdb_json_state_feed(&t, v->bytes[i] + k, v->len[i] - k) && pdb_json_state_dist(&t) <= budget;
            }
        } else if (first_ok[(unsigned char)v->bytes[i][0]]) {
            pdb_json_state t = *st;
            ok = pdb_json_state_feed(&t, v->bytes[i], v->len[i]) && pdb_json_state_dist(&t) <= budget;
        }
        if (ok) allowed++;
        else logits[i] = -INFINITY;
    }
    return allowed;
}

int pdb_json_mask_advance(const pdb_json_vocab *v, pdb_json_state *st, int32_t tok) {
    return tok >= 0 && tok < v->n && v->bytes[tok] && pdb_json_state_feed(st, v->bytes[tok], v->len[tok]);
}
