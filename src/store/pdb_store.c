/* pdb_store: the prefix-cache store (index, LRU size cap, lookups, mounts, streaming writer).
 *
 * State of one handle (all guarded by mu; file I/O and verification run outside the lock):
 *   - dir, the copied layout, fingerprint, block_size, max_bytes: fixed after open.
 *   - the index: a hash table hash -> entry {bytes, block_index, touched_s} whose entries are
 *     also on a doubly linked LRU list (lru.next = most recently used, lru.prev = least).
 *     block_index == -1 marks an entry found by the open scan and not yet checked by this
 *     handle; block_index >= 0 means the header identity of the file was verified for that
 *     index (at lookup, load or write) by this handle.
 *   - total_bytes = sum of entry bytes; stats.
 * Invariants:
 *   I1. The disk is the truth, the index a cache of it: a lookup that misses in the index checks
 *       the file named by the hash; an index hit re-checks that the file still exists (another
 *       handle or process may have evicted it) and drops the entry if not.
 *   I2. Nothing is served without verification: longest_prefix counts a block only after its
 *       header identity was verified by this handle (see pdb_store.h for what that covers);
 *       load_block always verifies identity and the SHA-256 checksum of all tensor bytes
 *       before returning PDB_OK. A file failing either is logged, removed (only if it is still
 *       the same inode) and counted in corrupt_removed; the caller sees a miss.
 *   I3. Visible block files are complete (pdb_block_write: temp + fsync + rename + fsync dir);
 *       temp files never survive an error; temp files of dead writers are removed at open.
 *   I4. Before a write, while max_bytes != 0 and total_bytes + the new block's bound would pass
 *       max_bytes, the least recently used entries are evicted (file unlinked), never a block of
 *       the writing stream's own prefix (0..b-1: evicting it would make the prompt unmountable);
 *       when the prefix and the block cannot fit under the cap at all the put is refused
 *       (PDB_TOO_LARGE naming both numbers) and nothing is evicted. A write the disk refuses
 *       (ENOSPC/EDQUOT) evicts unprotected LRU entries worth at least one block and is retried
 *       once. Use = write, load, lookup hit. The order survives restarts through file mtimes
 *       (set on use, at most once per PDB_STORE_TOUCH_S per entry) which the open scan sorts by.
 *   I5. The cap is enforced over the blocks this handle knows (scanned at open, seen or
 *       written since); blocks other processes write count once this handle has seen them.
 *   I6. A stream's puts are strictly increasing in block index and each needs the whole prefix
 *       before it present (put by this stream, or verified in the store). */
#include "pdb_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "pdb_block.h"
#include "pdb_file.h"
#include "pdb_pool.h"
#include "pdb_sys.h"

#define PDB_STORE_TOUCH_S 2                 /* min seconds between mtime updates of one block */
#define PDB_STORE_TMP_MAX_AGE_S 3600        /* temp files older than this are stale regardless */
#define PDB_STORE_MAX_ENTRIES (1ULL << 26)  /* index cap; blocks beyond it are still found on disk */
#define PDB_STORE_MAX_TOKENS (1LL << 31)    /* stream_begin limit */
#define PATH_CAP 4096
#define PDB_STORE_HEADER_BOUND 4096         /* bytes of a block file's header, at most (= PDB_LIMITS_BLOCK_HEADER_BYTES) */

typedef struct entry {
    uint8_t hash[32];
    uint64_t bytes;
    int64_t block_index; /* -1: found by the scan, not yet verified by this handle */
    int64_t touched_s;   /* last mtime set/seen, unix seconds */
    struct entry *prev, *next; /* LRU list */
    struct entry *hnext;       /* hash bucket chain */
} entry;

struct pdb_store {
    char *dir;
    pdb_store_pool pools[PDB_STORE_MAX_POOLS];
    char names[PDB_STORE_MAX_POOLS][PDB_STORE_MAX_NAME + 1];
    pdb_store_layout layout;
    uint8_t fingerprint[32];
    int64_t block_size;
    uint64_t max_bytes;
    uint64_t block_bytes; /* sum of pool bytes per block */
    uint64_t file_bytes_seen; /* largest block file indexed so far (mu), 0 = none yet */
    pdb_store_io io;

    pthread_mutex_t mu;
    entry **buckets;
    uint64_t n_buckets, n_entries, total_bytes;
    entry lru; /* sentinel */
    pdb_store_stats stats;
};

struct pdb_store_stream {
    pdb_store *s;
    int32_t *tokens;             /* [n_blocks * block_size] */
    uint8_t (*hashes)[32];       /* [n_blocks] */
    int64_t n_blocks;
    int64_t last_put;            /* -1 before the first put */
    int64_t n_prefix_ok;         /* blocks 0..n_prefix_ok-1 are known present (I6) */
};

/* ---- layout ---------------------------------------------------------------------------------- */

int64_t pdb_store_pool_rows(const pdb_store_pool *p, int64_t block_size) {
    if (!p || block_size <= 0) return 0;
    if (p->kind == PDB_STORE_POOL_APPEND)
        return p->stride >= 1 && block_size % p->stride == 0 ? block_size / p->stride : 0;
    if (p->kind == PDB_STORE_POOL_STATE) return p->rows >= 1 ? p->rows : 0;
    return 0;
}

uint64_t pdb_store_pool_bytes(const pdb_store_pool *p, int64_t block_size) {
    int64_t rows = pdb_store_pool_rows(p, block_size);
    size_t es = p ? pdb_dtype_size(p->dtype) : 0;
    if (rows <= 0 || es == 0 || p->n_layers < 1 || p->width < 1) return 0;
    uint64_t a, b, c;
    if (__builtin_mul_overflow((uint64_t)p->n_layers, (uint64_t)rows, &a) ||
        __builtin_mul_overflow(a, (uint64_t)p->width, &b) || __builtin_mul_overflow(b, (uint64_t)es, &c) ||
        c > PDB_BLOCK_MAX_TENSOR_BYTES)
        return 0;
    return c;
}

uint64_t pdb_store_layout_block_bytes(const pdb_store_layout *layout, int64_t block_size) {
    uint64_t bytes = 0;
    for (int p = 0; p < layout->n_pools; p++) bytes += pdb_store_pool_bytes(&layout->pools[p], block_size);
    return bytes;
}

static pdb_status layout_validate(const pdb_store_layout *l, int64_t bs) {
    if (!l || l->n_pools < 1 || l->n_pools > PDB_STORE_MAX_POOLS || !l->pools)
        return pdb_err_set(PDB_INVALID, "store layout: n_pools must be 1..%d", PDB_STORE_MAX_POOLS);
    for (int i = 0; i < l->n_pools; i++) {
        const pdb_store_pool *p = &l->pools[i];
        const char *n = p->name;
        if (!n || !*n || strlen(n) > PDB_STORE_MAX_NAME || strcmp(n, "tokens") == 0)
            return pdb_err_set(PDB_INVALID, "store layout: pool %d: bad name '%s' (1..%d chars, not 'tokens')",
                               i, n ? n : "(null)", PDB_STORE_MAX_NAME);
        for (const char *c = n; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                  *c == '_' || *c == '.' || *c == '-'))
                return pdb_err_set(PDB_INVALID, "store layout: pool '%s': name may hold only [A-Za-z0-9_.-]", n);
        for (int j = 0; j < i; j++)
            if (strcmp(l->pools[j].name, n) == 0)
                return pdb_err_set(PDB_INVALID, "store layout: pool name '%s' used twice", n);
        if (p->kind != PDB_STORE_POOL_APPEND && p->kind != PDB_STORE_POOL_STATE)
            return pdb_err_set(PDB_INVALID, "store layout: pool '%s': unknown kind %d", n, (int)p->kind);
        if (p->kind == PDB_STORE_POOL_APPEND && (p->stride < 1 || bs % p->stride != 0))
            return pdb_err_set(PDB_INVALID, "store layout: pool '%s': stride %" PRId64 " must divide block_size %" PRId64,
                               n, p->stride, bs);
        if ((int)p->dtype < 0 || p->dtype >= PDB_DT_COUNT)
            return pdb_err_set(PDB_INVALID, "store layout: pool '%s': unknown dtype %d", n, (int)p->dtype);
        if (pdb_store_pool_bytes(p, bs) == 0)
            return pdb_err_set(PDB_INVALID, "store layout: pool '%s': n_layers %" PRId64 ", rows %" PRId64 ", width %" PRId64
                               " must be >= 1 and the block tensor at most %llu bytes", n, p->n_layers,
                               pdb_store_pool_rows(p, bs), p->width, (unsigned long long)PDB_BLOCK_MAX_TENSOR_BYTES);
    }
    return PDB_OK;
}

static json_t *layout_json(const pdb_store *s) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < s->layout.n_pools; i++) {
        const pdb_store_pool *p = &s->pools[i];
        int app = p->kind == PDB_STORE_POOL_APPEND;
        json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "name", p->name, "kind", app ? "append" : "state",
                              "n_layers", (json_int_t)p->n_layers, app ? "stride" : "rows",
                              (json_int_t)(app ? p->stride : p->rows), "width", (json_int_t)p->width,
                              "dtype", pdb_dtype_name(p->dtype));
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

/* ---- store.json: records block_size, first fingerprint, layout ------------------------------ */

static pdb_status store_meta_check(pdb_store *s, const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return pdb_err_set(PDB_CORRUPT, "%s: line %d column %d: %s", path, jerr.line, jerr.column, jerr.text);
    pdb_status st = PDB_OK;
    json_t *fmt = json_object_get(root, "format"), *bs = json_object_get(root, "block_size");
    json_t *lay = json_object_get(root, "layout");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "pdbridge-store") != 0 || !json_is_integer(bs) ||
        !json_is_array(lay)) {
        st = pdb_err_set(PDB_CORRUPT, "%s: not a pdbridge store description (format/block_size/layout)", path);
    } else if (json_integer_value(bs) != s->block_size) {
        st = pdb_err_set(PDB_MISMATCH,
                         "store %s was created with block_size %lld (recorded in %s); opened with %" PRId64
                         ": use the recorded block_size or another directory",
                         s->dir, (long long)json_integer_value(bs), path, s->block_size);
    } else {
        json_t *mine = layout_json(s);
        if (!mine) {
            st = pdb_err_set(PDB_NOMEM, "%s: layout json", path);
        } else if (!json_equal(mine, lay)) {
            char *a = json_dumps(lay, JSON_COMPACT | JSON_PRESERVE_ORDER);
            char *b = json_dumps(mine, JSON_COMPACT | JSON_PRESERVE_ORDER);
            st = pdb_err_set(PDB_MISMATCH,
                             "store %s was created with another cache layout (recorded in %s): recorded %.400s, "
                             "opened with %.400s: use another directory",
                             s->dir, path, a ? a : "?", b ? b : "?");
            free(a);
            free(b);
        }
        json_decref(mine);
    }
    json_decref(root);
    return st;
}

static pdb_status store_meta_init(pdb_store *s) {
    char path[PATH_CAP], fhex[65];
    snprintf(path, sizeof path, "%s/store.json", s->dir);
    if (access(path, F_OK) == 0) return store_meta_check(s, path);
    pdb_store_hash_hex(s->fingerprint, fhex);
    json_t *lay = layout_json(s);
    json_t *root = lay ? json_pack("{s:s,s:i,s:I,s:s,s:o}", "format", "pdbridge-store", "version", 1, "block_size",
                                   (json_int_t)s->block_size, "fingerprint", fhex, "layout", lay)
                       : NULL;
    char *js = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!js) return pdb_err_set(PDB_NOMEM, "%s: building store description", path);
    size_t n = strlen(js);
    int existed = 0;
    pdb_status st = pdb_block_write_small(&s->io, s->dir, path, js, n, 1, &existed);
    free(js);
    if (st != PDB_OK) return pdb_err_wrap(st, "store %s: writing store.json", s->dir);
    return existed ? store_meta_check(s, path) : PDB_OK; /* another opener won the race */
}

/* ---- index and LRU (callers hold mu) -------------------------------------------------------- */

static uint64_t bucket_of(const pdb_store *s, const uint8_t *h) {
    uint64_t k;
    memcpy(&k, h, 8);
    return k & (s->n_buckets - 1);
}

static entry *idx_find(pdb_store *s, const uint8_t *h) {
    for (entry *e = s->buckets[bucket_of(s, h)]; e; e = e->hnext)
        if (memcmp(e->hash, h, 32) == 0) return e;
    return NULL;
}

static void lru_unlink(entry *e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push_front(pdb_store *s, entry *e) {
    e->next = s->lru.next;
    e->prev = &s->lru;
    s->lru.next->prev = e;
    s->lru.next = e;
}

static void lru_touch(pdb_store *s, entry *e) {
    lru_unlink(e);
    lru_push_front(s, e);
}

static void idx_grow(pdb_store *s) {
    if (s->n_entries < s->n_buckets) return;
    uint64_t nb = s->n_buckets * 2;
    entry **nbk = calloc(nb, sizeof *nbk);
    if (!nbk) return; /* longer chains, still correct */
    for (uint64_t i = 0; i < s->n_buckets; i++) {
        for (entry *e = s->buckets[i], *nx; e; e = nx) {
            nx = e->hnext;
            uint64_t k;
            memcpy(&k, e->hash, 8);
            e->hnext = nbk[k & (nb - 1)];
            nbk[k & (nb - 1)] = e;
        }
    }
    free(s->buckets);
    s->buckets = nbk;
    s->n_buckets = nb;
}

/* Insert at the LRU front (or NULL if the index is full or memory is short: the block is
 * then simply not tracked; lookups still find it on disk). */
static entry *idx_insert(pdb_store *s, const uint8_t *h, uint64_t bytes, int64_t block_index, int64_t touched_s) {
    if (s->n_entries >= PDB_STORE_MAX_ENTRIES) return NULL;
    entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    memcpy(e->hash, h, 32);
    e->bytes = bytes;
    e->block_index = block_index;
    e->touched_s = touched_s;
    uint64_t b = bucket_of(s, h);
    e->hnext = s->buckets[b];
    s->buckets[b] = e;
    lru_push_front(s, e);
    s->n_entries++;
    s->total_bytes += bytes;
    if (bytes > s->file_bytes_seen && bytes <= s->block_bytes + (uint64_t)s->block_size * 4 + PDB_STORE_HEADER_BOUND)
        s->file_bytes_seen = bytes;
    idx_grow(s);
    return e;
}

static void idx_remove(pdb_store *s, entry *e) {
    entry **pp = &s->buckets[bucket_of(s, e->hash)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    s->n_entries--;
    s->total_bytes -= e->bytes;
    free(e);
}

static void idx_remove_hash(pdb_store *s, const uint8_t *h) {
    entry *e = idx_find(s, h);
    if (e) idx_remove(s, e);
}

/* Record a verified block: insert or update, move to the LRU front. Returns the entry. */
static entry *idx_note(pdb_store *s, const uint8_t *h, uint64_t bytes, int64_t block_index) {
    entry *e = idx_find(s, h);
    if (!e) return idx_insert(s, h, bytes, block_index, 0);
    s->total_bytes = s->total_bytes - e->bytes + bytes;
    e->bytes = bytes;
    e->block_index = block_index;
    lru_touch(s, e);
    return e;
}

static void block_paths(const pdb_store *s, const uint8_t *h, char *sub, char *path) {
    char hex[65];
    pdb_store_hash_hex(h, hex);
    snprintf(sub, PATH_CAP, "%s/%.2s", s->dir, hex);
    snprintf(path, PATH_CAP, "%s/%.2s/%s" PDB_BLOCK_EXT, s->dir, hex, hex);
}

/* Is e one of blocks 0..upto of stream w (the prompt being written)? */
static int is_protected(const pdb_store_stream *w, int64_t upto, const entry *e) {
    return w && e->block_index >= 0 && e->block_index <= upto && e->block_index < w->n_blocks &&
           memcmp(e->hash, w->hashes[e->block_index], 32) == 0;
}

/* I4: evict LRU entries (never blocks 0..upto of w) until total_bytes <= target or `freed`
 * bytes are gone (whichever is given: target UINT64_MAX / freed 0 = not used). Returns the
 * bytes freed. */
static uint64_t evict_lru_locked(pdb_store *s, const pdb_store_stream *w, int64_t upto, uint64_t target, uint64_t want_freed) {
    char sub[PATH_CAP], path[PATH_CAP];
    uint64_t freed = 0;
    entry *e = s->lru.prev;
    while (e != &s->lru && (s->total_bytes > target || freed < want_freed)) {
        entry *prev = e->prev;
        if (!is_protected(w, upto, e)) {
            block_paths(s, e->hash, sub, path);
            if (unlink(path) != 0 && errno != ENOENT)
                PDB_WARN("store: evicting %s: %s", path, strerror(errno));
            else
                s->stats.evictions++;
            freed += e->bytes;
            idx_remove(s, e);
        }
        e = prev;
    }
    return freed;
}

/* I4 after a write or at open: back under the cap. */
static void evict_locked(pdb_store *s, const pdb_store_stream *w, int64_t upto) {
    if (s->max_bytes) evict_lru_locked(s, w, upto, s->max_bytes, 0);
}

/* ---- helpers outside the lock -------------------------------------------------------------- */

static int64_t now_s(void) { return (int64_t)time(NULL); }

/* I2: a file failed verification: log, remove if unchanged, forget. */
static void drop_bad(pdb_store *s, const uint8_t *h, const char *path, dev_t dev, ino_t ino) {
    int removed = pdb_block_remove_if_same(path, dev, ino);
    PDB_WARN("store: bad block file, %s: %s", removed ? "removed" : "left (replaced meanwhile)", pdb_err_msg());
    (void)path;
    pthread_mutex_lock(&s->mu);
    idx_remove_hash(s, h);
    if (removed) s->stats.corrupt_removed++;
    pthread_mutex_unlock(&s->mu);
}

/* The file of a known entry still exists? Refreshes its mtime when due (I4).
 * Returns 1 present, 0 gone (entry dropped). */
static int recheck_known(pdb_store *s, const uint8_t *h, const char *path) {
    pthread_mutex_lock(&s->mu);
    entry *e = idx_find(s, h);
    int due = e && now_s() - e->touched_s >= PDB_STORE_TOUCH_S;
    pthread_mutex_unlock(&s->mu);
    int present;
    if (due) {
        present = utimensat(AT_FDCWD, path, NULL, 0) == 0 || errno != ENOENT;
    } else {
        struct stat sb;
        present = stat(path, &sb) == 0 || errno != ENOENT;
    }
    pthread_mutex_lock(&s->mu);
    e = idx_find(s, h);
    if (e) {
        if (!present) {
            idx_remove(s, e);
        } else {
            lru_touch(s, e);
            if (due) e->touched_s = now_s();
        }
    }
    pthread_mutex_unlock(&s->mu);
    return present;
}

/* Is block b (hash h, parent) present and valid? full: also verify the checksum (used
 * before treating an existing file as a finished put). Sets *hit. */
static pdb_status check_block(pdb_store *s, const uint8_t *h, const uint8_t *parent, int64_t b, int full, int *hit) {
    char sub[PATH_CAP], path[PATH_CAP];
    *hit = 0;
    block_paths(s, h, sub, path);
    pthread_mutex_lock(&s->mu);
    entry *e = idx_find(s, h);
    int known = e && e->block_index == b;
    pthread_mutex_unlock(&s->mu);
    if (known) {
        *hit = recheck_known(s, h, path);
        return PDB_OK;
    }
    pdb_block_id id = {h, parent, s->fingerprint, b, s->block_size};
    uint64_t bytes = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    pdb_status st = pdb_block_verify(path, &id, &s->layout, full, NULL, &bytes, &dev, &ino);
    if (st == PDB_OK) {
        pthread_mutex_lock(&s->mu);
        idx_note(s, h, bytes, b);
        pthread_mutex_unlock(&s->mu);
        *hit = 1;
        return PDB_OK;
    }
    if (st == PDB_NOT_FOUND) {
        pthread_mutex_lock(&s->mu);
        idx_remove_hash(s, h); /* a stale scan entry */
        pthread_mutex_unlock(&s->mu);
        return PDB_OK;
    }
    if (st == PDB_CORRUPT) {
        drop_bad(s, h, path, dev, ino);
        return PDB_OK;
    }
    return st;
}

/* ---- open / close ---------------------------------------------------------------------------- */

static int is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* I3: remove a temp file whose writer is gone (dead pid) or that is older than an hour. */
static void clean_tmp(const char *path, const char *name, int64_t mtime, int *n_removed) {
    long pid = strtol(name + strlen(PDB_BLOCK_TMP_PREFIX), NULL, 10);
    int dead = pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    if (dead || now_s() - mtime > PDB_STORE_TMP_MAX_AGE_S) {
        if (unlink(path) == 0) (*n_removed)++;
    }
}

typedef struct scan_item {
    uint8_t hash[32];
    uint64_t bytes;
    int64_t mtime; /* ns */
} scan_item;

static int cmp_scan(const void *a, const void *b) {
    const scan_item *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Rebuild the index from the directory (oldest first, so the newest ends at the LRU front). */
static pdb_status scan_dir(pdb_store *s) {
    DIR *top = opendir(s->dir);
    if (!top) return pdb_err_set(PDB_IO, "store: opendir %s: %s", s->dir, strerror(errno));
    scan_item *items = NULL;
    uint64_t n = 0, cap = 0;
    int n_tmp = 0;
    pdb_status st = PDB_OK;
    struct dirent *d;
    char sub[PATH_CAP], path[PATH_CAP];
    struct stat sb;
    while (st == PDB_OK && (d = readdir(top))) {
        if (strncmp(d->d_name, PDB_BLOCK_TMP_PREFIX, strlen(PDB_BLOCK_TMP_PREFIX)) == 0) {
            snprintf(path, sizeof path, "%s/%s", s->dir, d->d_name);
            if (stat(path, &sb) == 0) clean_tmp(path, d->d_name, (int64_t)sb.st_mtime, &n_tmp);
            continue;
        }
        if (strlen(d->d_name) != 2 || !is_hex(d->d_name, 2)) continue;
        snprintf(sub, sizeof sub, "%s/%s", s->dir, d->d_name);
        DIR *dd = opendir(sub);
        if (!dd) continue;
        struct dirent *f;
        while (st == PDB_OK && (f = readdir(dd))) {
            size_t len = strlen(f->d_name);
            if (snprintf(path, sizeof path, "%s/%s", sub, f->d_name) >= (int)sizeof path) continue;
            if (strncmp(f->d_name, PDB_BLOCK_TMP_PREFIX, strlen(PDB_BLOCK_TMP_PREFIX)) == 0) {
                if (stat(path, &sb) == 0) clean_tmp(path, f->d_name, (int64_t)sb.st_mtime, &n_tmp);
                continue;
            }
            if (len != 64 + strlen(PDB_BLOCK_EXT) || strcmp(f->d_name + 64, PDB_BLOCK_EXT) != 0 ||
                !is_hex(f->d_name, 64) || memcmp(f->d_name, d->d_name, 2) != 0)
                continue;
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            if (n == cap) {
                uint64_t nc = cap ? cap * 2 : 256;
                scan_item *ni = nc <= PDB_STORE_MAX_ENTRIES ? realloc(items, nc * sizeof *ni) : NULL;
                if (!ni) {
                    if (nc > PDB_STORE_MAX_ENTRIES) break; /* index full: the rest stays on disk */
                    st = pdb_err_set(PDB_NOMEM, "store %s: scan list", s->dir);
                    break;
                }
                items = ni;
                cap = nc;
            }
            char hex[65];
            memcpy(hex, f->d_name, 64);
            hex[64] = 0;
            pdb_block_parse_hex(hex, items[n].hash);
            items[n].bytes = (uint64_t)sb.st_size;
            items[n].mtime = pdb_sys_mtime_ns(&sb);
            n++;
        }
        closedir(dd);
    }
    closedir(top);
    if (st == PDB_OK) {
        if (n) qsort(items, n, sizeof *items, cmp_scan);
        for (uint64_t i = 0; i < n; i++) idx_insert(s, items[i].hash, items[i].bytes, -1, items[i].mtime / 1000000000);
        if (n_tmp) PDB_INFO("store %s: removed %d temp file(s) left by interrupted writers", s->dir, n_tmp);
        evict_locked(s, NULL, -1);
    }
    free(items);
    return st;
}

/* Bytes an unprivileged writer may still use on the store's filesystem; UINT64_MAX when unknown. */
static uint64_t disk_free(const pdb_store *s) {
    struct statvfs v;
    if (statvfs(s->dir, &v) != 0) return UINT64_MAX;
    return (uint64_t)v.f_bavail * (uint64_t)(v.f_frsize ? v.f_frsize : v.f_bsize);
}

static pdb_status mkdir_p1(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return PDB_OK;
    return pdb_err_set(PDB_IO, "mkdir %s: %s", path, strerror(errno));
}

pdb_status pdb_store_open(const char *dir, const pdb_store_layout *layout,
                          const uint8_t fingerprint[PDB_STORE_HASH_BYTES], int64_t block_size,
                          uint64_t max_bytes, pdb_store **out) {
    *out = NULL;
    if (!dir || !*dir || strlen(dir) > PATH_CAP - 200) return pdb_err_set(PDB_INVALID, "store: bad directory name");
    if (!fingerprint) return pdb_err_set(PDB_INVALID, "store %s: no fingerprint", dir);
    if (block_size <= 0 || block_size % 128 != 0 || block_size > PDB_BLOCK_MAX_BLOCK_SIZE)
        return pdb_err_set(PDB_INVALID, "store %s: block_size %" PRId64 " must be a positive multiple of 128 (at most %lld)",
                           dir, block_size, (long long)PDB_BLOCK_MAX_BLOCK_SIZE);
    PDB_TRY(layout_validate(layout, block_size));
    pdb_store *s = calloc(1, sizeof *s);
    if (!s) return pdb_err_set(PDB_NOMEM, "store %s", dir);
    s->dir = strdup(dir);
    s->n_buckets = 1024;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    if (!s->dir || !s->buckets) {
        free(s->dir);
        free(s->buckets);
        free(s);
        return pdb_err_set(PDB_NOMEM, "store %s", dir);
    }
    size_t dl = strlen(s->dir);
    while (dl > 1 && s->dir[dl - 1] == '/') s->dir[--dl] = 0;
    s->layout.n_pools = layout->n_pools;
    s->layout.pools = s->pools;
    for (int i = 0; i < layout->n_pools; i++) {
        s->pools[i] = layout->pools[i];
        snprintf(s->names[i], sizeof s->names[i], "%s", layout->pools[i].name);
        s->pools[i].name = s->names[i];
        if (s->pools[i].kind == PDB_STORE_POOL_APPEND) s->pools[i].rows = 0; /* canonical form */
        else s->pools[i].stride = 0;
    }
    s->block_bytes = pdb_store_layout_block_bytes(&s->layout, block_size);
    memcpy(s->fingerprint, fingerprint, 32);
    s->block_size = block_size;
    s->max_bytes = max_bytes;
    s->io = *pdb_block_default_io();
    s->lru.next = s->lru.prev = &s->lru;
    pthread_mutex_init(&s->mu, NULL);
    pdb_block_root_hash(); /* initialize once, before threads */
    pdb_status st = pdb_file_mkdirs(s->dir); /* the store directory and its parents */
    if (st == PDB_OK) st = store_meta_init(s);
    if (st == PDB_OK) st = scan_dir(s);
    if (st != PDB_OK) {
        pdb_store_close(s);
        return st;
    }
    /* The cap against the disk: warned, not refused (free space is shared and changes; a full
     * disk at write time makes room by eviction, I4). docs/decisions.md D27. */
    uint64_t free_b = disk_free(s);
    if (max_bytes && free_b != UINT64_MAX && max_bytes > s->total_bytes + free_b)
        PDB_WARN("store %s: the cap (--cache-max-bytes %" PRIu64 ") is more than this disk can hold for the store: %" PRIu64
                 " bytes of blocks + %" PRIu64 " bytes free = %" PRIu64 "; writes past it make room by evicting old blocks",
                 s->dir, max_bytes, s->total_bytes, free_b, s->total_bytes + free_b);
    *out = s;
    return PDB_OK;
}

void pdb_store_close(pdb_store *s) {
    if (!s) return;
    for (entry *e = s->lru.next, *nx; e != &s->lru; e = nx) {
        nx = e->next;
        free(e);
    }
    pthread_mutex_destroy(&s->mu);
    free(s->buckets);
    free(s->dir);
    free(s);
}

void pdb_store_set_io(pdb_store *s, const pdb_store_io *io) {
    s->io = io ? *io : *pdb_block_default_io();
}

uint64_t pdb_store_block_bytes(const pdb_store *s) { return s->block_bytes; }

void pdb_store_get_stats(pdb_store *s, pdb_store_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->n_blocks = s->n_entries;
    out->bytes = s->total_bytes;
    out->max_bytes = s->max_bytes;
    pthread_mutex_unlock(&s->mu);
    out->disk_free_bytes = disk_free(s);
}

/* ---- hashing --------------------------------------------------------------------------------- */

void pdb_store_hash_hex(const uint8_t h[32], char out[65]) {
    static const char dig[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = dig[h[i] >> 4];
        out[2 * i + 1] = dig[h[i] & 15];
    }
    out[64] = 0;
}

pdb_status pdb_store_hash_chain(const uint8_t fingerprint[32], const int32_t *tokens, int64_t n_tokens,
                                int64_t block_size, uint8_t (*out)[32]) {
    if (!fingerprint || n_tokens < 0 || block_size <= 0 || (n_tokens > 0 && !tokens))
        return pdb_err_set(PDB_INVALID, "hash chain: bad arguments (n_tokens %" PRId64 ", block_size %" PRId64 ")",
                           n_tokens, block_size);
    const uint8_t *parent = pdb_block_root_hash();
    for (int64_t b = 0; b < n_tokens / block_size; b++) {
        PDB_TRY(pdb_block_hash_one(fingerprint, parent, tokens + b * block_size, block_size, out[b]));
        parent = out[b];
    }
    return PDB_OK;
}

/* ---- lookup and mount ------------------------------------------------------------------------ */

pdb_status pdb_store_longest_prefix(pdb_store *s, const uint8_t (*hashes)[32], int64_t n_blocks, int64_t *n_hit) {
    *n_hit = 0;
    if (n_blocks < 0 || (n_blocks > 0 && !hashes)) return pdb_err_set(PDB_INVALID, "longest_prefix: bad arguments");
    pdb_status st = PDB_OK;
    int64_t b = 0;
    for (; b < n_blocks; b++) {
        int hit = 0;
        st = check_block(s, hashes[b], b ? hashes[b - 1] : pdb_block_root_hash(), b, 0, &hit);
        if (st != PDB_OK || !hit) break;
    }
    /* LRU: touch the chain deepest-first, so its earliest blocks (needed by every longer
     * prefix) end up most recent and a chain is evicted from its tail. */
    pthread_mutex_lock(&s->mu);
    for (int64_t i = b; i-- > 0;) {
        entry *e = idx_find(s, hashes[i]);
        if (e) lru_touch(s, e);
    }
    s->stats.hits += (uint64_t)b;
    if (b < n_blocks) s->stats.misses++;
    pthread_mutex_unlock(&s->mu);
    *n_hit = b;
    return st;
}

pdb_status pdb_store_load_block(pdb_store *s, const uint8_t hash[32], int64_t block_index, void *const *pool_out) {
    if (!hash || block_index < 0 || !pool_out) return pdb_err_set(PDB_INVALID, "load_block: bad arguments");
    for (int p = 0; p < s->layout.n_pools; p++)
        if (!pool_out[p]) return pdb_err_set(PDB_INVALID, "load_block: no buffer for pool '%s'", s->pools[p].name);
    char sub[PATH_CAP], path[PATH_CAP];
    block_paths(s, hash, sub, path);
    pdb_block_id id = {hash, NULL, s->fingerprint, block_index, s->block_size};
    uint64_t bytes = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    pdb_status st = pdb_block_verify(path, &id, &s->layout, 1, pool_out, &bytes, &dev, &ino);
    if (st == PDB_OK) {
        int touched = utimensat(AT_FDCWD, path, NULL, 0) == 0;
        pthread_mutex_lock(&s->mu);
        entry *e = idx_note(s, hash, bytes, block_index);
        if (e && touched) e->touched_s = now_s();
        s->stats.loads++;
        pthread_mutex_unlock(&s->mu);
        return PDB_OK;
    }
    if (st == PDB_NOT_FOUND) {
        pthread_mutex_lock(&s->mu);
        idx_remove_hash(s, hash);
        pthread_mutex_unlock(&s->mu);
        return st;
    }
    if (st == PDB_CORRUPT) drop_bad(s, hash, path, dev, ino);
    return st;
}

typedef struct load_many {
    pdb_store *s;
    const uint8_t (*hashes)[32];
    int64_t first;
    void *const *const *outs;
    pdb_status *st;
    char (*msg)[256];
} load_many;

static void load_many_task(void *vc, int64_t i, int thread) {
    (void)thread;
    load_many *c = vc;
    c->st[i] = pdb_store_load_block(c->s, c->hashes[i], c->first + i, c->outs[i]);
    if (c->st[i] != PDB_OK) snprintf(c->msg[i], sizeof c->msg[i], "%s", pdb_err_msg()); /* the message is per thread */
}

pdb_status pdb_store_load_blocks(pdb_store *s, const uint8_t (*hashes)[32], int64_t first_index, int64_t n,
                                 void *const *const *pool_outs, pdb_pool *pool, int64_t *n_ok) {
    *n_ok = 0;
    if (n <= 0) return PDB_OK;
    if (!hashes || !pool_outs || first_index < 0) return pdb_err_set(PDB_INVALID, "load_blocks: bad arguments");
    pdb_status *st = calloc((size_t)n, sizeof *st);
    char(*msg)[256] = calloc((size_t)n, sizeof *msg);
    if (!st || !msg) {
        free(st);
        free(msg);
        return pdb_err_set(PDB_NOMEM, "load_blocks: %lld blocks", (long long)n);
    }
    load_many c = {s, hashes, first_index, pool_outs, st, msg};
    pdb_pool_run(pool, n, load_many_task, &c);
    int64_t k = 0;
    while (k < n && st[k] == PDB_OK) k++;
    pdb_status r = k < n ? pdb_err_set(st[k], "%s", msg[k]) : PDB_OK;
    *n_ok = k;
    free(st);
    free(msg);
    return r;
}

/* ---- streaming writer ------------------------------------------------------------------------ */

pdb_status pdb_store_stream_begin(pdb_store *s, const int32_t *tokens, int64_t n_tokens, pdb_store_stream **out) {
    *out = NULL;
    if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return pdb_err_set(PDB_INVALID, "stream_begin: bad arguments");
    if (n_tokens > PDB_STORE_MAX_TOKENS)
        return pdb_err_set(PDB_TOO_LARGE, "stream_begin: %" PRId64 " tokens, at most %lld", n_tokens,
                           (long long)PDB_STORE_MAX_TOKENS);
    pdb_store_stream *w = calloc(1, sizeof *w);
    if (!w) return pdb_err_set(PDB_NOMEM, "stream_begin");
    w->s = s;
    w->n_blocks = n_tokens / s->block_size;
    w->last_put = -1;
    int64_t nt = w->n_blocks * s->block_size;
    w->tokens = malloc((size_t)(nt ? nt : 1) * sizeof *w->tokens);
    w->hashes = malloc((size_t)(w->n_blocks ? w->n_blocks : 1) * sizeof *w->hashes);
    if (!w->tokens || !w->hashes) {
        pdb_store_stream_abort(w);
        return pdb_err_set(PDB_NOMEM, "stream_begin: %" PRId64 " tokens", n_tokens);
    }
    if (nt) memcpy(w->tokens, tokens, (size_t)nt * sizeof *w->tokens);
    pdb_status st = pdb_store_hash_chain(s->fingerprint, w->tokens, nt, s->block_size, w->hashes);
    if (st != PDB_OK) {
        pdb_store_stream_abort(w);
        return st;
    }
    *out = w;
    return PDB_OK;
}

int64_t pdb_store_stream_n_blocks(const pdb_store_stream *w) { return w->n_blocks; }

const uint8_t *pdb_store_stream_hash(const pdb_store_stream *w, int64_t b) {
    PDB_ASSERT(b >= 0 && b < w->n_blocks, "stream_hash: block index out of range");
    return w->hashes[b];
}

/* The bytes one more block file takes: the largest seen (+ slack for a longer created_at), else
 * the bound (pools + tokens + header). Called under mu. */
static uint64_t block_bound(const pdb_store *s) {
    uint64_t bound = s->block_bytes + (uint64_t)s->block_size * 4 + PDB_STORE_HEADER_BOUND;
    return s->file_bytes_seen && s->file_bytes_seen + 64 < bound ? s->file_bytes_seen + 64 : bound;
}

/* I4 before block b of w is written: under a cap, evict unprotected LRU blocks so that it fits;
 * PDB_TOO_LARGE (nothing evicted) when the stream's own prefix and the block exceed the cap. */
static pdb_status make_room(pdb_store *s, const pdb_store_stream *w, int64_t b) {
    if (!s->max_bytes) return PDB_OK;
    pthread_mutex_lock(&s->mu);
    uint64_t need = block_bound(s), kept = 0;
    if (s->total_bytes + need > s->max_bytes) {
        for (int64_t j = 0; j < b; j++) {
            entry *e = idx_find(s, w->hashes[j]);
            if (e) kept += e->bytes;
        }
        if (kept + need > s->max_bytes) {
            pthread_mutex_unlock(&s->mu);
            return pdb_err_set(PDB_TOO_LARGE,
                               "store %s: the cap of %" PRIu64 " bytes cannot hold block %" PRId64 " of this prompt: its %" PRId64
                               " earlier blocks (%" PRIu64 " bytes, kept) and this one (up to %" PRIu64 " bytes) need %" PRIu64,
                               s->dir, s->max_bytes, b, b, kept, need, kept + need);
        }
        evict_lru_locked(s, w, b - 1, s->max_bytes - need, 0);
    }
    pthread_mutex_unlock(&s->mu);
    return PDB_OK;
}

pdb_status pdb_store_stream_put(pdb_store_stream *w, int64_t b, const void *const *pool_data) {
    pdb_store *s = w->s;
    if (b < 0 || b >= w->n_blocks)
        return pdb_err_set(PDB_INVALID, "stream_put: block %" PRId64 " out of range (stream has %" PRId64 " full blocks)",
                           b, w->n_blocks);
    if (b <= w->last_put)
        return pdb_err_set(PDB_INVALID, "stream_put: block %" PRId64 " after block %" PRId64 ": blocks go in increasing order",
                           b, w->last_put);
    if (!pool_data) return pdb_err_set(PDB_INVALID, "stream_put: no pool data");
    for (int p = 0; p < s->layout.n_pools; p++)
        if (!pool_data[p]) return pdb_err_set(PDB_INVALID, "stream_put: no data for pool '%s'", s->pools[p].name);
    /* I6: every block before b must be present */
    for (int64_t j = w->n_prefix_ok; j < b; j++) {
        int hit = 0;
        PDB_TRY(check_block(s, w->hashes[j], j ? w->hashes[j - 1] : pdb_block_root_hash(), j, 0, &hit));
        if (!hit)
            return pdb_err_set(PDB_INVALID, "stream_put: block %" PRId64 " needs block %" PRId64 " first (not put, not in store %s)",
                               b, j, s->dir);
        w->n_prefix_ok = j + 1;
    }
    const uint8_t *h = w->hashes[b];
    const uint8_t *parent = b ? w->hashes[b - 1] : pdb_block_root_hash();
    /* a valid block already there (ours: header verified; unknown: fully verified) -> no-op */
    int hit = 0;
    PDB_TRY(check_block(s, h, parent, b, 1, &hit));
    if (hit) {
        pthread_mutex_lock(&s->mu);
        s->stats.write_noops++;
        pthread_mutex_unlock(&s->mu);
        w->last_put = b;
        w->n_prefix_ok = b + 1;
        return PDB_OK;
    }
    char sub[PATH_CAP], path[PATH_CAP];
    block_paths(s, h, sub, path);
    PDB_TRY(mkdir_p1(sub));
    PDB_TRY(make_room(s, w, b));
    pdb_block_id id = {h, parent, s->fingerprint, b, s->block_size};
    int published = 0;
    uint64_t bytes = 0;
    pdb_status st = pdb_block_write(&s->io, sub, &id, &s->layout, w->tokens + b * s->block_size, pool_data,
                                    &published, &bytes);
    if (st == PDB_TOO_LARGE && !published) { /* the disk is full: make room (I4), then once more */
        pthread_mutex_lock(&s->mu);
        uint64_t freed = evict_lru_locked(s, w, b - 1, UINT64_MAX, s->file_bytes_seen ? s->file_bytes_seen : block_bound(s));
        pthread_mutex_unlock(&s->mu);
        PDB_WARN("store %s: block %" PRId64 ": %s; evicted %" PRIu64 " bytes of least recently used blocks and retrying once",
                 s->dir, b, pdb_err_msg(), freed);
        st = pdb_block_write(&s->io, sub, &id, &s->layout, w->tokens + b * s->block_size, pool_data, &published, &bytes);
        if (st == PDB_TOO_LARGE)
            st = pdb_err_wrap(st, "still no room after evicting %" PRIu64 " bytes of least recently used blocks", freed);
    }
    if (published) {
        pthread_mutex_lock(&s->mu);
        entry *e = idx_note(s, h, bytes, b);
        if (e) e->touched_s = now_s();
        s->stats.writes++;
        evict_locked(s, w, b);
        pthread_mutex_unlock(&s->mu);
    }
    if (st != PDB_OK) return pdb_err_wrap(st, "store %s: writing block %" PRId64, s->dir, b);
    w->last_put = b;
    w->n_prefix_ok = b + 1;
    return PDB_OK;
}

pdb_status pdb_store_stream_finish(pdb_store_stream *w) {
    pdb_store_stream_abort(w);
    return PDB_OK;
}

void pdb_store_stream_abort(pdb_store_stream *w) {
    if (!w) return;
    free(w->tokens);
    free(w->hashes);
    free(w);
}
