/* test_faults_store: fault-injection torture of a block read (pdb_store_load_block) and of a
 * segment transfer (PDBF stream -> pdb_segment_parser -> pdb_store_stream_put, as the front runs
 * it). Every fallible call is failed in turn, one per run: allocations (malloc/calloc/realloc of
 * our code, and jansson's outside its parser), the read path's open/stat/fstat/mmap/utimensat/mkdir, OpenSSL digest
 * calls (all through link-time --wrap seams, see CMakeLists.txt), the store's write I/O (through
 * its pdb_store_io seam) and the parser callbacks. Invariants checked after every run:
 *   - no crash; no leaked fd (and no leak at exit under ASan);
 *   - a transient failure never destroys a valid block (it is still there and loads afterwards);
 *   - a successful load hands out exactly the written bytes;
 *   - no temp file survives; every visible .pdbblk verifies fully; the visible blocks are a
 *     prefix 0..m-1 of the chain and the transfer's own count is m or m-1 (the last block may be
 *     published even though its directory fsync failed);
 *   - a clean retry afterwards reaches the complete, correct state.
 * The counting run first asserts that each seam kind was actually reached, so a seam that stops
 * intercepting fails the test instead of silently passing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "pdb_segment.h"
#include "pdb_store.h"
#include "pdb_test_util.h"

/* ---- the injector ------------------------------------------------------------------------- */

enum { K_ALLOC, K_JSON, K_OPEN, K_STAT, K_FSTAT, K_MMAP, K_UTIME, K_MKDIR, K_DIGEST, K_IO_OPEN, K_IO_WRITE,
       K_IO_FSYNC, K_IO_CLOSE, K_IO_RENAME, K_CB_HEADER, K_CB_SEGMENT, K_COUNT };
static const char *const kind_names[K_COUNT] = {"alloc", "json_alloc", "open", "stat", "fstat", "mmap", "utimensat",
                                                "mkdir", "digest", "io.open", "io.write", "io.fsync", "io.close",
                                                "io.rename", "cb.header", "cb.segment"};
static int fi_armed;
static long fi_count, fi_fail_at, fi_failed;
static long fi_seen[K_COUNT];
static int fi_last_kind = -1;

static int fi_fail(int kind) {
    if (!fi_armed) return 0;
    fi_seen[kind]++;
    if (++fi_count == fi_fail_at) {
        fi_failed++;
        fi_last_kind = kind;
        return 1;
    }
    return 0;
}

static void fi_arm(long fail_at) {
    fi_count = 0;
    fi_fail_at = fail_at;
    fi_failed = 0;
    fi_last_kind = -1;
    memset(fi_seen, 0, sizeof fi_seen);
    fi_armed = 1;
}
static void fi_disarm(void) { fi_armed = 0; }

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
int __real_open(const char *p, int f, ...);
int __real_stat(const char *p, struct stat *sb);
int __real_fstat(int fd, struct stat *sb);
void *__real_mmap(void *a, size_t n, int prot, int fl, int fd, off_t off);
int __real_utimensat(int dfd, const char *p, const struct timespec t[2], int fl);
int __real_mkdir(const char *p, mode_t m);
EVP_MD_CTX *__real_EVP_MD_CTX_new(void);
int __real_EVP_DigestInit_ex(EVP_MD_CTX *c, const EVP_MD *t, ENGINE *e);
int __real_EVP_DigestUpdate(EVP_MD_CTX *c, const void *d, size_t n);
int __real_EVP_DigestFinal_ex(EVP_MD_CTX *c, unsigned char *md, unsigned int *s);
int __real_EVP_Digest(const void *d, size_t n, unsigned char *md, unsigned int *s, const EVP_MD *t, ENGINE *e);

void *__wrap_malloc(size_t n) { if (fi_fail(K_ALLOC)) { errno = ENOMEM; return NULL; } return __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { if (fi_fail(K_ALLOC)) { errno = ENOMEM; return NULL; } return __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { if (fi_fail(K_ALLOC)) { errno = ENOMEM; return NULL; } return __real_realloc(p, n); }
int __wrap_open(const char *p, int f, ...) {
    mode_t m = 0;
    if (f & O_CREAT) { va_list ap; va_start(ap, f); m = (mode_t)va_arg(ap, int); va_end(ap); }
    if (fi_fail(K_OPEN)) { errno = EIO; return -1; }
    return __real_open(p, f, m);
}
int __wrap_stat(const char *p, struct stat *sb) { if (fi_fail(K_STAT)) { errno = EIO; return -1; } return __real_stat(p, sb); }
int __wrap_fstat(int fd, struct stat *sb) { if (fi_fail(K_FSTAT)) { errno = EIO; return -1; } return __real_fstat(fd, sb); }
void *__wrap_mmap(void *a, size_t n, int prot, int fl, int fd, off_t off) {
    if (fi_fail(K_MMAP)) { errno = ENOMEM; return MAP_FAILED; }
    return __real_mmap(a, n, prot, fl, fd, off);
}
int __wrap_utimensat(int dfd, const char *p, const struct timespec t[2], int fl) {
    if (fi_fail(K_UTIME)) { errno = EIO; return -1; }
    return __real_utimensat(dfd, p, t, fl);
}
int __wrap_mkdir(const char *p, mode_t m) { if (fi_fail(K_MKDIR)) { errno = ENOSPC; return -1; } return __real_mkdir(p, m); }
EVP_MD_CTX *__wrap_EVP_MD_CTX_new(void) { return fi_fail(K_DIGEST) ? NULL : __real_EVP_MD_CTX_new(); }
int __wrap_EVP_DigestInit_ex(EVP_MD_CTX *c, const EVP_MD *t, ENGINE *e) { return fi_fail(K_DIGEST) ? 0 : __real_EVP_DigestInit_ex(c, t, e); }
int __wrap_EVP_DigestUpdate(EVP_MD_CTX *c, const void *d, size_t n) { return fi_fail(K_DIGEST) ? 0 : __real_EVP_DigestUpdate(c, d, n); }
int __wrap_EVP_DigestFinal_ex(EVP_MD_CTX *c, unsigned char *md, unsigned int *s) {
    return fi_fail(K_DIGEST) ? 0 : __real_EVP_DigestFinal_ex(c, md, s);
}
int __wrap_EVP_Digest(const void *d, size_t n, unsigned char *md, unsigned int *s, const EVP_MD *t, ENGINE *e) {
    return fi_fail(K_DIGEST) ? 0 : __real_EVP_Digest(d, n, md, s, t, e);
}
/* jansson 2.14's parser is not allocation-failure safe (measured: some failures are reported as
 * syntax errors, one corrupts the heap), so allocations inside json_load* are never failed; those
 * of building and dumping JSON are. */
static int in_json_parse;
static void *json_fi_malloc(size_t n) { if (!in_json_parse && fi_fail(K_JSON)) return NULL; return __real_malloc(n); }
json_t *__real_json_loadb(const char *b, size_t n, size_t fl, json_error_t *e);
json_t *__real_json_loads(const char *b, size_t fl, json_error_t *e);
json_t *__wrap_json_loadb(const char *b, size_t n, size_t fl, json_error_t *e) {
    in_json_parse++;
    json_t *j = __real_json_loadb(b, n, fl, e);
    in_json_parse--;
    return j;
}
json_t *__wrap_json_loads(const char *b, size_t fl, json_error_t *e) {
    in_json_parse++;
    json_t *j = __real_json_loads(b, fl, e);
    in_json_parse--;
    return j;
}

/* store write I/O through the store's own seam */
static int io_open(const char *p, int f, mode_t m) { if (fi_fail(K_IO_OPEN)) { errno = ENOSPC; return -1; } return __real_open(p, f, m); }
static ssize_t io_write(int fd, const void *b, size_t n) {
    if (fi_fail(K_IO_WRITE)) { errno = ENOSPC; return -1; }
    if (n > 1000 && fi_fail(K_IO_WRITE)) return write(fd, b, n / 2); /* a short write, then the loop goes on */
    return write(fd, b, n);
}
static int io_fsync(int fd) { if (fi_fail(K_IO_FSYNC)) { errno = EIO; return -1; } return fsync(fd); }
static int io_close(int fd) {
    if (fi_fail(K_IO_CLOSE)) { close(fd); errno = EIO; return -1; } /* the fd is gone either way (POSIX) */
    return close(fd);
}
static int io_rename(const char *a, const char *b) { if (fi_fail(K_IO_RENAME)) { errno = EXDEV; return -1; } return rename(a, b); }
static const pdb_store_io FI_IO = {io_open, io_write, io_fsync, io_close, io_rename};

/* ---- fixture ------------------------------------------------------------------------------- */

#define BS 128
#define LAYERS 2
#define WIDTH 16
#define NBLK 4
#define POOL_FLOATS (LAYERS * BS * WIDTH)

static const pdb_store_pool POOL = {.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = LAYERS, .stride = 1,
                                    .width = WIDTH, .dtype = PDB_DT_F32};
static const pdb_store_layout LAYOUT = {.n_pools = 1, .pools = &POOL};
static uint8_t FP[32];
static char FP_HEX[65];
static int32_t TOKENS[NBLK * BS + 7];
static float REF[NBLK][POOL_FLOATS];
static uint8_t HASHES[NBLK][32];

static void fixture_init(void) {
    for (int i = 0; i < 32; i++) FP[i] = (uint8_t)(0xA0 + i);
    pdb_store_hash_hex(FP, FP_HEX);
    for (int i = 0; i < NBLK * BS + 7; i++) TOKENS[i] = (i * 7919) % 5000;
    for (int b = 0; b < NBLK; b++)
        for (int i = 0; i < POOL_FLOATS; i++) REF[b][i] = (float)(b * 1000 + i) * 0.125f;
    PDB_TEST_OK(pdb_store_hash_chain(FP, TOKENS, NBLK * BS, BS, HASHES));
    json_set_alloc_funcs(json_fi_malloc, free);
    if (!getenv("PDB_FAULT_VERBOSE")) pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1)); /* thousands of expected failures */
}

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Walk the store: no temp files; returns the set of visible block indices as a bit mask (files
 * not of this chain fail the test). */
static unsigned visible_blocks(const char *dir) {
    unsigned mask = 0;
    DIR *top = opendir(dir);
    assert_non_null(top);
    struct dirent *d;
    while ((d = readdir(top))) {
        if (d->d_name[0] == '.' && (!d->d_name[1] || d->d_name[1] == '.')) continue;
        if (!strncmp(d->d_name, ".tmp-", 5)) fail_msg("temp file left: %s/%s", dir, d->d_name);
        if (strlen(d->d_name) != 2) continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, d->d_name);
        DIR *dd = opendir(sub);
        assert_non_null(dd);
        struct dirent *f;
        while ((f = readdir(dd))) {
            if (f->d_name[0] == '.' && (!f->d_name[1] || f->d_name[1] == '.')) continue;
            if (!strncmp(f->d_name, ".tmp-", 5)) fail_msg("temp file left: %s/%s", sub, f->d_name);
            int found = -1;
            for (int b = 0; b < NBLK; b++) {
                char hex[65];
                pdb_store_hash_hex(HASHES[b], hex);
                if (!strncmp(f->d_name, hex, 64) && !strcmp(f->d_name + 64, ".pdbblk")) found = b;
            }
            if (found < 0) fail_msg("unexpected file %s/%s", sub, f->d_name);
            mask |= 1u << found;
        }
        closedir(dd);
    }
    closedir(top);
    return mask;
}

/* Every visible block loads (full verification) with exactly the reference bytes. */
static void check_visible_blocks_verify(const char *dir, unsigned mask) {
    pdb_store *s = NULL;
    PDB_TEST_OK(pdb_store_open(dir, &LAYOUT, FP, BS, 0, &s));
    static float out[POOL_FLOATS];
    void *po[1] = {out};
    for (int b = 0; b < NBLK; b++) {
        if (!(mask & (1u << b))) continue;
        memset(out, 0, sizeof out);
        pdb_status st = pdb_store_load_block(s, HASHES[b], b, po);
        if (st) fail_msg("visible block %d does not verify: %s", b, pdb_err_msg());
        assert_memory_equal(out, REF[b], sizeof out);
    }
    pdb_store_close(s);
}

/* ---- block read -------------------------------------------------------------------------- */

static void write_blocks(const char *dir, int n) {
    pdb_store *s = NULL;
    PDB_TEST_OK(pdb_store_open(dir, &LAYOUT, FP, BS, 0, &s));
    pdb_store_stream *w = NULL;
    PDB_TEST_OK(pdb_store_stream_begin(s, TOKENS, (int64_t)n * BS, &w));
    for (int b = 0; b < n; b++) {
        const void *pd[1] = {REF[b]};
        PDB_TEST_OK(pdb_store_stream_put(w, b, pd));
    }
    PDB_TEST_OK(pdb_store_stream_finish(w));
    pdb_store_close(s);
}

static int lookup_misses;

/* A lookup of blocks 0-1 and a load of block 1 on a fresh handle, failing call #fail_at. */
static long one_read(const char *dir, long fail_at, pdb_status *st_out, long seen[K_COUNT]) {
    pdb_store *s = NULL;
    PDB_TEST_OK(pdb_store_open(dir, &LAYOUT, FP, BS, 0, &s));
    static float out[POOL_FLOATS];
    memset(out, 0, sizeof out);
    void *po[1] = {out};
    int64_t hit = -1;
    fi_arm(fail_at);
    /* a lookup may under-report under a fault (a miss is safe: the decoder recomputes), never
     * over-report; the load runs either way */
    pdb_status st = pdb_store_longest_prefix(s, (const uint8_t(*)[32])HASHES, 2, &hit);
    if (st == PDB_OK && hit != 2) lookup_misses++;
    assert_true(hit >= 0 && hit <= 2);
    pdb_status st2 = pdb_store_load_block(s, HASHES[1], 1, po);
    fi_disarm();
    long n = fi_count;
    if (seen) memcpy(seen, fi_seen, sizeof fi_seen);
    if (st == PDB_OK && fail_at == 0) assert_int_equal(hit, 2);
    if (st2 == PDB_OK) assert_memory_equal(out, REF[1], sizeof out); /* a successful load is exact */
    pdb_store_close(s);
    *st_out = st ? st : st2;
    return n;
}

static void test_read_torture(void **state) {
    (void)state;
    char *dir = pdb_test_tmpdir("fault-read");
    write_blocks(dir, 2);
    pdb_status st;
    long seen[K_COUNT];
    int fds0 = count_fds();
    long total = one_read(dir, 0, &st, seen);
    assert_int_equal(st, PDB_OK);
    const int need[] = {K_ALLOC, K_OPEN, K_STAT, K_FSTAT, K_MMAP, K_UTIME, K_DIGEST};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!seen[need[i]]) fail_msg("seam '%s' never reached on the read path: the --wrap seams are not linked", kind_names[need[i]]);
    printf("read path: %ld fallible calls (", total);
    for (int k = 0; k < K_COUNT; k++) if (seen[k]) printf(" %s=%ld", kind_names[k], seen[k]);
    printf(" )\n");
    int n_ok = 0, n_err = 0;
    for (long k = 1; k <= total; k++) {
        one_read(dir, k, &st, NULL);
        if (fi_failed != 1) fail_msg("call #%ld was not reached (nondeterministic path?)", k);
        if (st == PDB_OK) n_ok++;
        else n_err++;
        /* a transient failure must not have cost the block: it is still there and loads */
        unsigned mask = visible_blocks(dir);
        if (mask != 3u)
            fail_msg("failing call #%ld (%s) of a block read destroyed a valid block (status %s, blocks mask %#x)", k,
                     kind_names[fi_last_kind], pdb_status_str(st), mask);
        pdb_status st2;
        one_read(dir, 0, &st2, NULL);
        if (st2 != PDB_OK) fail_msg("after failing call #%ld (%s) the block no longer loads: %s", k, kind_names[fi_last_kind], pdb_err_msg());
        assert_int_equal(count_fds(), fds0);
    }
    printf("read torture: %ld runs, %d still succeeded (tolerated failure), %d reported an error, %d lookups under-reported;"
           " no block lost\n", total, n_ok, n_err, lookup_misses);
    pdb_test_rmrf(dir);
    free(dir);
}

/* ---- segment transfer ------------------------------------------------------------------- */

static uint8_t *STREAM;
static size_t STREAM_LEN;

static void append(const void *p, size_t n) {
    STREAM = __real_realloc(STREAM, STREAM_LEN + n);
    memcpy(STREAM + STREAM_LEN, p, n);
    STREAM_LEN += n;
}

static void build_stream(void) {
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"version\":1,\"fingerprint\":\"%s\",\"block_size\":%d,\"first_block\":0,\"n_blocks\":%d,\"block_bytes\":%d}",
                      FP_HEX, BS, NBLK, (int)sizeof REF[0]);
    uint8_t pre[16], head[40];
    pdb_segment_frame_prefix(PDB_SEG_HEADER, (uint64_t)hl, pre);
    append(pre, 16);
    append(hdr, (size_t)hl);
    for (int b = 0; b < NBLK; b++) {
        pdb_segment_frame_prefix(PDB_SEG_SEGMENT, 40 + sizeof REF[b], pre);
        pdb_segment_payload_head(b, REF[b], sizeof REF[b], head);
        append(pre, 16);
        append(head, 40);
        append(REF[b], sizeof REF[b]);
    }
    const char *msg = "{\"engine_s\":0.5,\"tokens\":512,\"blocks\":4}";
    uint8_t end[8];
    int32_t zero = 0;
    uint32_t ml = (uint32_t)strlen(msg);
    memcpy(end, &zero, 4);
    memcpy(end + 4, &ml, 4);
    pdb_segment_frame_prefix(PDB_SEG_END, 8 + ml, pre);
    append(pre, 16);
    append(end, 8);
    append(msg, ml);
}

typedef struct {
    pdb_store *store;
    pdb_store_stream *w;
    int64_t written;
    int got_end;
} xfer;

static pdb_status cb_header(void *u, const pdb_segment_header *h) {
    xfer *x = u;
    if (fi_fail(K_CB_HEADER)) return pdb_err_set(PDB_MISMATCH, "injected: header refused");
    if (strcmp(h->fingerprint, FP_HEX) || h->block_bytes != pdb_store_block_bytes(x->store))
        return pdb_err_set(PDB_MISMATCH, "header does not match");
    return PDB_OK;
}

static pdb_status cb_segment(void *u, int64_t b, const void *data, uint64_t len) {
    xfer *x = u;
    if (fi_fail(K_CB_SEGMENT)) return pdb_err_set(PDB_IO, "injected: segment %lld refused", (long long)b);
    const void *pd[1] = {data};
    pdb_status s = pdb_store_stream_put(x->w, b, pd);
    if (s) return s;
    x->written++;
    (void)len;
    return PDB_OK;
}

static void cb_end(void *u, int32_t status, const char *msg) {
    xfer *x = u;
    x->got_end = status == 0;
    (void)msg;
}

/* One transfer into dir (store opened fresh), failing call #fail_at; feeds in 777-byte chunks so
 * frames straddle reads. Returns the number of counted calls. */
static long one_transfer(const char *dir, long fail_at, int64_t *written, int *complete, long seen[K_COUNT]) {
    pdb_store *s = NULL;
    PDB_TEST_OK(pdb_store_open(dir, &LAYOUT, FP, BS, 0, &s));
    pdb_store_set_io(s, &FI_IO);
    xfer x = {.store = s};
    pdb_segment_parser_cbs cbs = {cb_header, cb_segment, cb_end, &x};
    pdb_segment_parser *p = NULL;
    fi_arm(fail_at);
    pdb_status st = pdb_segment_parser_init(&p, &cbs, pdb_store_block_bytes(s));
    if (!st) st = pdb_store_stream_begin(s, TOKENS, NBLK * BS + 7, &x.w);
    for (size_t o = 0; !st && o < STREAM_LEN; o += 777) {
        size_t n = STREAM_LEN - o < 777 ? STREAM_LEN - o : 777;
        st = pdb_segment_parser_feed(p, STREAM + o, n);
    }
    if (x.w) pdb_store_stream_finish(x.w);
    pdb_segment_parser_free(p);
    fi_disarm();
    long n = fi_count;
    if (seen) memcpy(seen, fi_seen, sizeof fi_seen);
    *written = x.written;
    *complete = !st && x.got_end && x.written == NBLK;
    pdb_store_close(s);
    return n;
}

static void test_transfer_torture(void **state) {
    (void)state;
    build_stream();
    char *dir = pdb_test_tmpdir("fault-xfer");
    int64_t written;
    int complete;
    long seen[K_COUNT];
    int fds0 = count_fds();
    long total = one_transfer(dir, 0, &written, &complete, seen);
    assert_true(complete);
    assert_int_equal(visible_blocks(dir), (1u << NBLK) - 1);
    const int need[] = {K_ALLOC, K_JSON, K_MKDIR, K_DIGEST, K_IO_OPEN, K_IO_WRITE, K_IO_FSYNC, K_IO_CLOSE, K_IO_RENAME,
                        K_CB_HEADER, K_CB_SEGMENT};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!seen[need[i]]) fail_msg("seam '%s' never reached by a transfer", kind_names[need[i]]);
    printf("segment transfer: %ld fallible calls (", total);
    for (int k = 0; k < K_COUNT; k++) if (seen[k]) printf(" %s=%ld", kind_names[k], seen[k]);
    printf(" )\n");
    pdb_test_rmrf(dir);
    int hist[NBLK + 1] = {0};
    for (long k = 1; k <= total; k++) {
        mkdir(dir, 0755);
        one_transfer(dir, k, &written, &complete, NULL);
        if (fi_failed != 1) fail_msg("call #%ld was not reached", k);
        unsigned mask = visible_blocks(dir); /* also: no temp file */
        int m = 0;
        while (m < NBLK && (mask & (1u << m))) m++;
        if (mask != (1u << m) - 1) fail_msg("failing call #%ld (%s): visible blocks %#x are not a prefix", k, kind_names[fi_last_kind], mask);
        if (!(written == m || written == m - 1))
            fail_msg("failing call #%ld (%s): transfer counted %lld blocks, store shows %d", k, kind_names[fi_last_kind],
                     (long long)written, m);
        if (complete && m != NBLK) fail_msg("failing call #%ld: reported complete with %d blocks", k, m);
        check_visible_blocks_verify(dir, mask);
        hist[m]++;
        /* a clean retry completes the store */
        one_transfer(dir, 0, &written, &complete, NULL);
        if (!complete || visible_blocks(dir) != (1u << NBLK) - 1)
            fail_msg("retry after failing call #%ld (%s) did not complete", k, kind_names[fi_last_kind]);
        check_visible_blocks_verify(dir, (1u << NBLK) - 1);
        assert_int_equal(count_fds(), fds0);
        pdb_test_rmrf(dir);
    }
    printf("transfer torture: %ld runs; blocks left by the failed transfer:", total);
    for (int m = 0; m <= NBLK; m++) printf(" %d->%d runs", m, hist[m]);
    printf("; all verified, no temp files, retries complete\n");
    free(dir);
    free(STREAM);
    STREAM = NULL;
    STREAM_LEN = 0;
}

int main(void) {
    fixture_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_torture),
        cmocka_unit_test(test_transfer_torture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
