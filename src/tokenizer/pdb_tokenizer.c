/* pdb_tokenizer: byte-level BPE from a HF tokenizer.json (jansson to load, PCRE2 JIT to
 * pre-tokenize). Invariants: the pdb_tokenizer is never written after load, so encode/decode
 * are thread-safe (all scratch state lives in a per-call pdb_tok_enc); encoding = split on
 * added tokens (leftmost-longest; non-normalized tokens first, then normalized ones on the
 * remaining gaps, as HF does) -> split each gap into valid UTF-8 runs and invalid bytes (an
 * invalid byte is its own word) -> apply the Split regexes in order, each on its piece alone
 * -> BPE by merge rank (heap on (rank, position)) over the bytes' single-byte tokens. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pdb_tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#define PDB_TOK_MAX_SPLITS 8
#define PDB_TOK_MAX_ID ((int64_t)1 << 24)   /* ids must be below this */
#define PDB_TOK_MAX_ARENA ((size_t)1 << 31) /* token strings + bytes, all ids */
#define PDB_TOK_JIT_STACK_MAX (8u << 20)

/* GPT-2's pre-tokenizer regex, what ByteLevel(use_regex=true) splits with. */
static const char pdb_tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum { PDB_TOK_PRESENT = 1, PDB_TOK_ADDED = 2, PDB_TOK_SPECIAL = 4 };

/* Added-token trie: first-child/next-sibling lists; node 0 is the root. */
typedef struct {
    int32_t child, sibling, id; /* id: token ending here, or -1 */
    uint8_t byte;
} pdb_tok_node;

typedef struct {
    pdb_tok_node *nodes;
    int32_t n, cap;
    int32_t root_child[256]; /* child of the root for each first byte, -1 if none */
} pdb_tok_trie;

typedef struct {
    uint32_t key_off, key_len;
    int32_t id;
} pdb_tok_slot;

struct pdb_tokenizer {
    char *path;
    int32_t n_ids; /* max id + 1 */
    /* per id, [n_ids]: token string (as in the json) and decoded bytes, offsets into arena */
    uint32_t *str_off, *str_len, *bytes_off, *bytes_len;
    uint8_t *flags; /* PDB_TOK_* */
    char *arena;
    size_t arena_len, arena_cap;
    /* token string -> id, open addressing (id -1: empty); [str_mask + 1]. A slot keeps its own
     * key (arena offset) because an added token may take over an id whose vocab string differs */
    pdb_tok_slot *str_slots;
    uint32_t str_mask;
    /* (left id, right id) -> (rank, new id); key has bit 63 set when used; [merge_mask + 1] */
    uint64_t *merge_key;
    uint32_t *merge_rank;
    int32_t *merge_new;
    uint32_t merge_mask;
    int32_t byte_id[256];     /* token of the single byte b, -1 if the vocab lacks it */
    pdb_tok_trie trie[2];     /* [0] normalized=false added tokens, [1] normalized=true */
    int n_splits;
    pcre2_code *split[PDB_TOK_MAX_SPLITS];
    int32_t bos_id, eos_id;
};

/* ---- byte-level alphabet (GPT-2 bytes_to_unicode) ------------------------------------- */

static void pdb_tok_build_bytemap(uint32_t byte_cp[256], int16_t cp_byte[512]) {
    for (int i = 0; i < 512; i++) cp_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + extra++);
        cp_byte[byte_cp[b]] = (int16_t)b;
    }
}

/* Length of the valid (strict, RFC 3629) UTF-8 character at s, or 0 when invalid. */
static size_t pdb_tok_utf8_len(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] > 0x9F) return 0; /* surrogate */
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] > 0x8F) return 0; /* > U+10FFFF */
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

static size_t pdb_tok_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3; /* the byte alphabet never goes past U+FFFF */
}

/* ---- small hashes ----------------------------------------------------------------------- */

static uint64_t pdb_tok_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ULL; }
    return h ^ (h >> 29);
}

static uint64_t pdb_tok_hash_u64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static uint32_t pdb_tok_pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n * 2) c <<= 1;
    return c;
}

/* Slot of token string s in the string table: its slot if present, else the empty slot. */
static uint32_t pdb_tok_str_slot(const pdb_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)pdb_tok_hash_bytes(s, n) & t->str_mask;
    for (;;) {
        const pdb_tok_slot *sl = &t->str_slots[i];
        if (sl->id < 0) return i;
        if (sl->key_len == n && !memcmp(t->arena + sl->key_off, s, n)) return i;
        i = (i + 1) & t->str_mask;
    }
}

static bool pdb_tok_merge_find(const pdb_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t key = (1ULL << 63) | ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)pdb_tok_hash_u64(key) & t->merge_mask;
    for (;;) {
        uint64_t k = t->merge_key[i];
        if (k == key) { *rank = t->merge_rank[i]; *new_id = t->merge_new[i]; return true; }
        if (k == 0) return false;
        i = (i + 1) & t->merge_mask;
    }
}

static void pdb_tok_merge_put(pdb_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    uint64_t key = (1ULL << 63) | ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)pdb_tok_hash_u64(key) & t->merge_mask;
    while (t->merge_key[i] != 0 && t->merge_key[i] != key) i = (i + 1) & t->merge_mask;
    /* a repeated pair keeps the later rank, as HF's HashMap collect does */
    t->merge_key[i] = key;
    t->merge_rank[i] = rank;
    t->merge_new[i] = new_id;
}

/* ---- arena ------------------------------------------------------------------------------ */

static pdb_status pdb_tok_arena_put(pdb_tokenizer *t, const char *s, size_t n, uint32_t *off) {
    if (t->arena_len + n + 1 > PDB_TOK_MAX_ARENA)
        return pdb_err_set(PDB_TOO_LARGE, "%s: token strings exceed %zu bytes", t->path, PDB_TOK_MAX_ARENA);
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap * 2 : (1u << 20);
        while (cap < t->arena_len + n + 1) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return pdb_err_set(PDB_NOMEM, "%s: out of memory for token strings", t->path);
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    *off = (uint32_t)t->arena_len;
    t->arena_len += n + 1;
    return PDB_OK;
}

/* Bytes a token string decodes to (HF ByteLevel decoder): each char through the byte
 * alphabet, or the string's own UTF-8 when any char is outside the alphabet. */
static pdb_status pdb_tok_set_token(pdb_tokenizer *t, int32_t id, const char *s, size_t n, bool added,
                                    const int16_t cp_byte[512]) {
    PDB_TRY(pdb_tok_arena_put(t, s, n, &t->str_off[id]));
    t->str_len[id] = (uint32_t)n;
    char stackbuf[256];
    char *buf = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!buf) return pdb_err_set(PDB_NOMEM, "%s: out of memory", t->path);
    size_t m = 0;
    bool mapped = !added;
    for (size_t i = 0; mapped && i < n;) {
        uint32_t cp;
        size_t l = pdb_tok_utf8_len((const uint8_t *)s + i, n - i, &cp);
        if (!l || cp >= 512 || cp_byte[cp] < 0) { mapped = false; break; }
        buf[m++] = (char)cp_byte[cp];
        i += l;
    }
    pdb_status st = mapped ? pdb_tok_arena_put(t, buf, m, &t->bytes_off[id])
                           : pdb_tok_arena_put(t, s, n, &t->bytes_off[id]);
    t->bytes_len[id] = mapped ? (uint32_t)m : (uint32_t)n;
    if (buf != stackbuf) free(buf);
    if (st != PDB_OK) return st;
    t->flags[id] = PDB_TOK_PRESENT | (added ? PDB_TOK_ADDED : 0);
    return PDB_OK;
}

/* ---- added-token trie ------------------------------------------------------------------- */

static pdb_status pdb_tok_trie_node_new(pdb_tok_trie *tr, uint8_t byte, int32_t *out) {
    if (tr->n == tr->cap) {
        int32_t cap = tr->cap ? tr->cap * 2 : 256;
        pdb_tok_node *n = realloc(tr->nodes, (size_t)cap * sizeof *n);
        if (!n) return pdb_err_set(PDB_NOMEM, "out of memory for the added-token trie");
        tr->nodes = n;
        tr->cap = cap;
    }
    tr->nodes[tr->n] = (pdb_tok_node){.child = -1, .sibling = -1, .id = -1, .byte = byte};
    *out = tr->n++;
    return PDB_OK;
}

static pdb_status pdb_tok_trie_insert(pdb_tok_trie *tr, const uint8_t *s, size_t n, int32_t id) {
    if (tr->n == 0) {
        int32_t root;
        PDB_TRY(pdb_tok_trie_node_new(tr, 0, &root));
        for (int i = 0; i < 256; i++) tr->root_child[i] = -1;
    }
    int32_t cur = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != s[i]) c = tr->nodes[c].sibling;
        if (c < 0) {
            PDB_TRY(pdb_tok_trie_node_new(tr, s[i], &c));
            tr->nodes[c].sibling = tr->nodes[cur].child;
            tr->nodes[cur].child = c;
            if (cur == 0) tr->root_child[s[i]] = c;
        }
        cur = c;
    }
    tr->nodes[cur].id = id; /* a repeated content keeps the later id */
    return PDB_OK;
}

/* Longest added token starting at s[0..n): its length (0 if none) and id. */
static size_t pdb_tok_trie_match(const pdb_tok_trie *tr, const uint8_t *s, size_t n, int32_t *id) {
    int32_t cur = tr->root_child[s[0]];
    size_t best = 0;
    for (size_t i = 1; cur >= 0; i++) {
        if (tr->nodes[cur].id >= 0) { best = i; *id = tr->nodes[cur].id; }
        if (i == n) break;
        int32_t c = tr->nodes[cur].child;
        while (c >= 0 && tr->nodes[c].byte != s[i]) c = tr->nodes[c].sibling;
        cur = c;
    }
    return best;
}

/* ---- loading ---------------------------------------------------------------------------- */

static pdb_status pdb_tok_read_json(const char *path, json_t **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return pdb_err_set(PDB_IO, "%s: cannot open: %s", path, strerror(errno));
    json_error_t err;
    json_t *j = json_loadf(f, 0, &err);
    fclose(f);
    if (!j)
        return pdb_err_set(PDB_CORRUPT, "%s: invalid JSON at line %d column %d: %s", path, err.line,
                           err.column, err.text);
    *out = j;
    return PDB_OK;
}

static bool pdb_tok_json_true(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && json_is_true(v);
}

/* Unicode White_Space, what Oniguruma's \s (HF's regex engine) matches. PCRE2's \s under UCP
 * also matches U+180E MONGOLIAN VOWEL SEPARATOR (White_Space until Unicode 6.3), which changes
 * how "a \u180e b" splits; so \s and \S are spelled out with this set before compiling. */
#define PDB_TOK_WS "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Copy pattern p[0..n) to a malloc'd string with \s -> [WS] and \S -> [^WS] outside character
 * classes, \s -> WS inside them (\S inside a class is kept: no class subtraction in PCRE2). */
static pdb_status pdb_tok_rewrite_regex(const char *p, size_t n, char **out, size_t *out_n) {
    static const char ws[] = PDB_TOK_WS;
    size_t cap = n * (sizeof ws + 3) + 1, o = 0;
    char *r = malloc(cap);
    if (!r) return pdb_err_set(PDB_NOMEM, "out of memory for a regex");
    bool in_class = false;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 's' || (d == 'S' && !in_class)) {
                if (!in_class) r[o++] = '[';
                if (d == 'S') r[o++] = '^';
                memcpy(r + o, ws, sizeof ws - 1);
                o += sizeof ws - 1;
                if (!in_class) r[o++] = ']';
            } else {
                r[o++] = c;
                r[o++] = d;
            }
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            r[o++] = p[i++];
            if (i < n && p[i] == '^') r[o++] = p[i++];
            if (i < n && p[i] == ']') r[o++] = p[i++]; /* a leading ] is literal */
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:posix:] */
            size_t end = i + 2;
            while (end + 1 < n && !(p[end] == ':' && p[end + 1] == ']')) end++;
            if (end + 1 < n) {
                memcpy(r + o, p + i, end + 2 - i);
                o += end + 2 - i;
                i = end + 2;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        r[o++] = p[i++];
    }
    r[o] = 0;
    *out = r;
    *out_n = o;
    return PDB_OK;
}

/* "Regex"/"String" pattern of a Split -> compiled PCRE2 (UTF + UCP, JIT when available). */
static pdb_status pdb_tok_compile(pdb_tokenizer *t, const char *field, const char *pat, size_t n, bool literal) {
    if (t->n_splits == PDB_TOK_MAX_SPLITS)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer splits", t->path, field,
                           PDB_TOK_MAX_SPLITS);
    int errcode;
    PCRE2_SIZE erroff;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    char *rw = NULL;
    size_t rn = n;
    if (!literal) PDB_TRY(pdb_tok_rewrite_regex(pat, n, &rw, &rn));
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)(rw ? rw : pat), rn, opts, &errcode, &erroff, NULL);
    free(rw);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return pdb_err_set(PDB_CORRUPT, "%s: %s: regex does not compile at offset %zu: %s", t->path, field,
                           (size_t)erroff, (const char *)msg);
    }
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    t->split[t->n_splits++] = code;
    return PDB_OK;
}

static pdb_status pdb_tok_parse_bytelevel(pdb_tokenizer *t, json_t *pt, const char *field, bool *seen) {
    if (pdb_tok_json_true(pt, "add_prefix_space"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: %s.add_prefix_space=true is not supported", t->path, field);
    json_t *ur = json_object_get(pt, "use_regex");
    if (!ur || json_is_true(ur)) PDB_TRY(pdb_tok_compile(t, field, pdb_tok_gpt2_regex, sizeof pdb_tok_gpt2_regex - 1, false));
    *seen = true;
    return PDB_OK;
}

static pdb_status pdb_tok_parse_split(pdb_tokenizer *t, json_t *pt, const char *field) {
    json_t *beh = json_object_get(pt, "behavior");
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: %s.behavior: only \"Isolated\" is supported", t->path, field);
    if (pdb_tok_json_true(pt, "invert"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: %s.invert=true is not supported", t->path, field);
    json_t *pat = json_object_get(pt, "pattern");
    json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
    if (json_is_string(re)) return pdb_tok_compile(t, field, json_string_value(re), json_string_length(re), false);
    if (json_is_string(lit)) return pdb_tok_compile(t, field, json_string_value(lit), json_string_length(lit), true);
    return pdb_err_set(PDB_CORRUPT, "%s: %s.pattern: expected {\"Regex\": str} or {\"String\": str}", t->path, field);
}

static pdb_status pdb_tok_parse_pretokenizer(pdb_tokenizer *t, json_t *root) {
    json_t *pt = json_object_get(root, "pre_tokenizer");
    const char *type = json_string_value(json_object_get(pt, "type"));
    bool bytelevel = false;
    if (!type)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: pre_tokenizer: missing or untyped; only byte-level BPE is supported",
                           t->path);
    if (!strcmp(type, "ByteLevel")) {
        PDB_TRY(pdb_tok_parse_bytelevel(t, pt, "pre_tokenizer", &bytelevel));
    } else if (!strcmp(type, "Sequence")) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        if (!json_is_array(arr)) return pdb_err_set(PDB_CORRUPT, "%s: pre_tokenizer.pretokenizers: expected an array", t->path);
        for (size_t i = 0; i < json_array_size(arr); i++) {
            json_t *e = json_array_get(arr, i);
            char field[64];
            snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%zu]", i);
            const char *et = json_string_value(json_object_get(e, "type"));
            if (bytelevel)
                return pdb_err_set(PDB_UNSUPPORTED, "%s: %s: nothing may follow ByteLevel", t->path, field);
            if (et && !strcmp(et, "Split")) PDB_TRY(pdb_tok_parse_split(t, e, field));
            else if (et && !strcmp(et, "ByteLevel")) PDB_TRY(pdb_tok_parse_bytelevel(t, e, field, &bytelevel));
            else return pdb_err_set(PDB_UNSUPPORTED, "%s: %s.type \"%s\" is not supported (Split, ByteLevel)", t->path,
                                    field, et ? et : "(none)");
        }
    } else {
        return pdb_err_set(PDB_UNSUPPORTED, "%s: pre_tokenizer.type \"%s\" is not supported (Sequence, ByteLevel)", t->path,
                           type);
    }
    if (!bytelevel)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: pre_tokenizer: no ByteLevel step; only byte-level BPE is supported", t->path);
    return PDB_OK;
}

static pdb_status pdb_tok_check_pipeline(pdb_tokenizer *t, json_t *root, json_t *model) {
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        const char *type = json_string_value(json_object_get(norm, "type"));
        json_t *list = json_object_get(norm, "normalizers");
        if (!type || strcmp(type, "Sequence") || json_array_size(list) != 0)
            return pdb_err_set(PDB_UNSUPPORTED, "%s: normalizer: only none or an empty Sequence is supported", t->path);
    }
    const char *dec = json_string_value(json_object_get(json_object_get(root, "decoder"), "type"));
    if (!dec || strcmp(dec, "ByteLevel"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: decoder.type: only ByteLevel is supported", t->path);
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (mt && strcmp(mt, "BPE"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: model.type \"%s\": only BPE is supported", t->path, mt);
    json_t *v;
    if ((v = json_object_get(model, "dropout")) && !json_is_null(v) && json_number_value(v) != 0.0)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: model.dropout is not supported", t->path);
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++)
        if ((v = json_object_get(model, keys[i])) && json_is_string(v) && json_string_length(v))
            return pdb_err_set(PDB_UNSUPPORTED, "%s: model.%s is not supported", t->path, keys[i]);
    if (pdb_tok_json_true(model, "byte_fallback") || pdb_tok_json_true(model, "ignore_merges"))
        return pdb_err_set(PDB_UNSUPPORTED, "%s: model.byte_fallback / model.ignore_merges are not supported", t->path);
    return PDB_OK;
}

static pdb_status pdb_tok_parse_merges(pdb_tokenizer *t, json_t *merges) {
    size_t n = json_array_size(merges);
    t->merge_mask = pdb_tok_pow2_at_least(n) - 1;
    t->merge_key = calloc((size_t)t->merge_mask + 1, sizeof *t->merge_key);
    t->merge_rank = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merge_rank);
    t->merge_new = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merge_new);
    if (!t->merge_key || !t->merge_rank || !t->merge_new)
        return pdb_err_set(PDB_NOMEM, "%s: out of memory for %zu merges", t->path, n);
    char stackbuf[512];
    for (size_t r = 0; r < n; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == a || !sp[1])
                return pdb_err_set(PDB_CORRUPT, "%s: model.merges[%zu]: \"%s\" is not \"left right\"", t->path, r, a);
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            return pdb_err_set(PDB_CORRUPT, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", t->path, r);
        }
        int32_t ia = t->str_slots[pdb_tok_str_slot(t, a, la)].id;
        int32_t ib = t->str_slots[pdb_tok_str_slot(t, b, lb)].id;
        if (ia < 0 || ib < 0)
            return pdb_err_set(PDB_CORRUPT, "%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", t->path, r,
                               (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
        char *cat = la + lb <= sizeof stackbuf ? stackbuf : malloc(la + lb);
        if (!cat) return pdb_err_set(PDB_NOMEM, "%s: out of memory", t->path);
        memcpy(cat, a, la);
        memcpy(cat + la, b, lb);
        int32_t inew = t->str_slots[pdb_tok_str_slot(t, cat, la + lb)].id;
        if (inew < 0) {
            pdb_err_set(PDB_CORRUPT, "%s: model.merges[%zu]: merged token \"%.*s\" is not in model.vocab", t->path, r,
                        (int)(la + lb), cat);
            if (cat != stackbuf) free(cat);
            return PDB_CORRUPT;
        }
        if (cat != stackbuf) free(cat);
        pdb_tok_merge_put(t, ia, ib, (uint32_t)r, inew);
    }
    return PDB_OK;
}

/* bos/eos: tokenizer_config.json beside the tokenizer.json, else the DeepSeek names. */
static pdb_status pdb_tok_load_config(pdb_tokenizer *t) {
    const char *names[2] = {"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                            "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};
    const char *slash = strrchr(t->path, '/');
    size_t dlen = slash ? (size_t)(slash - t->path + 1) : 0;
    char *cfg = malloc(dlen + sizeof "tokenizer_config.json");
    if (!cfg) return pdb_err_set(PDB_NOMEM, "out of memory");
    memcpy(cfg, t->path, dlen);
    strcpy(cfg + dlen, "tokenizer_config.json");
    json_t *root = NULL;
    struct stat sb;
    if (stat(cfg, &sb) == 0) {
        pdb_status st = pdb_tok_read_json(cfg, &root);
        if (st != PDB_OK) { free(cfg); return st; }
    }
    const char *keys[2] = {"bos_token", "eos_token"};
    int32_t *dst[2] = {&t->bos_id, &t->eos_id};
    pdb_status st = PDB_OK;
    for (int i = 0; i < 2; i++) {
        json_t *v = root ? json_object_get(root, keys[i]) : NULL;
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (json_is_string(v)) {
            *dst[i] = pdb_tokenizer_token_to_id(t, json_string_value(v), json_string_length(v));
            if (*dst[i] < 0) {
                st = pdb_err_set(PDB_CORRUPT, "%s: %s \"%s\" is not a token of %s", cfg, keys[i], json_string_value(v),
                                 t->path);
                break;
            }
        } else {
            *dst[i] = pdb_tokenizer_token_to_id(t, names[i], strlen(names[i]));
        }
    }
    json_decref(root);
    free(cfg);
    return st;
}

static pdb_status pdb_tok_load_json(pdb_tokenizer *t, json_t *root) {
    if (!json_is_object(root)) return pdb_err_set(PDB_CORRUPT, "%s: top level is not a JSON object", t->path);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return pdb_err_set(PDB_CORRUPT, "%s: missing field \"model\"", t->path);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab)) return pdb_err_set(PDB_CORRUPT, "%s: missing field \"model.vocab\" (an object)", t->path);
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) return pdb_err_set(PDB_CORRUPT, "%s: missing field \"model.merges\" (an array)", t->path);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return pdb_err_set(PDB_CORRUPT, "%s: field \"added_tokens\" is not an array", t->path);
    PDB_TRY(pdb_tok_check_pipeline(t, root, model));

    /* ids: max over vocab and added tokens */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= PDB_TOK_MAX_ID)
            return pdb_err_set(PDB_CORRUPT, "%s: model.vocab[\"%s\"]: id must be an integer in [0, %lld)", t->path, key,
                               (long long)PDB_TOK_MAX_ID);
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= PDB_TOK_MAX_ID ||
            !json_is_string(content))
            return pdb_err_set(PDB_CORRUPT, "%s: added_tokens[%zu]: needs an integer \"id\" in [0, %lld) and a string \"content\"",
                               t->path, i, (long long)PDB_TOK_MAX_ID);
        const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (int f = 0; f < 3; f++)
            if (pdb_tok_json_true(a, flags[f]))
                return pdb_err_set(PDB_UNSUPPORTED, "%s: added_tokens[%zu] (\"%s\"): %s=true is not supported", t->path, i,
                                   json_string_value(content), flags[f]);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return pdb_err_set(PDB_CORRUPT, "%s: model.vocab is empty", t->path);
    t->n_ids = (int32_t)(max_id + 1);
    size_t n = (size_t)t->n_ids;
    t->str_off = calloc(n, sizeof *t->str_off);
    t->str_len = calloc(n, sizeof *t->str_len);
    t->bytes_off = calloc(n, sizeof *t->bytes_off);
    t->bytes_len = calloc(n, sizeof *t->bytes_len);
    t->flags = calloc(n, 1);
    size_t n_strings = json_object_size(vocab) + json_array_size(added);
    t->str_mask = pdb_tok_pow2_at_least(n_strings) - 1;
    t->str_slots = malloc(((size_t)t->str_mask + 1) * sizeof *t->str_slots);
    if (!t->str_off || !t->str_len || !t->bytes_off || !t->bytes_len || !t->flags || !t->str_slots)
        return pdb_err_set(PDB_NOMEM, "%s: out of memory for %zu ids", t->path, n);
    for (size_t i = 0; i <= t->str_mask; i++) t->str_slots[i].id = -1;

    uint32_t byte_cp[256];
    int16_t cp_byte[512];
    pdb_tok_build_bytemap(byte_cp, cp_byte);

    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if (t->flags[id]) return pdb_err_set(PDB_CORRUPT, "%s: model.vocab[\"%s\"]: id %d is used twice", t->path, key, id);
        size_t klen = strlen(key); /* jansson keys are NUL-free unless JSON_ALLOW_NUL */
        PDB_TRY(pdb_tok_set_token(t, id, key, klen, false, cp_byte));
        t->str_slots[pdb_tok_str_slot(t, key, klen)] =
            (pdb_tok_slot){.key_off = t->str_off[id], .key_len = (uint32_t)klen, .id = id};
    }
    /* the model's alphabet: the single-character token of each byte */
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t l = pdb_tok_utf8_put(byte_cp[b], s);
        t->byte_id[b] = t->str_slots[pdb_tok_str_slot(t, s, l)].id;
    }
    PDB_TRY(pdb_tok_parse_merges(t, merges));

    /* added tokens: override id -> token, take precedence in token -> id, join the tries */
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        json_t *content = json_object_get(a, "content");
        const char *s = json_string_value(content);
        size_t l = json_string_length(content);
        PDB_TRY(pdb_tok_set_token(t, id, s, l, true, cp_byte));
        if (pdb_tok_json_true(a, "special")) t->flags[id] |= PDB_TOK_SPECIAL;
        t->str_slots[pdb_tok_str_slot(t, s, l)] =
            (pdb_tok_slot){.key_off = t->str_off[id], .key_len = (uint32_t)l, .id = id};
        if (l == 0) continue;
        json_t *norm = json_object_get(a, "normalized");
        /* HF's default: normalized = !special */
        bool normalized = norm ? json_is_true(norm) : !pdb_tok_json_true(a, "special");
        PDB_TRY(pdb_tok_trie_insert(&t->trie[normalized ? 1 : 0], (const uint8_t *)s, l, id));
    }
    PDB_TRY(pdb_tok_parse_pretokenizer(t, root));
    return pdb_tok_load_config(t);
}

pdb_status pdb_tokenizer_load(const char *path, pdb_tokenizer **out) {
    PDB_ASSERT(path && out, "pdb_tokenizer_load: NULL argument");
    *out = NULL;
    pdb_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    t->bos_id = t->eos_id = -1;
    struct stat sb;
    size_t pl = strlen(path);
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    t->path = malloc(pl + sizeof "/tokenizer.json");
    if (!t->path) { free(t); return pdb_err_set(PDB_NOMEM, "%s: out of memory", path); }
    memcpy(t->path, path, pl + 1);
    if (dir) {
        while (pl > 1 && t->path[pl - 1] == '/') t->path[--pl] = 0;
        strcpy(t->path + pl, "/tokenizer.json");
    }
    json_t *root = NULL;
    pdb_status st = pdb_tok_read_json(t->path, &root);
    if (st == PDB_OK) st = pdb_tok_load_json(t, root);
    json_decref(root);
    if (st != PDB_OK) {
        pdb_tokenizer_free(t);
        return st;
    }
    *out = t;
    return PDB_OK;
}

void pdb_tokenizer_free(pdb_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->split[i]);
    for (int i = 0; i < 2; i++) free(t->trie[i].nodes);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_new);
    free(t->str_slots);
    free(t->str_off);
    free(t->str_len);
    free(t->bytes_off);
    free(t->bytes_len);
    free(t->flags);
    free(t->arena);
    free(t->path);
    free(t);
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct { int32_t id, prev, next; int32_t alive; } pdb_tok_sym;
typedef struct { uint32_t rank; int32_t pos, new_id; } pdb_tok_cand;

/* Per-call scratch: nothing here is shared between threads. */
typedef struct {
    const pdb_tokenizer *tok;
    int32_t *ids;
    int64_t n, cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    pdb_tok_sym *syms;
    size_t syms_cap;
    pdb_tok_cand *heap;
    size_t heap_n, heap_cap;
} pdb_tok_enc;

static pdb_status pdb_tok_emit(pdb_tok_enc *e, int32_t id) {
    if (e->n == e->cap) {
        int64_t cap = e->cap ? e->cap * 2 : 256;
        if (cap > PDB_TOKENIZER_MAX_IDS) cap = PDB_TOKENIZER_MAX_IDS;
        if (e->n == cap) return pdb_err_set(PDB_TOO_LARGE, "encode: more than %lld ids", (long long)PDB_TOKENIZER_MAX_IDS);
        int32_t *p = realloc(e->ids, (size_t)cap * sizeof *p);
        if (!p) return pdb_err_set(PDB_NOMEM, "encode: out of memory for %lld ids", (long long)cap);
        e->ids = p;
        e->cap = cap;
    }
    e->ids[e->n++] = id;
    return PDB_OK;
}

static bool pdb_tok_cand_less(const pdb_tok_cand *a, const pdb_tok_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static pdb_status pdb_tok_heap_push(pdb_tok_enc *e, pdb_tok_cand c) {
    if (e->heap_n == e->heap_cap) {
        size_t cap = e->heap_cap ? e->heap_cap * 2 : 64;
        pdb_tok_cand *h = realloc(e->heap, cap * sizeof *h);
        if (!h) return pdb_err_set(PDB_NOMEM, "encode: out of memory for BPE");
        e->heap = h;
        e->heap_cap = cap;
    }
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!pdb_tok_cand_less(&c, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = c;
    return PDB_OK;
}

static pdb_tok_cand pdb_tok_heap_pop(pdb_tok_enc *e) {
    pdb_tok_cand top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const pdb_tok_cand *best = &last;
        if (l < n && pdb_tok_cand_less(&e->heap[l], best)) { m = l; best = &e->heap[l]; }
        if (l + 1 < n && pdb_tok_cand_less(&e->heap[l + 1], best)) { m = l + 1; }
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = last;
    return top;
}

static pdb_status pdb_tok_push_pair(pdb_tok_enc *e, int32_t left) {
    uint32_t rank;
    int32_t new_id;
    const pdb_tok_sym *s = e->syms;
    if (!pdb_tok_merge_find(e->tok, s[left].id, s[s[left].next].id, &rank, &new_id)) return PDB_OK;
    return pdb_tok_heap_push(e, (pdb_tok_cand){.rank = rank, .pos = left, .new_id = new_id});
}

/* BPE of one pre-token (raw bytes): lowest merge rank first, leftmost on ties. */
static pdb_status pdb_tok_bpe(pdb_tok_enc *e, const uint8_t *w, size_t n) {
    const pdb_tokenizer *t = e->tok;
    if (n == 1) return t->byte_id[w[0]] >= 0 ? pdb_tok_emit(e, t->byte_id[w[0]]) : PDB_OK;
    if (n > e->syms_cap) {
        size_t cap = e->syms_cap ? e->syms_cap : 64;
        while (cap < n) cap *= 2;
        pdb_tok_sym *s = realloc(e->syms, cap * sizeof *s);
        if (!s) return pdb_err_set(PDB_NOMEM, "encode: out of memory for BPE");
        e->syms = s;
        e->syms_cap = cap;
    }
    pdb_tok_sym *s = e->syms;
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) continue; /* HF drops a character its vocab lacks when there is no unk */
        s[m] = (pdb_tok_sym){.id = id, .prev = m - 1, .next = m + 1, .alive = 1};
        m++;
    }
    if (m == 0) return PDB_OK;
    s[m - 1].next = -1;
    e->heap_n = 0;
    for (int32_t i = 0; i + 1 < m; i++) PDB_TRY(pdb_tok_push_pair(e, i));
    while (e->heap_n) {
        pdb_tok_cand c = pdb_tok_heap_pop(e);
        int32_t l = c.pos, r = s[l].next;
        if (!s[l].alive || r < 0) continue;
        uint32_t rank;
        int32_t new_id;
        if (!pdb_tok_merge_find(t, s[l].id, s[r].id, &rank, &new_id) || new_id != c.new_id) continue;
        s[l].id = new_id;
        s[r].alive = 0;
        s[l].next = s[r].next;
        if (s[r].next >= 0) s[s[r].next].prev = l;
        if (s[l].prev >= 0) PDB_TRY(pdb_tok_push_pair(e, s[l].prev));
        if (s[l].next >= 0) PDB_TRY(pdb_tok_push_pair(e, l));
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) PDB_TRY(pdb_tok_emit(e, s[i].id));
    return PDB_OK;
}

/* Apply split regex `level` to the piece s[0..n) alone (as HF does: lookarounds see only the
 * piece), recursing into the next level for every match and every gap between matches. */
static pdb_status pdb_tok_split(pdb_tok_enc *e, int level, const uint8_t *s, size_t n) {
    if (n == 0) return PDB_OK;
    if (level == e->tok->n_splits) return pdb_tok_bpe(e, s, n);
    const pcre2_code *code = e->tok->split[level];
    size_t start = 0, prev = 0;
    while (start <= n) {
        int rc = pcre2_match(code, s, n, start, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pdb_err_set(PDB_TOO_LARGE, "%s: pre-tokenizer split %d failed on a %zu-byte piece: %s", e->tok->path,
                               level, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t ms = ov[0], me = ov[1] < ov[0] ? ov[0] : ov[1];
        if (ms > prev) PDB_TRY(pdb_tok_split(e, level + 1, s + prev, ms - prev));
        if (me > ms) PDB_TRY(pdb_tok_split(e, level + 1, s + ms, me - ms));
        prev = me;
        if (me > ms) {
            start = me;
        } else { /* an empty match splits here; step over one character */
            if (ms >= n) break;
            uint32_t cp;
            size_t l = pdb_tok_utf8_len(s + ms, n - ms, &cp);
            start = ms + (l ? l : 1);
        }
    }
    if (prev < n) PDB_TRY(pdb_tok_split(e, level + 1, s + prev, n - prev));
    return PDB_OK;
}

/* Text with no added tokens: valid UTF-8 runs are pre-tokenized; each invalid byte is a word
 * of its own (its single-byte token). */
static pdb_status pdb_tok_encode_plain(pdb_tok_enc *e, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        uint32_t cp;
        size_t l = 0;
        while (j < n && (s[j] < 0x80 || (l = pdb_tok_utf8_len(s + j, n - j, &cp)) != 0)) j += s[j] < 0x80 ? 1 : l;
        PDB_TRY(pdb_tok_split(e, 0, s + i, j - i));
        if (j < n) {
            if (e->tok->byte_id[s[j]] >= 0) PDB_TRY(pdb_tok_emit(e, e->tok->byte_id[s[j]]));
            j++;
        }
        i = j;
    }
    return PDB_OK;
}

/* Split on the added tokens of trie `which` (leftmost-longest); gaps go to the next stage. */
static pdb_status pdb_tok_encode_added(pdb_tok_enc *e, int which, const uint8_t *s, size_t n) {
    const pdb_tok_trie *tr = &e->tok->trie[which];
    if (tr->n == 0) return which == 0 ? pdb_tok_encode_added(e, 1, s, n) : pdb_tok_encode_plain(e, s, n);
    size_t gap = 0;
    for (size_t i = 0; i < n;) {
        int32_t id;
        size_t l = tr->root_child[s[i]] >= 0 ? pdb_tok_trie_match(tr, s + i, n - i, &id) : 0;
        if (!l) { i++; continue; }
        if (i > gap)
            PDB_TRY(which == 0 ? pdb_tok_encode_added(e, 1, s + gap, i - gap) : pdb_tok_encode_plain(e, s + gap, i - gap));
        PDB_TRY(pdb_tok_emit(e, id));
        i += l;
        gap = i;
    }
    if (n > gap) PDB_TRY(which == 0 ? pdb_tok_encode_added(e, 1, s + gap, n - gap) : pdb_tok_encode_plain(e, s + gap, n - gap));
    return PDB_OK;
}

pdb_status pdb_tokenizer_encode(const pdb_tokenizer *tok, const char *text, size_t len, int32_t **ids, int64_t *n_ids) {
    PDB_ASSERT(tok && ids && n_ids && (text || len == 0), "pdb_tokenizer_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > PDB_TOKENIZER_MAX_TEXT)
        return pdb_err_set(PDB_TOO_LARGE, "encode: text of %zu bytes exceeds %zu", len, PDB_TOKENIZER_MAX_TEXT);
    if (len == 0) return PDB_OK;
    pdb_tok_enc e = {.tok = tok};
    pdb_status st = PDB_OK;
    e.md = pcre2_match_data_create(1, NULL);
    e.mctx = pcre2_match_context_create(NULL);
    e.jit = pcre2_jit_stack_create(32 * 1024, PDB_TOK_JIT_STACK_MAX, NULL);
    if (!e.md || !e.mctx || !e.jit) {
        st = pdb_err_set(PDB_NOMEM, "encode: out of memory for regex scratch");
    } else {
        pcre2_jit_stack_assign(e.mctx, NULL, e.jit);
        st = pdb_tok_encode_added(&e, 0, (const uint8_t *)text, len);
    }
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    pcre2_jit_stack_free(e.jit);
    free(e.syms);
    free(e.heap);
    if (st != PDB_OK) {
        free(e.ids);
        return st;
    }
    *ids = e.ids;
    *n_ids = e.n;
    return PDB_OK;
}

/* ---- decoding and lookups --------------------------------------------------------------- */

const char *pdb_tokenizer_token_bytes(const pdb_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_ids || !tok->flags[id]) return NULL;
    *len = tok->bytes_len[id];
    return tok->arena + tok->bytes_off[id];
}

pdb_status pdb_tokenizer_decode(const pdb_tokenizer *tok, const int32_t *ids, int64_t n_ids, char **text, size_t *len) {
    PDB_ASSERT(tok && text && len && (ids || n_ids == 0) && n_ids >= 0, "pdb_tokenizer_decode: bad argument");
    *text = NULL;
    *len = 0;
    if (n_ids > PDB_TOKENIZER_MAX_IDS)
        return pdb_err_set(PDB_TOO_LARGE, "decode: %lld ids exceed %lld", (long long)n_ids, (long long)PDB_TOKENIZER_MAX_IDS);
    size_t total = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        size_t l = 0;
        if (!pdb_tokenizer_token_bytes(tok, ids[i], &l))
            return pdb_err_set(PDB_INVALID, "decode: ids[%lld] = %d is not a token of %s (vocab size %d)", (long long)i,
                               ids[i], tok->path, tok->n_ids);
        total += l;
    }
    char *out = malloc(total + 1);
    if (!out) return pdb_err_set(PDB_NOMEM, "decode: out of memory for %zu bytes", total);
    size_t o = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        size_t l = 0;
        const char *b = pdb_tokenizer_token_bytes(tok, ids[i], &l);
        memcpy(out + o, b, l);
        o += l;
    }
    out[o] = 0;
    *text = out;
    *len = o;
    return PDB_OK;
}

int32_t pdb_tokenizer_token_to_id(const pdb_tokenizer *tok, const char *token, size_t len) {
    return tok->str_slots[pdb_tok_str_slot(tok, token, len)].id;
}

const char *pdb_tokenizer_id_to_token(const pdb_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->n_ids || !tok->flags[id]) return NULL;
    return tok->arena + tok->str_off[id];
}

int32_t pdb_tokenizer_vocab_size(const pdb_tokenizer *tok) { return tok->n_ids; }
int pdb_tokenizer_is_special(const pdb_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && (tok->flags[id] & PDB_TOK_SPECIAL) != 0;
}
int32_t pdb_tokenizer_bos_id(const pdb_tokenizer *tok) { return tok->bos_id; }
int32_t pdb_tokenizer_eos_id(const pdb_tokenizer *tok) { return tok->eos_id; }
const char *pdb_tokenizer_path(const pdb_tokenizer *tok) { return tok->path; }
