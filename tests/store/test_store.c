/* test_store: the prefix-cache store. Chain hash known answer and sensitivity; write,
 * restart, lookup, mount; a second handle sees another's blocks; corruption anywhere is a
 * miss and the file is removed; store.json refuses another block_size/layout; LRU eviction
 * (never of the writing prompt's own prefix); a full disk (ENOSPC) evicts and retries once;
 * streaming order rules; fault injection on every I/O call of a block write; 4 threads.
 * Invariant: every test works in its own fresh directory under /tmp and removes it. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "pdb_block.h"
#include "pdb_pool.h"
#include "pdb_safetensors.h"
#include "pdb_store.h"

#define BS 128

static const pdb_store_pool POOLS[] = {
    {"kv", PDB_STORE_POOL_APPEND, 3, 1, 0, 8, PDB_DT_BF16},  /* [3, 128, 8] bf16 = 6144 B */
    {"cmp", PDB_STORE_POOL_APPEND, 2, 4, 0, 16, PDB_DT_F32}, /* [2, 32, 16] f32 = 4096 B */
    {"win", PDB_STORE_POOL_STATE, 2, 0, 5, 8, PDB_DT_F16},   /* [2, 5, 8] f16 = 160 B */
};
#define NP 3
static const pdb_store_layout LAYOUT = {NP, POOLS};
static const uint8_t FP[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                               17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

/* ---- helpers ---------------------------------------------------------------------------------- */

static char *mk_dir(void) {
    char *d = strdup("/tmp/pdb-store-test-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)flag; (void)f;
    return remove(p);
}
static void rm_dir(char *d) {
    nftw(d, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

typedef struct tree_count { int blocks, tmps; uint64_t bytes; } tree_count;
static tree_count g_tc;
static int count_cb(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    const char *name = p + f->base;
    if (flag != FTW_F) return 0;
    if (strncmp(name, PDB_BLOCK_TMP_PREFIX, strlen(PDB_BLOCK_TMP_PREFIX)) == 0) g_tc.tmps++;
    size_t n = strlen(name);
    if (n > 7 && strcmp(name + n - 7, PDB_BLOCK_EXT) == 0) {
        g_tc.blocks++;
        g_tc.bytes += (uint64_t)sb->st_size;
    }
    return 0;
}
static tree_count count_tree(const char *d) {
    memset(&g_tc, 0, sizeof g_tc);
    nftw(d, count_cb, 16, FTW_PHYS);
    return g_tc;
}

static void make_tokens(int32_t *t, int64_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)(x >> 15);
    }
}

/* Block content is a function of its hash, as real cache content is a function of the prefix. */
static void gen_pool(const uint8_t *hash, int p, uint8_t *buf, uint64_t n) {
    uint64_t x;
    memcpy(&x, hash, 8);
    x ^= (uint64_t)(p + 1) * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
}

typedef struct blockbuf { uint8_t *p[NP]; } blockbuf;
static blockbuf bb_alloc(void) {
    blockbuf b;
    for (int p = 0; p < NP; p++) b.p[p] = calloc(1, pdb_store_pool_bytes(&POOLS[p], BS));
    return b;
}
static void bb_free(blockbuf *b) {
    for (int p = 0; p < NP; p++) free(b->p[p]);
}
static void bb_fill(blockbuf *b, const uint8_t *hash) {
    for (int p = 0; p < NP; p++) gen_pool(hash, p, b->p[p], pdb_store_pool_bytes(&POOLS[p], BS));
}

static pdb_store *open_store(const char *dir, uint64_t max_bytes) {
    pdb_store *s = NULL;
    pdb_status st = pdb_store_open(dir, &LAYOUT, FP, BS, max_bytes, &s);
    if (st != PDB_OK) fprintf(stderr, "open: %s\n", pdb_err_msg());
    assert_int_equal(st, PDB_OK);
    return s;
}

/* Write all full blocks of tokens through a stream. */
static void write_prompt(pdb_store *s, const int32_t *tok, int64_t n) {
    pdb_store_stream *w = NULL;
    assert_int_equal(pdb_store_stream_begin(s, tok, n, &w), PDB_OK);
    blockbuf b = bb_alloc();
    for (int64_t i = 0; i < pdb_store_stream_n_blocks(w); i++) {
        bb_fill(&b, pdb_store_stream_hash(w, i));
        pdb_status st = pdb_store_stream_put(w, i, (const void *const *)b.p);
        if (st != PDB_OK) fprintf(stderr, "put: %s\n", pdb_err_msg());
        assert_int_equal(st, PDB_OK);
    }
    bb_free(&b);
    assert_int_equal(pdb_store_stream_finish(w), PDB_OK);
}

static int64_t prefix_of(pdb_store *s, const int32_t *tok, int64_t n) {
    uint8_t h[64][32];
    assert_true(n / BS <= 64);
    assert_int_equal(pdb_store_hash_chain(FP, tok, n, BS, h), PDB_OK);
    int64_t hit = -1;
    assert_int_equal(pdb_store_longest_prefix(s, (const uint8_t(*)[32])h, n / BS, &hit), PDB_OK);
    return hit;
}

static pdb_status load_and_check(pdb_store *s, const uint8_t *hash, int64_t b) {
    blockbuf got = bb_alloc(), want = bb_alloc();
    bb_fill(&want, hash);
    pdb_status st = pdb_store_load_block(s, hash, b, (void *const *)got.p);
    if (st == PDB_OK)
        for (int p = 0; p < NP; p++)
            assert_memory_equal(got.p[p], want.p[p], pdb_store_pool_bytes(&POOLS[p], BS));
    bb_free(&got);
    bb_free(&want);
    return st;
}

static void block_path(const char *dir, const uint8_t *h, char *out, size_t cap) {
    char hex[65];
    pdb_store_hash_hex(h, hex);
    snprintf(out, cap, "%s/%.2s/%s.pdbblk", dir, hex, hex);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}
static void write_file(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void assert_consistent(pdb_store *s, const char *dir) {
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    tree_count tc = count_tree(dir);
    assert_int_equal(tc.tmps, 0);
    assert_int_equal(stt.n_blocks, (uint64_t)tc.blocks);
    assert_int_equal(stt.bytes, tc.bytes);
}

/* ---- chain hash ---------------------------------------------------------------------------- */

static void sha(const void *a, size_t na, const void *b, size_t nb, const void *c, size_t nc, uint8_t out[32]) {
    EVP_MD_CTX *x = EVP_MD_CTX_new();
    unsigned int l = 0;
    assert_int_equal(EVP_DigestInit_ex(x, EVP_sha256(), NULL), 1);
    if (na) EVP_DigestUpdate(x, a, na);
    if (nb) EVP_DigestUpdate(x, b, nb);
    if (nc) EVP_DigestUpdate(x, c, nc);
    assert_int_equal(EVP_DigestFinal_ex(x, out, &l), 1);
    EVP_MD_CTX_free(x);
}

static void test_hash_known_answer(void **state) {
    (void)state;
    int32_t tok[2 * BS + 50];
    for (int i = 0; i < 2 * BS + 50; i++) tok[i] = i * 1000 + 7 - (i == 5 ? 2000000000 : 0);
    uint8_t le[2][4 * BS];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < BS; i++) {
            uint32_t v = (uint32_t)tok[b * BS + i];
            for (int k = 0; k < 4; k++) le[b][4 * i + k] = (uint8_t)(v >> (8 * k));
        }
    uint8_t root[32], h0[32], h1[32];
    sha("pdbridge-root-v1", 16, NULL, 0, NULL, 0, root);
    sha(FP, 32, root, 32, le[0], sizeof le[0], h0);
    sha(FP, 32, h0, 32, le[1], sizeof le[1], h1);
    uint8_t got[3][32];
    memset(got, 0xAB, sizeof got);
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS + 50, BS, got), PDB_OK);
    assert_memory_equal(got[0], h0, 32);
    assert_memory_equal(got[1], h1, 32);
    for (int i = 0; i < 32; i++) assert_int_equal(got[2][i], 0xAB); /* only full blocks */
    assert_memory_equal(pdb_block_root_hash(), root, 32);
    char hex[65];
    pdb_store_hash_hex(h0, hex);
    assert_int_equal(strlen(hex), 64);
    uint8_t back[32];
    assert_true(pdb_block_parse_hex(hex, back));
    assert_memory_equal(back, h0, 32);
}

static void test_hash_sensitivity(void **state) {
    (void)state;
    int32_t tok[2 * BS];
    make_tokens(tok, 2 * BS, 1);
    uint8_t a[2][32], b[2][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS, BS, a), PDB_OK);
    uint8_t fp2[32];
    memcpy(fp2, FP, 32);
    fp2[31] ^= 1;
    assert_int_equal(pdb_store_hash_chain(fp2, tok, 2 * BS, BS, b), PDB_OK);
    assert_memory_not_equal(a[0], b[0], 32);
    assert_memory_not_equal(a[1], b[1], 32);
    tok[BS + 3]++; /* token in block 1: block 0 unchanged */
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS, BS, b), PDB_OK);
    assert_memory_equal(a[0], b[0], 32);
    assert_memory_not_equal(a[1], b[1], 32);
    tok[BS + 3]--;
    tok[0] ^= 1 << 20; /* token in block 0: both change (the parent carries it) */
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS, BS, b), PDB_OK);
    assert_memory_not_equal(a[0], b[0], 32);
    assert_memory_not_equal(a[1], b[1], 32);
    tok[0] ^= 1 << 20;
    uint8_t other_parent[32] = {0}, h[32];
    assert_int_equal(pdb_block_hash_one(FP, other_parent, tok + BS, BS, h), PDB_OK);
    assert_memory_not_equal(h, a[1], 32);
    assert_int_equal(pdb_block_hash_one(FP, a[0], tok + BS, BS, h), PDB_OK);
    assert_memory_equal(h, a[1], 32);
}

static void test_pool_bytes(void **state) {
    (void)state;
    assert_int_equal(pdb_store_pool_rows(&POOLS[0], BS), 128);
    assert_int_equal(pdb_store_pool_rows(&POOLS[1], BS), 32);
    assert_int_equal(pdb_store_pool_rows(&POOLS[2], BS), 5);
    assert_int_equal(pdb_store_pool_bytes(&POOLS[0], BS), 3 * 128 * 8 * 2);
    assert_int_equal(pdb_store_pool_bytes(&POOLS[1], BS), 2 * 32 * 16 * 4);
    assert_int_equal(pdb_store_pool_bytes(&POOLS[2], BS), 2 * 5 * 8 * 2);
    pdb_store_pool bad = {"x", PDB_STORE_POOL_APPEND, 1, 3, 0, 8, PDB_DT_F32};
    assert_int_equal(pdb_store_pool_bytes(&bad, BS), 0); /* 3 does not divide 128 */
}

/* ---- write, restart, lookup, mount ------------------------------------------------------------ */

static void test_write_reopen_lookup(void **state) {
    (void)state;
    char *dir = mk_dir();
    int32_t tok[3 * BS + 70];
    make_tokens(tok, 3 * BS + 70, 2);
    uint8_t h[3][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 3 * BS + 70, BS, h), PDB_OK);
    pdb_store *s = open_store(dir, 0);
    assert_int_equal(prefix_of(s, tok, 3 * BS + 70), 0);
    write_prompt(s, tok, 3 * BS + 70);
    assert_int_equal(prefix_of(s, tok, 3 * BS + 70), 3);
    assert_int_equal(pdb_store_block_bytes(s), 6144 + 4096 + 160);
    pdb_store_close(s);

    s = open_store(dir, 0); /* restart */
    assert_int_equal(prefix_of(s, tok, 3 * BS + 70), 3);
    for (int b = 0; b < 3; b++) assert_int_equal(load_and_check(s, h[b], b), PDB_OK);
    int32_t tok2[3 * BS];
    memcpy(tok2, tok, sizeof tok2);
    tok2[2 * BS + 9]++; /* diverges in block 2 */
    assert_int_equal(prefix_of(s, tok2, 3 * BS), 2);
    assert_int_equal(load_and_check(s, h[1], 2), PDB_CORRUPT); /* wrong index: identity check */
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.loads, 3);
    assert_int_equal(stt.misses, 1);
    assert_int_equal(stt.corrupt_removed, 1);
    assert_int_equal(prefix_of(s, tok, 3 * BS), 1);
    assert_consistent(s, dir);
    pdb_store_close(s);

    /* a standard safetensors reader accepts the file; metadata as documented */
    char path[4096];
    block_path(dir, h[0], path, sizeof path);
    pdb_st *f = NULL;
    assert_int_equal(pdb_st_open(path, &f), PDB_OK);
    assert_string_equal(pdb_st_meta(f, "format"), "pdbridge-block");
    assert_string_equal(pdb_st_meta(f, "version"), "2");
    assert_string_equal(pdb_st_meta(f, "block_index"), "0");
    assert_string_equal(pdb_st_meta(f, "block_size"), "128");
    assert_string_equal(pdb_st_meta(f, "token_count"), "128");
    char hex[65];
    pdb_store_hash_hex(pdb_block_root_hash(), hex);
    assert_string_equal(pdb_st_meta(f, "parent_hash"), hex);
    pdb_store_hash_hex(FP, hex);
    assert_string_equal(pdb_st_meta(f, "fingerprint"), hex);
    assert_non_null(pdb_st_meta(f, "created_at"));
    assert_non_null(pdb_st_meta(f, "checksum"));
    const pdb_tensor_view *tv = pdb_st_find(f, "tokens");
    assert_non_null(tv);
    assert_int_equal(tv->dtype, PDB_DT_I32);
    assert_memory_equal(tv->data, tok, 4 * BS);
    tv = pdb_st_find(f, "cmp");
    assert_non_null(tv);
    assert_int_equal(tv->ndim, 3);
    assert_int_equal(tv->shape[0], 2);
    assert_int_equal(tv->shape[1], 32);
    assert_int_equal(tv->shape[2], 16);
    pdb_st_close(f);
    size_t n;
    uint8_t *raw = read_file(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    assert_int_equal((8 + hl) % 8, 0);
    assert_int_equal(n, 8 + hl + 4 * BS + 6144 + 4096 + 160);
    free(raw);
    rm_dir(dir);
}

static void test_second_handle(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *a = open_store(dir, 0), *b = open_store(dir, 0);
    int32_t tok[4 * BS];
    make_tokens(tok, 4 * BS, 3);
    assert_int_equal(prefix_of(b, tok, 4 * BS), 0);
    write_prompt(a, tok, 4 * BS);
    assert_int_equal(prefix_of(b, tok, 4 * BS), 4); /* found on disk, no reopen */
    uint8_t h[4][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 4 * BS, BS, h), PDB_OK);
    assert_int_equal(load_and_check(b, h[3], 3), PDB_OK);
    /* b's writes of the same blocks are no-ops */
    write_prompt(b, tok, 4 * BS);
    pdb_store_stats stt;
    pdb_store_get_stats(b, &stt);
    assert_int_equal(stt.writes, 0);
    assert_int_equal(stt.write_noops, 4);
    /* a evicts nothing, but removing a file behind b's back is noticed by b */
    char path[4096];
    block_path(dir, h[2], path, sizeof path);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(prefix_of(b, tok, 4 * BS), 2);
    assert_int_equal(load_and_check(b, h[2], 2), PDB_NOT_FOUND);
    assert_consistent(b, dir);
    pdb_store_close(a);
    pdb_store_close(b);
    rm_dir(dir);
}

/* ---- corruption ------------------------------------------------------------------------------ */

static void test_flip_data_byte(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[3 * BS];
    make_tokens(tok, 3 * BS, 4);
    write_prompt(s, tok, 3 * BS);
    uint8_t h[3][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 3 * BS, BS, h), PDB_OK);
    char path[4096];
    block_path(dir, h[1], path, sizeof path);
    size_t n;
    uint8_t *raw = read_file(path, &n);
    raw[n - 100] ^= 0x10; /* inside pool "win" */
    write_file(path, raw, n);
    /* lookup verifies identity only (documented): still a hit; mount verifies the checksum */
    assert_int_equal(prefix_of(s, tok, 3 * BS), 3);
    assert_int_equal(load_and_check(s, h[1], 1), PDB_CORRUPT);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(prefix_of(s, tok, 3 * BS), 1);
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.corrupt_removed, 1);
    assert_consistent(s, dir);
    pdb_store_close(s);

    /* a flip in the tokens tensor is caught at lookup (the name no longer matches) */
    s = open_store(dir, 0);
    write_prompt(s, tok, 3 * BS);
    pdb_store_close(s);
    block_path(dir, h[2], path, sizeof path);
    free(raw);
    raw = read_file(path, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | raw[i];
    raw[8 + hl + 17] ^= 0x01;
    write_file(path, raw, n);
    s = open_store(dir, 0);
    assert_int_equal(prefix_of(s, tok, 3 * BS), 2);
    assert_int_equal(access(path, F_OK), -1);
    assert_consistent(s, dir);
    pdb_store_close(s);
    free(raw);
    rm_dir(dir);
}

/* Every single-byte flip of the length prefix or JSON header (except the created_at value,
 * which nothing depends on) makes the block a miss at lookup, and the file is removed. */
static void test_flip_header_byte(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[BS];
    make_tokens(tok, BS, 5);
    write_prompt(s, tok, BS);
    pdb_store_close(s);
    uint8_t h[1][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, BS, BS, h), PDB_OK);
    char path[4096];
    block_path(dir, h[0], path, sizeof path);
    size_t n;
    uint8_t *orig = read_file(path, &n), *raw = malloc(n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | orig[i];
    const char *ca = memmem(orig + 8, hl, "\"created_at\":\"", 14);
    assert_non_null(ca);
    size_t ca_lo = (size_t)((const uint8_t *)ca - orig) + 15, ca_hi = ca_lo; /* keep the first digit */
    while (orig[ca_hi] != '"') ca_hi++;
    int tested = 0, mount_only = 0;
    for (size_t pos = 0; pos < 8 + hl; pos++) {
        if (pos >= ca_lo && pos < ca_hi) continue;
        memcpy(raw, orig, n);
        raw[pos] ^= 0x01;
        write_file(path, raw, n);
        s = open_store(dir, 0);
        int64_t hit = prefix_of(s, tok, BS);
        if (hit != 0) { /* lookup checks identity only: the checksum value is checked at mount */
            pdb_status st = load_and_check(s, h[0], 0);
            if (st != PDB_CORRUPT) fprintf(stderr, "flip at header byte %zu (%c) not detected\n", pos, orig[pos]);
            assert_int_equal(st, PDB_CORRUPT);
            mount_only++;
        }
        assert_int_equal(access(path, F_OK), -1);
        pdb_store_close(s);
        tested++;
    }
    assert_true(tested > 500);
    assert_true(mount_only <= 64); /* at most the checksum's hex digits */
    print_message("header flips: %d tested, %d caught at lookup, %d at mount\n", tested, tested - mount_only, mount_only);
    write_file(path, orig, n);
    s = open_store(dir, 0);
    assert_int_equal(prefix_of(s, tok, BS), 1);
    assert_int_equal(load_and_check(s, h[0], 0), PDB_OK);
    pdb_store_close(s);
    free(orig);
    free(raw);
    rm_dir(dir);
}

static void test_name_mismatch(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[2 * BS];
    make_tokens(tok, 2 * BS, 6);
    write_prompt(s, tok, 2 * BS);
    pdb_store_close(s);
    uint8_t h[2][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS, BS, h), PDB_OK);
    char p0[4096], p1[4096];
    block_path(dir, h[0], p0, sizeof p0);
    block_path(dir, h[1], p1, sizeof p1);
    size_t n;
    uint8_t *raw = read_file(p0, &n);
    write_file(p1, raw, n); /* block 0's file under block 1's name */
    free(raw);
    s = open_store(dir, 0);
    assert_int_equal(prefix_of(s, tok, 2 * BS), 1);
    assert_int_equal(access(p1, F_OK), -1);
    assert_int_equal(load_and_check(s, h[1], 1), PDB_NOT_FOUND);
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.corrupt_removed, 1);
    /* same through load_block directly */
    write_prompt(s, tok, 2 * BS);
    pdb_store_close(s);
    raw = read_file(p0, &n);
    write_file(p1, raw, n);
    free(raw);
    s = open_store(dir, 0);
    assert_int_equal(load_and_check(s, h[1], 1), PDB_CORRUPT);
    assert_int_equal(access(p1, F_OK), -1);
    assert_consistent(s, dir);
    pdb_store_close(s);
    rm_dir(dir);
}

/* ---- store.json -------------------------------------------------------------------------------- */

static void test_reopen_mismatch(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = NULL;
    assert_int_equal(pdb_store_open(dir, &LAYOUT, FP, 100, 0, &s), PDB_INVALID);
    assert_null(s);
    s = open_store(dir, 0);
    pdb_store_close(s);
    assert_int_equal(pdb_store_open(dir, &LAYOUT, FP, 256, 0, &s), PDB_MISMATCH);
    assert_null(s);
    assert_non_null(strstr(pdb_err_msg(), "block_size"));
    assert_non_null(strstr(pdb_err_msg(), "store.json"));
    pdb_store_pool p2[NP];
    memcpy(p2, POOLS, sizeof p2);
    p2[2].width = 16;
    pdb_store_layout l2 = {NP, p2};
    assert_int_equal(pdb_store_open(dir, &l2, FP, BS, 0, &s), PDB_MISMATCH);
    assert_non_null(strstr(pdb_err_msg(), "layout"));
    pdb_store_layout l3 = {NP - 1, POOLS};
    assert_int_equal(pdb_store_open(dir, &l3, FP, BS, 0, &s), PDB_MISMATCH);
    uint8_t fp2[32] = {9};
    assert_int_equal(pdb_store_open(dir, &LAYOUT, fp2, BS, 0, &s), PDB_OK); /* other model: fine */
    /* and its blocks never hit for FP */
    int32_t tok[BS];
    make_tokens(tok, BS, 7);
    write_prompt(s, tok, BS);
    pdb_store_close(s);
    s = open_store(dir, 0);
    assert_int_equal(prefix_of(s, tok, BS), 0);
    pdb_store_close(s);
    /* an old store (store.json of version 1, the f32-only block format) is refused, naming the file
     * and both versions, whatever its layout; its blocks are never read */
    char sj[4096];
    snprintf(sj, sizeof sj, "%s/store.json", dir);
    FILE *jf = fopen(sj, "rb");
    assert_non_null(jf);
    char js[8192];
    size_t jn = fread(js, 1, sizeof js - 1, jf);
    fclose(jf);
    js[jn] = 0;
    char *vp = strstr(js, "\"version\": 2");
    assert_non_null(vp);
    vp[strlen("\"version\": ")] = '1';
    jf = fopen(sj, "wb");
    assert_non_null(jf);
    fwrite(js, 1, jn, jf);
    fclose(jf);
    assert_int_equal(pdb_store_open(dir, &LAYOUT, FP, BS, 0, &s), PDB_MISMATCH);
    assert_null(s);
    assert_non_null(strstr(pdb_err_msg(), sj));
    assert_non_null(strstr(pdb_err_msg(), "version 1"));
    assert_non_null(strstr(pdb_err_msg(), "version 2"));
    /* invalid layouts */
    pdb_store_pool bad[2] = {POOLS[0], POOLS[0]};
    pdb_store_layout lb = {2, bad};
    assert_int_equal(pdb_store_open(dir, &lb, FP, BS, 0, &s), PDB_INVALID); /* duplicate name */
    bad[1].name = "tokens";
    assert_int_equal(pdb_store_open(dir, &lb, FP, BS, 0, &s), PDB_INVALID);
    rm_dir(dir);
}

/* ---- LRU --------------------------------------------------------------------------------------- */

static void test_lru_eviction(void **state) {
    (void)state;
    char *dir = mk_dir();
    int32_t tok[6][BS];
    uint8_t h[6][1][32];
    for (int i = 0; i < 6; i++) {
        make_tokens(tok[i], BS, 100 + (uint32_t)i);
        assert_int_equal(pdb_store_hash_chain(FP, tok[i], BS, BS, h[i]), PDB_OK);
    }
    pdb_store *s = open_store(dir, 0);
    write_prompt(s, tok[5], BS);
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    uint64_t fb = stt.bytes; /* one block file */
    pdb_store_close(s);
    char p5[4096];
    block_path(dir, h[5][0], p5, sizeof p5);
    unlink(p5);

    s = open_store(dir, fb * 3 + fb / 2); /* room for 3 blocks */
    write_prompt(s, tok[0], BS);
    write_prompt(s, tok[1], BS);
    write_prompt(s, tok[2], BS);
    assert_int_equal(prefix_of(s, tok[0], BS), 1); /* use 0: now 1 is the oldest */
    write_prompt(s, tok[3], BS);
    assert_int_equal(prefix_of(s, tok[1], BS), 0);
    assert_int_equal(prefix_of(s, tok[0], BS), 1);
    assert_int_equal(prefix_of(s, tok[2], BS), 1);
    assert_int_equal(prefix_of(s, tok[3], BS), 1);
    assert_int_equal(load_and_check(s, h[2][0], 0), PDB_OK); /* use 2: 0 is now the oldest */
    write_prompt(s, tok[4], BS);
    assert_int_equal(prefix_of(s, tok[0], BS), 0);
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.evictions, 2);
    assert_true(stt.bytes <= stt.max_bytes);
    assert_consistent(s, dir);
    pdb_store_close(s);

    /* the order survives a restart through mtimes: make 4 the oldest, 3 the newest */
    char p[4096];
    struct timespec ts[2];
    int order[3] = {4, 2, 3};
    for (int i = 0; i < 3; i++) {
        block_path(dir, h[order[i]][0], p, sizeof p);
        ts[0].tv_sec = ts[1].tv_sec = 1700000000 + i * 10;
        ts[0].tv_nsec = ts[1].tv_nsec = 0;
        assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    }
    s = open_store(dir, fb * 2 + fb / 2); /* smaller cap: the oldest goes at open */
    assert_int_equal(prefix_of(s, tok[4], BS), 0);
    assert_int_equal(prefix_of(s, tok[2], BS), 1);
    assert_int_equal(prefix_of(s, tok[3], BS), 1);
    assert_consistent(s, dir);
    pdb_store_close(s);

    /* a single block larger than the cap: refused naming the cap, nothing evicted for it */
    s = open_store(dir, fb / 2);
    assert_int_equal(prefix_of(s, tok[5], BS), 0);
    pdb_store_stream *w = NULL;
    assert_int_equal(pdb_store_stream_begin(s, tok[5], BS, &w), PDB_OK);
    blockbuf bb = bb_alloc();
    bb_fill(&bb, pdb_store_stream_hash(w, 0));
    assert_int_equal(pdb_store_stream_put(w, 0, (const void *const *)bb.p), PDB_TOO_LARGE);
    char cap[32];
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)(fb / 2));
    assert_non_null(strstr(pdb_err_msg(), cap));
    pdb_store_stream_abort(w);
    bb_free(&bb);
    assert_int_equal(prefix_of(s, tok[5], BS), 0);
    assert_consistent(s, dir);
    pdb_store_close(s);
    rm_dir(dir);
}

/* Several blocks mounted at once (pdb_store_load_blocks on a pool of 3 threads): every block's
 * bytes as written; a corrupt block in the middle stops the count there with its status and a
 * message naming its file, the blocks before it mounted. */
static void test_load_blocks(void **state) {
    (void)state;
    char *dir = mk_dir();
    int32_t tok[5 * BS];
    make_tokens(tok, 5 * BS, 31);
    uint8_t h[5][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 5 * BS, BS, h), PDB_OK);
    pdb_store *s = open_store(dir, 0);
    write_prompt(s, tok, 5 * BS);
    pdb_pool *pool = NULL;
    assert_int_equal(pdb_pool_create(3, &pool), PDB_OK);
    blockbuf got[5];
    void *const *outs[5];
    for (int i = 0; i < 5; i++) {
        got[i] = bb_alloc();
        outs[i] = (void *const *)got[i].p;
    }
    int64_t ok = -1;
    assert_int_equal(pdb_store_load_blocks(s, (const uint8_t(*)[32])h, 0, 5, outs, pool, &ok), PDB_OK);
    assert_int_equal(ok, 5);
    blockbuf want = bb_alloc();
    for (int i = 0; i < 5; i++) {
        bb_fill(&want, h[i]);
        for (int p = 0; p < NP; p++) assert_memory_equal(got[i].p[p], want.p[p], pdb_store_pool_bytes(&POOLS[p], BS));
    }
    assert_int_equal(pdb_store_load_blocks(s, (const uint8_t(*)[32])h + 2, 2, 3, outs, NULL, &ok), PDB_OK); /* no pool */
    assert_int_equal(ok, 3);
    /* flip a data byte of block 2 */
    char p2[4096];
    block_path(dir, h[2], p2, sizeof p2);
    FILE *f = fopen(p2, "r+b");
    assert_non_null(f);
    fseek(f, -10, SEEK_END);
    int c = fgetc(f);
    fseek(f, -10, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    assert_int_equal(pdb_store_load_blocks(s, (const uint8_t(*)[32])h, 0, 5, outs, pool, &ok), PDB_CORRUPT);
    assert_int_equal(ok, 2);
    char hex[65];
    pdb_store_hash_hex(h[2], hex);
    assert_non_null(strstr(pdb_err_msg(), hex));
    for (int i = 0; i < 5; i++) bb_free(&got[i]);
    bb_free(&want);
    pdb_pool_destroy(pool);
    pdb_store_close(s);
    rm_dir(dir);
}

/* A cap smaller than one prompt: the prompt's own earlier blocks are never evicted to make room
 * for its later ones (the old store evicted block 0 while block 3 was written, so nothing of the
 * prompt could be mounted); other prompts' blocks go first, LRU; when the prompt itself does not
 * fit the put is refused naming the cap and the need. */
static void test_cap_keeps_the_prompts_prefix(void **state) {
    (void)state;
    char *dir = mk_dir();
    int32_t other[BS], tok[4 * BS];
    make_tokens(other, BS, 7);
    make_tokens(tok, 4 * BS, 8);
    pdb_store *s = open_store(dir, 0);
    write_prompt(s, other, BS);
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    uint64_t fb = stt.bytes;
    pdb_store_close(s);
    s = open_store(dir, fb * 3 + fb / 2); /* room for 3 blocks: `other` + 2 of the prompt, then other goes */
    pdb_store_stream *w = NULL;
    assert_int_equal(pdb_store_stream_begin(s, tok, 4 * BS, &w), PDB_OK);
    blockbuf b = bb_alloc();
    for (int64_t i = 0; i < 3; i++) {
        bb_fill(&b, pdb_store_stream_hash(w, i));
        assert_int_equal(pdb_store_stream_put(w, i, (const void *const *)b.p), PDB_OK);
    }
    assert_int_equal(prefix_of(s, other, BS), 0); /* evicted to make room for block 2 */
    assert_int_equal(prefix_of(s, tok, 4 * BS), 3);
    bb_fill(&b, pdb_store_stream_hash(w, 3));
    assert_int_equal(pdb_store_stream_put(w, 3, (const void *const *)b.p), PDB_TOO_LARGE);
    assert_non_null(strstr(pdb_err_msg(), "cannot hold block 3"));
    assert_int_equal(prefix_of(s, tok, 4 * BS), 3); /* the first three are still mountable */
    for (int64_t i = 0; i < 3; i++) assert_int_equal(load_and_check(s, pdb_store_stream_hash(w, i), i), PDB_OK);
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.evictions, 1);
    assert_true(stt.bytes <= stt.max_bytes);
    assert_true(stt.disk_free_bytes > 0);
    assert_consistent(s, dir);
    pdb_store_stream_abort(w);
    bb_free(&b);
    pdb_store_close(s);
    rm_dir(dir);
}

/* The disk refuses a block for lack of space (ENOSPC at every write until blocks are removed):
 * the store evicts least recently used blocks (not the prompt's own earlier ones) and retries
 * once, which succeeds; when the retry also fails the put fails and says it evicted. */
static int nospc_until_unlinks, nospc_failures;
static const char *nospc_dir;
static ssize_t nospc_write(int fd, const void *b, size_t n) {
    if (nospc_until_unlinks && count_tree(nospc_dir).blocks >= nospc_until_unlinks) {
        nospc_failures++;
        errno = ENOSPC;
        return -1;
    }
    return write(fd, b, n);
}

static void test_enospc_evicts_and_retries(void **state) {
    (void)state;
    char *dir = mk_dir();
    nospc_dir = dir;
    int32_t old1[BS], old2[BS], tok[2 * BS];
    make_tokens(old1, BS, 21);
    make_tokens(old2, BS, 22);
    make_tokens(tok, 2 * BS, 23);
    pdb_store *s = open_store(dir, 0); /* no cap: only the disk limits it */
    write_prompt(s, old1, BS);
    write_prompt(s, old2, BS);
    assert_int_equal(prefix_of(s, old2, BS), 1); /* old2 used last: old1 is the LRU */
    pdb_store_stream *w = NULL;
    assert_int_equal(pdb_store_stream_begin(s, tok, 2 * BS, &w), PDB_OK);
    blockbuf b = bb_alloc();
    bb_fill(&b, pdb_store_stream_hash(w, 0));
    assert_int_equal(pdb_store_stream_put(w, 0, (const void *const *)b.p), PDB_OK);
    /* "the disk holds 3 block files": block 1 of the prompt finds it full */
    pdb_store_io io = *pdb_block_default_io();
    io.write = nospc_write;
    nospc_until_unlinks = 3;
    nospc_failures = 0;
    pdb_store_set_io(s, &io);
    bb_fill(&b, pdb_store_stream_hash(w, 1));
    pdb_status st = pdb_store_stream_put(w, 1, (const void *const *)b.p);
    pdb_store_set_io(s, NULL);
    if (st != PDB_OK) fail_msg("put after ENOSPC: %s", pdb_err_msg());
    assert_int_equal(nospc_failures, 1);
    assert_int_equal(prefix_of(s, old1, BS), 0); /* the LRU block made room */
    assert_int_equal(prefix_of(s, tok, 2 * BS), 2); /* the prompt's block 0 was kept */
    assert_int_equal(load_and_check(s, pdb_store_stream_hash(w, 1), 1), PDB_OK);
    assert_int_equal(count_tree(dir).tmps, 0);
    pdb_store_stats stt;
    pdb_store_get_stats(s, &stt);
    assert_int_equal(stt.evictions, 1);
    assert_consistent(s, dir);
    pdb_store_stream_abort(w);
    /* the disk stays full: one retry, then a clear failure, the prefix still there */
    int32_t tok2[2 * BS];
    make_tokens(tok2, 2 * BS, 24);
    assert_int_equal(pdb_store_stream_begin(s, tok2, 2 * BS, &w), PDB_OK);
    bb_fill(&b, pdb_store_stream_hash(w, 0));
    assert_int_equal(pdb_store_stream_put(w, 0, (const void *const *)b.p), PDB_OK);
    nospc_until_unlinks = 1;
    nospc_failures = 0;
    pdb_store_set_io(s, &io);
    bb_fill(&b, pdb_store_stream_hash(w, 1));
    st = pdb_store_stream_put(w, 1, (const void *const *)b.p);
    pdb_store_set_io(s, NULL);
    assert_int_equal(st, PDB_TOO_LARGE);
    assert_int_equal(nospc_failures, 2);
    assert_non_null(strstr(pdb_err_msg(), "still no room after evicting"));
    assert_int_equal(prefix_of(s, tok2, 2 * BS), 1);
    assert_int_equal(count_tree(dir).tmps, 0);
    assert_consistent(s, dir);
    nospc_until_unlinks = 0;
    pdb_store_stream_abort(w);
    bb_free(&b);
    pdb_store_close(s);
    rm_dir(dir);
}

/* ---- streaming order --------------------------------------------------------------------------- */

static void test_put_order(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[3 * BS];
    make_tokens(tok, 3 * BS, 8);
    pdb_store_stream *w = NULL;
    assert_int_equal(pdb_store_stream_begin(s, tok, 3 * BS, &w), PDB_OK);
    assert_int_equal(pdb_store_stream_n_blocks(w), 3);
    blockbuf b = bb_alloc();
    bb_fill(&b, pdb_store_stream_hash(w, 1));
    assert_int_equal(pdb_store_stream_put(w, 1, (const void *const *)b.p), PDB_INVALID); /* 0 missing */
    bb_fill(&b, pdb_store_stream_hash(w, 0));
    assert_int_equal(pdb_store_stream_put(w, 0, (const void *const *)b.p), PDB_OK);
    assert_int_equal(pdb_store_stream_put(w, 0, (const void *const *)b.p), PDB_INVALID); /* not increasing */
    bb_fill(&b, pdb_store_stream_hash(w, 2));
    assert_int_equal(pdb_store_stream_put(w, 2, (const void *const *)b.p), PDB_INVALID); /* 1 missing */
    assert_int_equal(pdb_store_stream_put(w, 3, (const void *const *)b.p), PDB_INVALID); /* out of range */
    bb_fill(&b, pdb_store_stream_hash(w, 1));
    assert_int_equal(pdb_store_stream_put(w, 1, (const void *const *)b.p), PDB_OK);
    bb_fill(&b, pdb_store_stream_hash(w, 2));
    assert_int_equal(pdb_store_stream_put(w, 2, (const void *const *)b.p), PDB_OK);
    assert_int_equal(pdb_store_stream_finish(w), PDB_OK);
    /* a later stream may start past blocks already in the store */
    int32_t tok2[4 * BS];
    memcpy(tok2, tok, sizeof tok);
    make_tokens(tok2 + 3 * BS, BS, 9);
    assert_int_equal(pdb_store_stream_begin(s, tok2, 4 * BS, &w), PDB_OK);
    bb_fill(&b, pdb_store_stream_hash(w, 3));
    assert_int_equal(pdb_store_stream_put(w, 3, (const void *const *)b.p), PDB_OK);
    pdb_store_stream_abort(w);
    assert_int_equal(prefix_of(s, tok2, 4 * BS), 4);
    bb_free(&b);
    assert_consistent(s, dir);
    pdb_store_close(s);
    rm_dir(dir);
}

static void test_tmp_cleanup(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[BS];
    make_tokens(tok, BS, 10);
    write_prompt(s, tok, BS);
    pdb_store_close(s);
    uint8_t h[1][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, BS, BS, h), PDB_OK);
    char hex[65], dead[4096], dead_top[4096], live[4096];
    pdb_store_hash_hex(h[0], hex);
    snprintf(dead, sizeof dead, "%s/%.2s/.tmp-999999999-0-%s", dir, hex, hex); /* no such pid */
    snprintf(dead_top, sizeof dead_top, "%s/.tmp-999999999-1-small", dir);
    snprintf(live, sizeof live, "%s/%.2s/.tmp-%ld-77-%s", dir, hex, (long)getpid(), hex); /* a live writer */
    write_file(dead, (const uint8_t *)"partial", 7);
    write_file(dead_top, (const uint8_t *)"partial", 7);
    write_file(live, (const uint8_t *)"partial", 7);
    s = open_store(dir, 0);
    assert_int_equal(access(dead, F_OK), -1);
    assert_int_equal(access(dead_top, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    unlink(live);
    assert_int_equal(prefix_of(s, tok, BS), 1);
    assert_consistent(s, dir);
    pdb_store_close(s);
    rm_dir(dir);
}

/* ---- fault injection --------------------------------------------------------------------------- */

static int fi_calls, fi_fail_at, fi_nospace; /* fi_nospace: the failed call was a write refused for space */
static int fi_hit(void) { return ++fi_calls == fi_fail_at; }
static int fi_open(const char *p, int fl, mode_t m) {
    if (fi_hit()) { errno = EIO; return -1; }
    return open(p, fl, m);
}
static ssize_t fi_write(int fd, const void *b, size_t n) {
    if (fi_hit()) { /* disk full part way: half the bytes land in the temp file, then failure */
        if (n > 1 && write(fd, b, n / 2) < 0) return -1;
        fi_nospace = 1;
        errno = ENOSPC;
        return -1;
    }
    return write(fd, b, n);
}
static int fi_fsync(int fd) {
    if (fi_hit()) { errno = EIO; return -1; }
    return fsync(fd);
}
static int fi_close(int fd) {
    if (fi_hit()) { close(fd); errno = EIO; return -1; }
    return close(fd);
}
static int fi_rename(const char *a, const char *b) {
    if (fi_hit()) { errno = EXDEV; return -1; }
    return rename(a, b);
}
static const pdb_store_io FI_IO = {fi_open, fi_write, fi_fsync, fi_close, fi_rename};

static void test_fault_injection(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s = open_store(dir, 0);
    int32_t tok[2 * BS];
    make_tokens(tok, 2 * BS, 11);
    uint8_t h[2][32];
    assert_int_equal(pdb_store_hash_chain(FP, tok, 2 * BS, BS, h), PDB_OK);
    write_prompt(s, tok, BS); /* block 0 present */
    char p1[4096];
    block_path(dir, h[1], p1, sizeof p1);
    blockbuf b = bb_alloc();
    bb_fill(&b, h[1]);
    int n_fail = 0, visible_after_error = 0;
    for (int k = 1;; k++) {
        unlink(p1);
        assert_int_equal(prefix_of(s, tok, 2 * BS), 1); /* also drops the stale index entry */
        pdb_store_stream *w = NULL;
        assert_int_equal(pdb_store_stream_begin(s, tok, 2 * BS, &w), PDB_OK);
        fi_calls = 0;
        fi_fail_at = k;
        fi_nospace = 0;
        pdb_store_set_io(s, &FI_IO);
        pdb_status st = pdb_store_stream_put(w, 1, (const void *const *)b.p);
        pdb_store_set_io(s, NULL);
        int failed = fi_calls >= k;
        if (!failed) { /* every call up to the last one has been failed once */
            assert_int_equal(st, PDB_OK);
            pdb_store_stream_abort(w);
            break;
        }
        if (fi_nospace) { /* a full disk: the store made room and retried once, which succeeded */
            assert_int_equal(st, PDB_OK);
            assert_int_equal(count_tree(dir).tmps, 0);
            assert_int_equal(load_and_check(s, h[1], 1), PDB_OK);
            assert_consistent(s, dir);
            pdb_store_stream_abort(w);
            n_fail++;
            continue;
        }
        n_fail++;
        assert_int_not_equal(st, PDB_OK);
        assert_non_null(strstr(pdb_err_msg(), dir));
        /* no temp file; the block is either absent or complete and valid */
        tree_count tc = count_tree(dir);
        assert_int_equal(tc.tmps, 0);
        if (access(p1, F_OK) == 0) {
            visible_after_error++;
            assert_int_equal(load_and_check(s, h[1], 1), PDB_OK);
            assert_int_equal(prefix_of(s, tok, 2 * BS), 2);
        } else {
            assert_int_equal(prefix_of(s, tok, 2 * BS), 1);
            assert_int_equal(load_and_check(s, h[1], 1), PDB_NOT_FOUND);
        }
        assert_consistent(s, dir);
        /* the same stream may retry the block and succeeds */
        assert_int_equal(pdb_store_stream_put(w, 1, (const void *const *)b.p), PDB_OK);
        assert_int_equal(load_and_check(s, h[1], 1), PDB_OK);
        assert_consistent(s, dir);
        pdb_store_stream_abort(w);
    }
    /* open tmp, 3+ writes, fsync, close, rename, open dir, fsync dir, close dir */
    print_message("fault injection: %d calls failed in turn, %d left a complete block visible\n", n_fail, visible_after_error);
    assert_true(n_fail >= 9);
    assert_true(visible_after_error >= 1); /* failures after the rename */
    assert_int_equal(load_and_check(s, h[1], 1), PDB_OK);
    assert_consistent(s, dir);
    bb_free(&b);
    pdb_store_close(s);
    rm_dir(dir);
}

/* ---- threads ------------------------------------------------------------------------------------ */

typedef struct thr_arg {
    pdb_store *s;
    const int32_t *tok;
    int id;
    int errors;
} thr_arg;

#define THR_BLOCKS 4
static void *thr_main(void *p) {
    thr_arg *a = p;
    uint8_t h[THR_BLOCKS][32];
    blockbuf b = bb_alloc(), got = bb_alloc();
    if (pdb_store_hash_chain(FP, a->tok, THR_BLOCKS * BS, BS, h) != PDB_OK) a->errors++;
    for (int it = 0; it < 25; it++) {
        pdb_store_stream *w = NULL;
        if (pdb_store_stream_begin(a->s, a->tok, THR_BLOCKS * BS, &w) != PDB_OK) { a->errors++; continue; }
        for (int i = 0; i < THR_BLOCKS; i++) {
            bb_fill(&b, h[i]);
            if (pdb_store_stream_put(w, i, (const void *const *)b.p) != PDB_OK) {
                fprintf(stderr, "thread %d put %d: %s\n", a->id, i, pdb_err_msg());
                a->errors++;
                break;
            }
        }
        pdb_store_stream_finish(w);
        int64_t hit = -1;
        if (pdb_store_longest_prefix(a->s, (const uint8_t(*)[32])h, THR_BLOCKS, &hit) != PDB_OK || hit != THR_BLOCKS) {
            fprintf(stderr, "thread %d lookup: %" PRId64 "\n", a->id, hit);
            a->errors++;
        }
        int i = (it + a->id) % THR_BLOCKS;
        bb_fill(&b, h[i]);
        if (pdb_store_load_block(a->s, h[i], i, (void *const *)got.p) != PDB_OK) {
            fprintf(stderr, "thread %d load %d: %s\n", a->id, i, pdb_err_msg());
            a->errors++;
        } else {
            for (int q = 0; q < NP; q++)
                if (memcmp(b.p[q], got.p[q], pdb_store_pool_bytes(&POOLS[q], BS)) != 0) a->errors++;
        }
    }
    bb_free(&b);
    bb_free(&got);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    char *dir = mk_dir();
    pdb_store *s1 = open_store(dir, 0), *s2 = open_store(dir, 0); /* s2: as another process */
    int32_t tok[THR_BLOCKS * BS];
    make_tokens(tok, THR_BLOCKS * BS, 12);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){i < 3 ? s1 : s2, tok, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].errors, 0);
    }
    tree_count tc = count_tree(dir);
    assert_int_equal(tc.blocks, THR_BLOCKS);
    assert_int_equal(tc.tmps, 0);
    pdb_store_stats a, b;
    pdb_store_get_stats(s1, &a);
    pdb_store_get_stats(s2, &b);
    assert_int_equal(a.corrupt_removed + b.corrupt_removed, 0);
    assert_int_equal(a.n_blocks, THR_BLOCKS);
    assert_int_equal(b.n_blocks, THR_BLOCKS);
    assert_true(a.writes + b.writes >= THR_BLOCKS);
    assert_consistent(s1, dir);
    pdb_store_close(s1);
    pdb_store_close(s2);
    rm_dir(dir);
}

int main(void) {
    /* corruption tests warn on purpose; PDB_TEST_VERBOSE=1 shows the warnings */
    pdb_log_set_level(getenv("PDB_TEST_VERBOSE") ? PDB_LOG_DEBUG : PDB_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_known_answer),
        cmocka_unit_test(test_hash_sensitivity),
        cmocka_unit_test(test_pool_bytes),
        cmocka_unit_test(test_write_reopen_lookup),
        cmocka_unit_test(test_second_handle),
        cmocka_unit_test(test_flip_data_byte),
        cmocka_unit_test(test_flip_header_byte),
        cmocka_unit_test(test_name_mismatch),
        cmocka_unit_test(test_reopen_mismatch),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_load_blocks),
        cmocka_unit_test(test_cap_keeps_the_prompts_prefix),
        cmocka_unit_test(test_enospc_evicts_and_retries),
        cmocka_unit_test(test_put_order),
        cmocka_unit_test(test_tmp_cleanup),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
