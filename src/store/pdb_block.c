/* pdb_block: write and verify one prefix-cache block file (format below and in
 * docs/formats/block.md). Invariants: see pdb_block.h. All writes go through a pdb_store_io
 * table (the fault-injection seam); temp files are removed with plain unlink() so cleanup
 * itself cannot be failed by the seam. Reading goes through pdb_st_open (core), so a block
 * file is by construction a file standard safetensors readers accept; a mount reads the pools'
 * bytes from the same descriptor with pread into the caller's buffers (PDB_ST_KEEP_FD). */
#include "pdb_block.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "pdb_safetensors.h"
#include "pdb_sys.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pdb_block writes tensor bytes as they are in memory: little-endian hosts only"
#endif

/* ---- default I/O table ---------------------------------------------------------------------- */

static int io_open(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }
static ssize_t io_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
static int io_fsync(int fd) { return fsync(fd); }
static int io_close(int fd) { return close(fd); }
static int io_rename(const char *a, const char *b) { return rename(a, b); }
static const pdb_store_io default_io = {io_open, io_write, io_fsync, io_close, io_rename};
const pdb_store_io *pdb_block_default_io(void) { return &default_io; }

/* ---- hashing ---------------------------------------------------------------------------------- */

static uint8_t root_hash[32];
static atomic_int root_ready;

const uint8_t *pdb_block_root_hash(void) {
    if (!atomic_load_explicit(&root_ready, memory_order_acquire)) {
        static const char seed[] = "pdbridge-root-v1";
        uint8_t tmp[32];
        unsigned int n = 0;
        int ok = EVP_Digest(seed, sizeof seed - 1, tmp, &n, EVP_sha256(), NULL);
        PDB_ASSERT(ok == 1 && n == 32, "SHA-256 of the root constant failed");
        memcpy(root_hash, tmp, 32); /* idempotent: racing threads write the same bytes */
        atomic_store_explicit(&root_ready, 1, memory_order_release);
    }
    return root_hash;
}

pdb_status pdb_block_hash_one(const uint8_t *fingerprint, const uint8_t *parent,
                              const int32_t *tokens, int64_t n_tokens, uint8_t out[32]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return pdb_err_set(PDB_NOMEM, "chain hash: EVP_MD_CTX_new failed");
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, fingerprint, 32) == 1 && EVP_DigestUpdate(ctx, parent, 32) == 1;
    uint8_t buf[4 * 256];
    for (int64_t i = 0; ok && i < n_tokens;) {
        int64_t n = n_tokens - i < 256 ? n_tokens - i : 256;
        for (int64_t k = 0; k < n; k++) {
            uint32_t v = (uint32_t)tokens[i + k];
            buf[4 * k + 0] = (uint8_t)v;
            buf[4 * k + 1] = (uint8_t)(v >> 8);
            buf[4 * k + 2] = (uint8_t)(v >> 16);
            buf[4 * k + 3] = (uint8_t)(v >> 24);
        }
        ok = EVP_DigestUpdate(ctx, buf, (size_t)(4 * n)) == 1;
        i += n;
    }
    unsigned int len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    return ok ? PDB_OK : pdb_err_set(PDB_NOMEM, "chain hash: SHA-256 failed");
}

int pdb_block_parse_hex(const char *s, uint8_t out[32]) {
    if (!s || strlen(s) != 64) return 0;
    for (int i = 0; i < 32; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return 0;
            v = v * 16 + d;
        }
        out[i] = (uint8_t)v;
    }
    return 1;
}

/* ---- writing ---------------------------------------------------------------------------------- */

static atomic_uint_fast64_t tmp_seq;

/* Write all n bytes; returns 0 or an errno. */
static int write_all(const pdb_store_io *io, int fd, const void *buf, uint64_t n) {
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = io->write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno ? errno : EIO;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (uint64_t)w;
    }
    return 0;
}

static int fsync_dir(const pdb_store_io *io, const char *dir_path) {
    int fd = io->open(dir_path, O_RDONLY | pdb_sys_o_directory() | O_CLOEXEC, 0);
    if (fd < 0) return errno ? errno : EIO;
    int err = io->fsync(fd) != 0 ? (errno ? errno : EIO) : 0;
    if (io->close(fd) != 0 && !err) err = errno ? errno : EIO;
    return err;
}

/* Create a uniquely named temp file in dir_path, write the pieces, fsync, close.
 * On failure nothing is left behind. */
/* The disk (or the user's quota) is full: reported as PDB_TOO_LARGE so the store can make room. */
#define NO_SPACE(e) ((e) == ENOSPC || (e) == EDQUOT)

static pdb_status write_temp(const pdb_store_io *io, const char *dir_path, const char *what,
                             const void *const *bufs, const uint64_t *lens, int n_bufs,
                             char *tmp_path, size_t tmp_cap) {
    uint64_t seq = atomic_fetch_add(&tmp_seq, 1);
    int n = snprintf(tmp_path, tmp_cap, "%s/" PDB_BLOCK_TMP_PREFIX "%ld-%" PRIu64 "-%s", dir_path,
                     (long)getpid(), seq, what);
    if (n < 0 || (size_t)n >= tmp_cap) return pdb_err_set(PDB_INVALID, "path too long in %s", dir_path);
    int fd = io->open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        return pdb_err_set(NO_SPACE(e) ? PDB_TOO_LARGE : PDB_IO, "create %s: %s", tmp_path, strerror(e));
    }
    int err = 0;
    const char *step = "write";
    for (int i = 0; i < n_bufs && !err; i++) err = write_all(io, fd, bufs[i], lens[i]);
    if (!err) {
        step = "fsync";
        if (io->fsync(fd) != 0) err = errno ? errno : EIO;
    }
    if (io->close(fd) != 0 && !err) {
        step = "close";
        err = errno ? errno : EIO;
    }
    if (err) {
        unlink(tmp_path);
        return pdb_err_set(NO_SPACE(err) ? PDB_TOO_LARGE : PDB_IO, "%s %s: %s", step, tmp_path, strerror(err));
    }
    return PDB_OK;
}

/* Block file format, byte by byte (version 2; also docs/formats/block.md; version 2 = version 1 whose
 * pools may also be U8 rows an architecture defines, e.g. DeepSeek-V4's official FP8 / FP4 cache rows,
 * laid out byte by byte in src/model/deepseek_v4/pdb_v4_rows.h and docs/formats/block.md):
 *
 *   offset   size  content
 *   0        8     N, u64 little-endian: length of the JSON header; 8 + N is a multiple of 8
 *   8        N     JSON header, UTF-8, compact, then spaces (0x20) up to the 8-byte boundary:
 *                  {"__metadata__":{"format":"pdbridge-block","version":"2",
 *                    "block_hash":H,"parent_hash":P,"block_index":I,"token_count":T,
 *                    "block_size":S,"fingerprint":F,"created_at":C,"checksum":K},
 *                   "tokens":{"dtype":"I32","shape":[S],"data_offsets":[0,4*S]},
 *                   "<pool 0>":{"dtype":D0,"shape":[L0,R0,W0],"data_offsets":[4*S,4*S+B0]},
 *                   ... one entry per pool, in layout order, offsets contiguous ...}
 *                  All metadata values are strings (safetensors requires str -> str):
 *                  H, P, F, K: 64 lower-case hex chars (SHA-256 digests); I, T, S, C: decimal
 *                  integers (T == S: only full blocks exist; C = unix seconds, the only field
 *                  that differs between two writes of the same block); P = the root constant
 *                  SHA-256("pdbridge-root-v1") for I = 0; H = SHA-256(F || P || tokens as u32 LE).
 *   8+N      4*S   tensor "tokens": the block's token ids, i32 little-endian
 *   ...      B_p   tensor "<pool p>": [n_layers, rows, width] row-major, dtype D_p, elements as
 *                  the dtype's little-endian bytes; B_p = pdb_store_pool_bytes(pool p);
 *                  rows = block_size / stride (APPEND) or rows (STATE)
 *   end            the file ends right after the last pool; no gaps, no padding in the data
 *
 * K = SHA-256 over all tensor bytes in file order (the whole data area, tokens first). */
pdb_status pdb_block_write(const pdb_store_io *io, const char *dir_path, const pdb_block_id *id,
                           const pdb_store_layout *layout, const int32_t *tokens,
                           const void *const *pool_data, int *published, uint64_t *file_bytes) {
    *published = 0;
    *file_bytes = 0;
    int np = layout->n_pools;
    PDB_ASSERT(np >= 1 && np <= PDB_STORE_MAX_POOLS, "layout validated at open");
    PDB_ASSERT(id->parent != NULL, "a writer always knows the parent hash");
    const int64_t S = id->block_size;
    uint64_t tok_bytes = 4 * (uint64_t)S;
    uint64_t lens[1 + 1 + PDB_STORE_MAX_POOLS];
    const void *bufs[1 + 1 + PDB_STORE_MAX_POOLS];
    char hex[65], phex[65], fhex[65], khex[65], num[4][32];
    char final_path[4096], tmp_path[4096];
    pdb_status st = PDB_OK;
    json_t *root = NULL;
    char *js = NULL;
    uint8_t *head = NULL;

    pdb_store_hash_hex(id->hash, hex);
    if (snprintf(final_path, sizeof final_path, "%s/%s" PDB_BLOCK_EXT, dir_path, hex) >= (int)sizeof final_path)
        return pdb_err_set(PDB_INVALID, "path too long in %s", dir_path);

    /* checksum over the data area: tokens (LE, which is memory order here) then pools */
    uint8_t sum[32];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return pdb_err_set(PDB_NOMEM, "block %s: EVP_MD_CTX_new failed", hex);
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, tokens, (size_t)tok_bytes) == 1;
    for (int p = 0; ok && p < np; p++)
        ok = EVP_DigestUpdate(ctx, pool_data[p], (size_t)pdb_store_pool_bytes(&layout->pools[p], S)) == 1;
    unsigned int sl = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, sum, &sl) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) return pdb_err_set(PDB_NOMEM, "block %s: SHA-256 failed", hex);
    pdb_store_hash_hex(id->parent, phex);
    pdb_store_hash_hex(id->fingerprint, fhex);
    pdb_store_hash_hex(sum, khex);
    snprintf(num[0], sizeof num[0], "%" PRId64, id->block_index);
    snprintf(num[1], sizeof num[1], "%" PRId64, S);
    snprintf(num[2], sizeof num[2], "%" PRId64, S);
    snprintf(num[3], sizeof num[3], "%lld", (long long)time(NULL));

    root = json_object();
    json_t *meta = json_object();
    if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
        if (!root) json_decref(meta);
        st = pdb_err_set(PDB_NOMEM, "block %s: building header", hex);
        goto out;
    }
    const char *mk[] = {"format", "version", "block_hash", "parent_hash", "block_index", "token_count",
                        "block_size", "fingerprint", "created_at", "checksum"};
    const char *mv[] = {PDB_BLOCK_FORMAT, PDB_BLOCK_VERSION, hex, phex, num[0], num[1],
                        num[2], fhex, num[3], khex};
    for (size_t i = 0; i < sizeof mk / sizeof mk[0]; i++) {
        if (json_object_set_new(meta, mk[i], json_string(mv[i])) != 0) {
            st = pdb_err_set(PDB_NOMEM, "block %s: building header", hex);
            goto out;
        }
    }
    uint64_t off = 0;
    for (int t = -1; t < np; t++) {
        const char *name = t < 0 ? "tokens" : layout->pools[t].name;
        pdb_dtype dt = t < 0 ? PDB_DT_I32 : layout->pools[t].dtype;
        uint64_t nb = t < 0 ? tok_bytes : pdb_store_pool_bytes(&layout->pools[t], S);
        json_t *shape = t < 0 ? json_pack("[I]", (json_int_t)S)
                              : json_pack("[III]", (json_int_t)layout->pools[t].n_layers,
                                          (json_int_t)pdb_store_pool_rows(&layout->pools[t], S),
                                          (json_int_t)layout->pools[t].width);
        json_t *ent = shape ? json_pack("{s:s,s:o,s:[I,I]}", "dtype", pdb_dtype_name(dt), "shape", shape,
                                        "data_offsets", (json_int_t)off, (json_int_t)(off + nb))
                            : NULL;
        if (!ent || json_object_set_new(root, name, ent) != 0) {
            st = pdb_err_set(PDB_NOMEM, "block %s: building header", hex);
            goto out;
        }
        bufs[2 + t] = t < 0 ? (const void *)tokens : pool_data[t];
        lens[2 + t] = nb;
        off += nb;
    }
    js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!js) {
        st = pdb_err_set(PDB_NOMEM, "block %s: serializing header", hex);
        goto out;
    }
    { /* jansson 2.14 drops an object key it fails to allocate and still returns a string: the
       * header must parse back to what was built before it is published */
        json_t *back = json_loads(js, JSON_REJECT_DUPLICATES, NULL);
        int same = back && json_equal(back, root);
        json_decref(back);
        if (!same) {
            st = pdb_err_set(PDB_NOMEM, "block %s: serialized header does not parse back (out of memory?)", hex);
            goto out;
        }
    }
    uint64_t jl = strlen(js), hl = (jl + 7) & ~(uint64_t)7;
    head = malloc(8 + hl);
    if (!head) {
        st = pdb_err_set(PDB_NOMEM, "block %s: header buffer", hex);
        goto out;
    }
    pdb_put_le64(head, hl);
    memcpy(head + 8, js, jl);
    memset(head + 8 + jl, ' ', hl - jl);
    bufs[0] = head;
    lens[0] = 8 + hl;

    /* bufs: [0] header, [1] tokens, [2 + p] pool p */
    st = write_temp(io, dir_path, hex, bufs, lens, 2 + np, tmp_path, sizeof tmp_path);
    if (st != PDB_OK) goto out;
    if (io->rename(tmp_path, final_path) != 0) {
        int e = errno;
        unlink(tmp_path);
        st = pdb_err_set(PDB_IO, "rename %s -> %s: %s", tmp_path, final_path, strerror(e));
        goto out;
    }
    *published = 1;
    *file_bytes = 8 + hl + off;
    int e = fsync_dir(io, dir_path);
    if (e) st = pdb_err_set(PDB_IO, "block %s published but fsync of %s failed: %s", final_path, dir_path, strerror(e));
out:
    free(head);
    free(js);
    json_decref(root);
    return st;
}

pdb_status pdb_block_write_small(const pdb_store_io *io, const char *dir_path, const char *path,
                                 const void *data, size_t n, int exclusive, int *existed) {
    char tmp_path[4096];
    const void *bufs[1] = {data};
    uint64_t lens[1] = {n};
    *existed = 0;
    PDB_TRY(write_temp(io, dir_path, "small", bufs, lens, 1, tmp_path, sizeof tmp_path));
    if (exclusive) {
        if (link(tmp_path, path) != 0) {
            int e = errno;
            unlink(tmp_path);
            if (e == EEXIST) {
                *existed = 1;
                return PDB_OK;
            }
            return pdb_err_set(PDB_IO, "link %s -> %s: %s", tmp_path, path, strerror(e));
        }
        unlink(tmp_path);
    } else if (io->rename(tmp_path, path) != 0) {
        int e = errno;
        unlink(tmp_path);
        return pdb_err_set(PDB_IO, "rename %s -> %s: %s", tmp_path, path, strerror(e));
    }
    int e = fsync_dir(io, dir_path);
    if (e) return pdb_err_set(PDB_IO, "fsync of %s failed: %s", dir_path, strerror(e));
    return PDB_OK;
}

/* ---- verification ------------------------------------------------------------------------- */

/* Strict non-negative decimal (no sign, no leading zeros except "0", no junk). */
static int parse_dec(const char *s, int64_t *out) {
    if (!s || !*s || strlen(s) > 18 || (s[0] == '0' && s[1])) return 0;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return 1;
}

static int cmp_view_data(const void *a, const void *b) {
    const pdb_tensor_view *x = *(const pdb_tensor_view *const *)a, *y = *(const pdb_tensor_view *const *)b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    return px < py ? -1 : px > py;
}

/* the pieces a block's pool bytes are read in when copied out: large reads, each hashed while it
 * is still in the cache (L2 holds 1-2 MiB on the machines measured) */
#define BLOCK_READ_PIECE ((size_t)1 << 20)

#define BAD(fmt, ...) do { st = pdb_err_set(PDB_CORRUPT, "%s: " fmt, path, ##__VA_ARGS__); goto out; } while (0)

pdb_status pdb_block_verify(const char *path, const pdb_block_id *id,
                            const pdb_store_layout *layout, int full, void *const *pool_out,
                            uint64_t *file_bytes, dev_t *dev, ino_t *ino) {
    PDB_ASSERT(!pool_out || full, "copying out requires the full check");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return pdb_err_set(PDB_NOT_FOUND, "%s: no such block", path);
        return pdb_err_set(PDB_IO, "stat %s: %s", path, strerror(errno));
    }
    if (file_bytes) *file_bytes = (uint64_t)sb.st_size;
    if (dev) *dev = sb.st_dev;
    if (ino) *ino = sb.st_ino;
    if (!S_ISREG(sb.st_mode)) return pdb_err_set(PDB_CORRUPT, "%s: not a regular file", path);

    pdb_st *f = NULL;
    /* copying out: the descriptor stays open, the tensor bytes are read from it (below) */
    pdb_status st = pdb_st_open_flags(path, pool_out ? PDB_ST_KEEP_FD : 0, &f);
    if (st != PDB_OK) {
        if (st == PDB_NOMEM) return st;
        if (st == PDB_IO || st == PDB_NOT_FOUND) {
            /* a vanished file is a miss; a file that exists but cannot be read is an I/O issue
             * unless it is too short to be a header at all (a truncated file). */
            struct stat sb2;
            if (stat(path, &sb2) != 0 && errno == ENOENT) return pdb_err_set(PDB_NOT_FOUND, "%s: no such block", path);
            if (sb.st_size >= 16) return st;
        }
        return PDB_CORRUPT; /* pdb_st_open's message names the file and the fault */
    }
    const int np = layout->n_pools;
    const int64_t S = id->block_size;
    char hex[65];
    uint8_t parent[32], fp[32], sum[32], h[32];
    int64_t v;
    const char *m;

    if (!(m = pdb_st_meta(f, "format")) || strcmp(m, PDB_BLOCK_FORMAT) != 0) BAD("metadata format is '%s', not '" PDB_BLOCK_FORMAT "'", m ? m : "(absent)");
    if (!(m = pdb_st_meta(f, "version")) || strcmp(m, PDB_BLOCK_VERSION) != 0) BAD("metadata version is '%s', not '" PDB_BLOCK_VERSION "'", m ? m : "(absent)");
    pdb_store_hash_hex(id->hash, hex);
    if (!(m = pdb_st_meta(f, "block_hash")) || strcmp(m, hex) != 0) BAD("metadata block_hash '%s' is not the file's name %s", m ? m : "(absent)", hex);
    if (!pdb_block_parse_hex(pdb_st_meta(f, "fingerprint"), fp) || memcmp(fp, id->fingerprint, 32) != 0) BAD("metadata fingerprint differs from the store's");
    if (!parse_dec(pdb_st_meta(f, "block_index"), &v) || v != id->block_index) BAD("metadata block_index '%s', expected %" PRId64, pdb_st_meta(f, "block_index") ? pdb_st_meta(f, "block_index") : "(absent)", id->block_index);
    if (!parse_dec(pdb_st_meta(f, "block_size"), &v) || v != S) BAD("metadata block_size '%s', expected %" PRId64, pdb_st_meta(f, "block_size") ? pdb_st_meta(f, "block_size") : "(absent)", S);
    if (!parse_dec(pdb_st_meta(f, "token_count"), &v) || v != S) BAD("metadata token_count is not %" PRId64, S);
    if (!parse_dec(pdb_st_meta(f, "created_at"), &v)) BAD("metadata created_at missing or not a number");
    if (!pdb_block_parse_hex(pdb_st_meta(f, "parent_hash"), parent)) BAD("metadata parent_hash missing or not 64 hex");
    if (id->parent && memcmp(parent, id->parent, 32) != 0) BAD("metadata parent_hash differs from the chain's");
    if ((id->block_index == 0) != (memcmp(parent, pdb_block_root_hash(), 32) == 0)) BAD("parent_hash is %sthe root but block_index is %" PRId64, id->block_index == 0 ? "not " : "", id->block_index);
    if (!pdb_block_parse_hex(pdb_st_meta(f, "checksum"), sum)) BAD("metadata checksum missing or not 64 hex");

    if (pdb_st_count(f) != (int64_t)np + 1) BAD("%" PRId64 " tensors, the layout has %d pools + tokens", pdb_st_count(f), np);
    const pdb_tensor_view *tv = pdb_st_find(f, "tokens");
    if (!tv || tv->dtype != PDB_DT_I32 || tv->ndim != 1 || tv->shape[0] != S) BAD("tensor tokens missing or not I32 [%" PRId64 "]", S);
    const pdb_tensor_view *pv[PDB_STORE_MAX_POOLS];
    for (int p = 0; p < np; p++) {
        const pdb_store_pool *pl = &layout->pools[p];
        const pdb_tensor_view *t = pdb_st_find(f, pl->name);
        int64_t rows = pdb_store_pool_rows(pl, S);
        if (!t || t->dtype != pl->dtype || t->ndim != 3 || t->shape[0] != pl->n_layers || t->shape[1] != rows || t->shape[2] != pl->width || t->nbytes != pdb_store_pool_bytes(pl, S))
            BAD("tensor %s missing or not %s [%" PRId64 ", %" PRId64 ", %" PRId64 "]", pl->name, pdb_dtype_name(pl->dtype), pl->n_layers, rows, pl->width);
        pv[p] = t;
    }
    /* identity: the tokens and parent in the file must reproduce the name */
    {
        int32_t *tok = malloc((size_t)tv->nbytes);
        if (!tok) { st = pdb_err_set(PDB_NOMEM, "%s: tokens buffer", path); goto out; }
        memcpy(tok, tv->data, (size_t)tv->nbytes); /* may be unaligned in the map; LE host */
        st = pdb_block_hash_one(id->fingerprint, parent, tok, S, h);
        free(tok);
        if (st != PDB_OK) goto out;
        if (memcmp(h, id->hash, 32) != 0) BAD("the tokens and parent_hash in the file do not hash to its name");
    }
    if (full) {
        const pdb_tensor_view *order[PDB_STORE_MAX_POOLS + 1];
        int64_t n = pdb_st_count(f);
        for (int64_t i = 0; i < n; i++) order[i] = pdb_st_at(f, i);
        qsort(order, (size_t)n, sizeof order[0], cmp_view_data);
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (!ctx) { st = pdb_err_set(PDB_NOMEM, "%s: EVP_MD_CTX_new", path); goto out; }
        int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
        int kfd = -1;
        uint64_t k0 = 0;
        if (pool_out && n > 0 && pdb_st_locate(f, order[0], &kfd, &k0) == PDB_OK && kfd >= 0)
            posix_fadvise(kfd, 0, 0, POSIX_FADV_WILLNEED); /* the disk reads ahead while the pieces are hashed */
        for (int64_t i = 0; ok && i < n; i++) {
            uint8_t *dst = NULL;
            for (int p = 0; pool_out && p < np; p++)
                if (order[i] == pv[p]) dst = pool_out[p];
            int fd = -1;
            uint64_t at = 0;
            if (dst && pdb_st_locate(f, order[i], &fd, &at) != PDB_OK) fd = -1;
            if (dst && fd >= 0) {
                /* a pool: read straight into its buffer in large pieces (no page faults of the
                 * mapping, no second copy) and hash each piece while it is in the cache */
                for (uint64_t o = 0; ok && o < order[i]->nbytes;) {
                    size_t c = order[i]->nbytes - o < BLOCK_READ_PIECE ? (size_t)(order[i]->nbytes - o) : BLOCK_READ_PIECE;
                    ssize_t got = pread(fd, dst + o, c, (off_t)(at + o));
                    if (got < 0 && errno == EINTR) continue;
                    if (got <= 0) {
                        int e = errno;
                        EVP_MD_CTX_free(ctx);
                        if (got < 0) { st = pdb_err_set(PDB_IO, "%s: read of %s at byte %" PRIu64 ": %s", path, order[i]->name, at + o, strerror(e)); goto out; }
                        BAD("the file ended inside tensor %s (truncated while read?)", order[i]->name);
                    }
                    ok = EVP_DigestUpdate(ctx, dst + o, (size_t)got) == 1;
                    o += (uint64_t)got;
                }
                continue;
            }
            const uint8_t *src = order[i]->data;
            /* hash and copy in 1 MiB chunks so the copy reads what was just hashed from cache */
            for (uint64_t o = 0; ok && o < order[i]->nbytes; o += (1u << 20)) {
                size_t c = order[i]->nbytes - o < (1u << 20) ? (size_t)(order[i]->nbytes - o) : (1u << 20);
                ok = EVP_DigestUpdate(ctx, src + o, c) == 1;
                if (dst) memcpy(dst + o, src + o, c);
            }
        }
        unsigned int sl = 0;
        ok = ok && EVP_DigestFinal_ex(ctx, h, &sl) == 1;
        EVP_MD_CTX_free(ctx);
        if (!ok) { st = pdb_err_set(PDB_NOMEM, "%s: SHA-256 failed", path); goto out; }
        if (memcmp(h, sum, 32) != 0) BAD("checksum of the tensor bytes does not match the metadata");
    }
    st = PDB_OK;
out:
    pdb_st_close(f);
    return st;
}

int pdb_block_remove_if_same(const char *path, dev_t dev, ino_t ino) {
    struct stat sb;
    if (stat(path, &sb) != 0 || sb.st_dev != dev || sb.st_ino != ino) return 0;
    return unlink(path) == 0;
}
