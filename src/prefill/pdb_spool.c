/* pdb_spool: one mutex + one condition variable for the whole spool (transfers, entries, byte
 * counters); file I/O and copies run outside the lock on entries marked BUSY. State per transfer:
 * an entry per block (NONE, MEM unsent bytes in memory, TAKEN by the writer, BUSY being copied or
 * written, DISK a verified-on-read file), the producer's run (running, next block, generation)
 * and the current writer's generation. An entry's `ver` changes whenever it is released, so a
 * thread finishing I/O on it can tell that its result is no longer wanted. */
#include "pdb_spool.h"
#include "pdb_clock.h"
#include "pdb_dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { E_NONE, E_MEM, E_TAKEN, E_BUSY, E_DISK };

typedef struct {
    uint8_t state, sent;
    uint32_t ver;
    int prod_gen;
    uint64_t sent_seq;
    void *mem;
} sp_entry;

struct pdb_spool_xfer {
    pdb_spool *sp;
    pdb_spool_xfer *next;
    char id[33];
    uint8_t idb[16], key[32];
    int64_t n_blocks;
    uint64_t seg_bytes, mem_bytes;
    sp_entry *e;
    int refs, in_table;
    uint64_t writer_gen;
    int writer_attached;
    int prod_running, prod_cancel, prod_gen, prod_stopped; /* stopped: ended by the spool (cancel, no room) */
    int64_t prod_next;
    pdb_status prod_err; /* a failed run's status (engine error), 0 otherwise */
    char prod_msg[256];
    double last_touch;
    void *user;
    void (*user_free)(void *);
};

struct pdb_spool {
    pdb_spool_opts o;
    char dir[4096];
    pthread_mutex_t mu;
    pthread_cond_t cv, reaper_cv;
    pdb_spool_xfer *xfers;
    uint64_t spill_used, seq;
    pdb_spool_stats st;
    int closing, reaper_on;
    pthread_t reaper;
};


static uint64_t file_bytes(const pdb_spool_xfer *x) { return PDB_SPOOL_FILE_HEAD + x->seg_bytes; }

static void entry_path(const pdb_spool_xfer *x, int64_t b, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s-%lld.seg", x->sp->dir, x->id, (long long)b);
}

/* ---- spill files --------------------------------------------------------------------------
 * One file per segment, <dir>/<transfer id>-<block>.seg, all integers little-endian:
 *   offset  0  magic        u32  0x53424450 ("PDBS")
 *   offset  4  version      u32  1
 *   offset  8  transfer id  16 bytes (the 32-hex id, binary)
 *   offset 24  block_index  i64
 *   offset 32  data_len     u64  (the segment's bytes, = the stream header's block_bytes)
 *   offset 40  sha256       32 bytes, of the data
 *   offset 72  data         data_len bytes (the SEGMENT frame's data, byte for byte)
 * A file is only read after it was completely written; a read checks every field and the digest. */
static pdb_status spill_write(const pdb_spool_xfer *x, int64_t b, const void *data) {
    char path[4200];
    entry_path(x, b, path, sizeof path);
    uint8_t h[PDB_SPOOL_FILE_HEAD];
    unsigned dn = 32;
    pdb_put_le32(h, PDB_SPOOL_FILE_MAGIC);
    pdb_put_le32(h + 4, PDB_SPOOL_FILE_VERSION);
    memcpy(h + 8, x->idb, 16);
    pdb_put_le64(h + 24, (uint64_t)b);
    pdb_put_le64(h + 32, x->seg_bytes);
    if (!EVP_Digest(data, (size_t)x->seg_bytes, h + 40, &dn, EVP_sha256(), NULL))
        return pdb_err_set(PDB_IO, "spool: digest of block %lld", (long long)b);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return pdb_err_set(PDB_IO, "spool: create %s: %s", path, strerror(errno));
    const uint8_t *parts[2] = {h, data};
    uint64_t lens[2] = {PDB_SPOOL_FILE_HEAD, x->seg_bytes};
    for (int k = 0; k < 2; k++)
        for (uint64_t off = 0; off < lens[k];) {
            ssize_t n = write(fd, parts[k] + off, (size_t)(lens[k] - off));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                int er = errno;
                close(fd);
                unlink(path);
                return pdb_err_set(PDB_IO, "spool: write %s: %s", path, n < 0 ? strerror(er) : "short write");
            }
            off += (uint64_t)n;
        }
    if (close(fd)) {
        unlink(path);
        return pdb_err_set(PDB_IO, "spool: close %s: %s", path, strerror(errno));
    }
    return PDB_OK;
}

/* Read and verify; *out: seg_bytes malloc'ed bytes. PDB_NOT_FOUND when the file is gone. */
static pdb_status spill_read(const pdb_spool_xfer *x, int64_t b, void **out) {
    char path[4200];
    entry_path(x, b, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pdb_err_set(errno == ENOENT ? PDB_NOT_FOUND : PDB_IO, "spool: open %s: %s", path, strerror(errno));
    uint8_t h[PDB_SPOOL_FILE_HEAD], sum[32];
    uint8_t *data = malloc(x->seg_bytes ? (size_t)x->seg_bytes : 1);
    pdb_status st = data ? PDB_OK : pdb_err_set(PDB_NOMEM, "spool: read buffer");
    struct stat sb;
    if (!st && (fstat(fd, &sb) || (uint64_t)sb.st_size != file_bytes(x)))
        st = pdb_err_set(PDB_CORRUPT, "spool: %s has %lld bytes, expected %llu", path, (long long)sb.st_size,
                         (unsigned long long)file_bytes(x));
    uint8_t *parts[2] = {h, data};
    uint64_t lens[2] = {PDB_SPOOL_FILE_HEAD, x->seg_bytes};
    for (int k = 0; k < 2 && !st; k++)
        for (uint64_t off = 0; off < lens[k] && !st;) {
            ssize_t n = read(fd, parts[k] + off, (size_t)(lens[k] - off));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) st = pdb_err_set(n < 0 ? PDB_IO : PDB_CORRUPT, "spool: read %s: %s", path, n < 0 ? strerror(errno) : "short");
            else off += (uint64_t)n;
        }
    close(fd);
    unsigned dn = 32;
    if (!st && (pdb_get_le32(h) != PDB_SPOOL_FILE_MAGIC || pdb_get_le32(h + 4) != PDB_SPOOL_FILE_VERSION || memcmp(h + 8, x->idb, 16) ||
                (int64_t)pdb_get_le64(h + 24) != b || pdb_get_le64(h + 32) != x->seg_bytes))
        st = pdb_err_set(PDB_CORRUPT, "spool: %s: header does not match (magic, version, transfer, block or length)", path);
    if (!st && (!EVP_Digest(data, (size_t)x->seg_bytes, sum, &dn, EVP_sha256(), NULL) || memcmp(sum, h + 40, 32)))
        st = pdb_err_set(PDB_CORRUPT, "spool: %s fails its checksum", path);
    if (st) { free(data); return st; }
    *out = data;
    return PDB_OK;
}

/* ---- accounting (under mu) ----------------------------------------------------------------- */

static void entry_release(pdb_spool_xfer *x, int64_t b) {
    pdb_spool *sp = x->sp;
    sp_entry *e = &x->e[b];
    switch (e->state) {
    case E_MEM:
        free(e->mem);
        e->mem = NULL;
        x->mem_bytes -= x->seg_bytes;
        e->state = E_NONE;
        break;
    case E_TAKEN: /* the writer frees it and gives the memory back */
        e->state = E_NONE;
        break;
    case E_DISK: {
        char path[4200];
        entry_path(x, b, path, sizeof path);
        unlink(path);
        sp->spill_used -= file_bytes(x);
        sp->st.spill_files--;
        e->state = E_NONE;
        break;
    }
    case E_BUSY: /* the thread doing the I/O sees the new ver and cleans up */
        break;
    default:
        return;
    }
    e->ver++;
    e->sent = 0;
}

/* Give up the oldest sent, retained segment of any transfer; 0 when there is none. */
static int evict_one(pdb_spool *sp) {
    pdb_spool_xfer *bx = NULL;
    int64_t bb = -1;
    uint64_t best = UINT64_MAX;
    for (pdb_spool_xfer *x = sp->xfers; x; x = x->next)
        for (int64_t b = 0; b < x->n_blocks; b++)
            if (x->e[b].state == E_DISK && x->e[b].sent && x->e[b].sent_seq < best) {
                best = x->e[b].sent_seq;
                bx = x;
                bb = b;
            }
    if (!bx) return 0;
    entry_release(bx, bb);
    sp->st.evicted++;
    return 1;
}

/* Reserve n spill bytes, evicting retained segments when needed and allowed (only unsent
 * segments may take a retained one's room); 0 when there is no room. */
static int spill_reserve(pdb_spool *sp, uint64_t n, int may_evict) {
    if (n > sp->o.spill_max_bytes) return 0;
    while (sp->spill_used + n > sp->o.spill_max_bytes)
        if (!may_evict || !evict_one(sp)) return 0;
    sp->spill_used += n;
    if (sp->spill_used > sp->st.spill_peak) sp->st.spill_peak = sp->spill_used;
    return 1;
}

/* After a spill write on a BUSY entry reserved at version ver: keep it (DISK) or clean up. */
static void spill_finish(pdb_spool_xfer *x, int64_t b, uint32_t ver, pdb_status wst) {
    pdb_spool *sp = x->sp;
    sp_entry *e = &x->e[b];
    if (!wst && e->ver == ver && x->in_table && !sp->closing) {
        e->state = E_DISK;
        sp->st.spill_files++;
        return;
    }
    if (!wst) {
        char path[4200];
        entry_path(x, b, path, sizeof path);
        unlink(path);
    }
    sp->spill_used -= file_bytes(x);
    if (e->ver == ver) e->ver++;
    e->state = E_NONE;
    e->sent = 0;
}

/* Move a writer's (or a detached queue's) memory bytes of block b to disk; called with mu held,
 * returns with mu held. The entry must be TAKEN (owned by the caller) with data = its bytes. */
static void retain_to_disk(pdb_spool_xfer *x, int64_t b, void *data, uint32_t ver) {
    pdb_spool *sp = x->sp;
    sp_entry *e = &x->e[b];
    x->mem_bytes -= x->seg_bytes;
    if (e->ver != ver || !x->in_table || sp->closing) { /* released meanwhile */
        free(data);
        return;
    }
    if (!spill_reserve(sp, file_bytes(x), e->sent ? 0 : 1)) {
        e->state = E_NONE;
        e->ver++;
        if (e->sent) sp->st.not_retained++;
        e->sent = 0;
        free(data);
        return;
    }
    e->state = E_BUSY;
    pthread_mutex_unlock(&sp->mu);
    pdb_status wst = spill_write(x, b, data);
    if (wst) PDB_WARN("%s", pdb_err_msg());
    free(data);
    pthread_mutex_lock(&sp->mu);
    spill_finish(x, b, ver, wst);
}

/* ---- spool lifecycle ----------------------------------------------------------------------- */

static void xfer_free(pdb_spool_xfer *x) {
    if (x->user_free) x->user_free(x->user);
    free(x->e);
    free(x);
}

/* Remove from the table and release every entry (under mu); freed when the last ref goes. */
static void xfer_drop(pdb_spool_xfer *x) {
    pdb_spool *sp = x->sp;
    if (!x->in_table) return;
    for (int64_t b = 0; b < x->n_blocks; b++) entry_release(x, b);
    x->in_table = 0;
    for (pdb_spool_xfer **pp = &sp->xfers; *pp; pp = &(*pp)->next)
        if (*pp == x) { *pp = x->next; break; }
    sp->st.transfers--;
    pthread_cond_broadcast(&sp->cv);
}

static void reap_locked(pdb_spool *sp) {
    double now = pdb_clock_now(), ttl = (sp->o.ttl_ms > 0 ? sp->o.ttl_ms : 120000) / 1e3;
    for (pdb_spool_xfer *x = sp->xfers, *nx; x; x = nx) {
        nx = x->next;
        if (x->refs == 0 && now - x->last_touch > ttl) {
            xfer_drop(x);
            sp->st.expired++;
            xfer_free(x);
        }
    }
}

void pdb_spool_reap(pdb_spool *sp) {
    pthread_mutex_lock(&sp->mu);
    reap_locked(sp);
    pthread_mutex_unlock(&sp->mu);
}

static void *reaper_main(void *arg) {
    pdb_spool *sp = arg;
    int64_t ttl = sp->o.ttl_ms > 0 ? sp->o.ttl_ms : 120000, period = ttl / 4;
    if (period > 1000) period = 1000;
    if (period < 10) period = 10;
    pthread_mutex_lock(&sp->mu);
    while (!sp->closing) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += (long)(period % 1000) * 1000000L;
        dl.tv_sec += period / 1000 + dl.tv_nsec / 1000000000L;
        dl.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&sp->reaper_cv, &sp->mu, &dl);
        if (!sp->closing) reap_locked(sp);
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

pdb_status pdb_spool_open(const pdb_spool_opts *o, pdb_spool **out) {
    pdb_spool *sp = calloc(1, sizeof *sp);
    if (!sp) return pdb_err_set(PDB_NOMEM, "spool");
    sp->o = *o;
    const char *parent = o->dir && *o->dir ? o->dir : getenv("TMPDIR");
    if (!parent || !*parent) parent = "/tmp";
    if (o->dir && *o->dir && mkdir(parent, 0700) && errno != EEXIST) {
        pdb_status st = pdb_err_set(PDB_IO, "spool: --spill-dir %s: %s", parent, strerror(errno));
        free(sp);
        return st;
    }
    snprintf(sp->dir, sizeof sp->dir, "%s/pdbridge-spool-XXXXXX", parent);
    if (!mkdtemp(sp->dir)) {
        pdb_status st = pdb_err_set(PDB_IO, "spool: cannot create a spill directory under %s: %s", parent, strerror(errno));
        free(sp);
        return st;
    }
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->cv, NULL);
    pthread_cond_init(&sp->reaper_cv, NULL);
    if (pthread_create(&sp->reaper, NULL, reaper_main, sp) == 0) sp->reaper_on = 1;
    *out = sp;
    return PDB_OK;
}

const char *pdb_spool_dir(const pdb_spool *sp) { return sp->dir; }

void pdb_spool_shutdown(pdb_spool *sp) {
    if (!sp) return;
    pthread_mutex_lock(&sp->mu);
    sp->closing = 1;
    pthread_cond_broadcast(&sp->cv);
    pthread_cond_broadcast(&sp->reaper_cv);
    pthread_mutex_unlock(&sp->mu);
}

void pdb_spool_close(pdb_spool *sp) {
    if (!sp) return;
    pdb_spool_shutdown(sp);
    if (sp->reaper_on) pthread_join(sp->reaper, NULL);
    pthread_mutex_lock(&sp->mu);
    while (sp->xfers) {
        pdb_spool_xfer *x = sp->xfers;
        xfer_drop(x);
        if (x->refs == 0) xfer_free(x);
        else PDB_WARN("spool: transfer %s still referenced at close", x->id);
    }
    pthread_mutex_unlock(&sp->mu);
    if (rmdir(sp->dir)) PDB_WARN("spool: removing %s: %s", sp->dir, strerror(errno));
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->cv);
    pthread_cond_destroy(&sp->reaper_cv);
    free(sp);
}

void pdb_spool_get_stats(pdb_spool *sp, pdb_spool_stats *out) {
    pthread_mutex_lock(&sp->mu);
    *out = sp->st;
    out->spill_bytes = sp->spill_used;
    out->mem_bytes = 0;
    for (pdb_spool_xfer *x = sp->xfers; x; x = x->next) out->mem_bytes += x->mem_bytes;
    pthread_mutex_unlock(&sp->mu);
}

/* ---- transfers ----------------------------------------------------------------------------- */

pdb_status pdb_spool_create_xfer(pdb_spool *sp, const uint8_t key[32], int64_t n_blocks, uint64_t seg_bytes, void *user,
                                 void (*user_free)(void *), pdb_spool_xfer **out) {
    if (n_blocks < 0 || !seg_bytes) return pdb_err_set(PDB_INVALID, "spool: transfer of %lld blocks of %llu bytes",
                                                       (long long)n_blocks, (unsigned long long)seg_bytes);
    pdb_spool_xfer *x = calloc(1, sizeof *x);
    sp_entry *e = calloc((size_t)n_blocks + 1, sizeof *e);
    if (!x || !e) { free(x); free(e); return pdb_err_set(PDB_NOMEM, "spool: transfer"); }
    if (RAND_bytes(x->idb, 16) != 1) { free(x); free(e); return pdb_err_set(PDB_IO, "spool: no random bytes for a transfer id"); }
    for (int i = 0; i < 16; i++) snprintf(x->id + 2 * i, 3, "%02x", x->idb[i]);
    memcpy(x->key, key, 32);
    x->sp = sp;
    x->e = e;
    x->n_blocks = n_blocks;
    x->seg_bytes = seg_bytes;
    x->refs = 1;
    x->in_table = 1;
    x->user = user;
    x->user_free = user_free;
    pthread_mutex_lock(&sp->mu);
    x->last_touch = pdb_clock_now();
    x->next = sp->xfers;
    sp->xfers = x;
    sp->st.transfers++;
    pthread_mutex_unlock(&sp->mu);
    *out = x;
    return PDB_OK;
}

pdb_status pdb_spool_find_xfer(pdb_spool *sp, const char *id, pdb_spool_xfer **out) {
    pthread_mutex_lock(&sp->mu);
    for (pdb_spool_xfer *x = sp->xfers; x; x = x->next)
        if (!strcmp(x->id, id)) {
            x->refs++;
            x->last_touch = pdb_clock_now();
            pthread_mutex_unlock(&sp->mu);
            *out = x;
            return PDB_OK;
        }
    pthread_mutex_unlock(&sp->mu);
    return pdb_err_set(PDB_NOT_FOUND, "transfer %.40s is not retained (unknown, expired or released)", id);
}

void pdb_spool_unref_xfer(pdb_spool_xfer *x) {
    if (!x) return;
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    x->last_touch = pdb_clock_now();
    int gone = --x->refs == 0 && !x->in_table;
    pthread_mutex_unlock(&sp->mu);
    if (gone) xfer_free(x);
}

const char *pdb_spool_xfer_id(const pdb_spool_xfer *x) { return x->id; }
const uint8_t *pdb_spool_xfer_key(const pdb_spool_xfer *x) { return x->key; }
void *pdb_spool_xfer_user(const pdb_spool_xfer *x) { return x->user; }
int64_t pdb_spool_xfer_blocks(const pdb_spool_xfer *x) { return x->n_blocks; }

static int covers(pdb_spool_xfer *x, int64_t from, int count_producer) {
    pdb_spool *sp = x->sp;
    int ok = 1;
    pthread_mutex_lock(&sp->mu);
    for (int64_t b = from < 0 ? 0 : from; b < x->n_blocks; b++) {
        if (count_producer && x->prod_running && !x->prod_cancel && x->prod_next <= b) break;
        if (x->e[b].state == E_NONE) { ok = 0; break; }
    }
    if (!x->in_table) ok = 0;
    pthread_mutex_unlock(&sp->mu);
    return ok;
}

int pdb_spool_covers(pdb_spool_xfer *x, int64_t from) { return covers(x, from, 1); }
int pdb_spool_holds(pdb_spool_xfer *x, int64_t from) { return covers(x, from, 0); }

/* ---- producer ------------------------------------------------------------------------------ */

pdb_status pdb_spool_begin_production(pdb_spool_xfer *x, int64_t from, int *gen) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    if (x->prod_running || !x->in_table || sp->closing || from < 0 || from > x->n_blocks) {
        pthread_mutex_unlock(&sp->mu);
        return pdb_err_set(PDB_INVALID, "spool: transfer %s cannot start producing from block %lld", x->id, (long long)from);
    }
    x->prod_running = 1;
    x->prod_cancel = x->prod_stopped = 0;
    x->prod_err = PDB_OK;
    x->prod_next = from;
    x->prod_gen++;
    if (gen) *gen = x->prod_gen;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    return PDB_OK;
}

pdb_status pdb_spool_put_segment(pdb_spool_xfer *x, int64_t block, const void *data, uint64_t bytes) {
    pdb_spool *sp = x->sp;
    if (block < 0 || block >= x->n_blocks || bytes != x->seg_bytes)
        return pdb_err_set(PDB_INVALID, "spool: block %lld of %llu bytes does not fit transfer %s", (long long)block,
                           (unsigned long long)bytes, x->id);
    pthread_mutex_lock(&sp->mu);
    sp_entry *e = &x->e[block];
    pdb_status st = PDB_OK;
    int paused = 0;
    for (;;) {
        x->last_touch = pdb_clock_now();
        if (sp->closing || !x->in_table || x->prod_cancel) {
            x->prod_stopped = 1;
            st = pdb_err_set(PDB_IO, "spool: transfer %s %s", x->id,
                             sp->closing ? "is shutting down" : !x->in_table ? "was released" : "was cancelled");
            break;
        }
        if (e->state != E_NONE) break; /* already held (a deterministic engine makes the same bytes) */
        if (x->writer_attached && (x->mem_bytes == 0 || x->mem_bytes + bytes <= sp->o.mem_max_bytes)) {
            uint32_t ver = e->ver;
            x->mem_bytes += bytes;
            e->state = E_BUSY;
            pthread_mutex_unlock(&sp->mu);
            void *m = malloc((size_t)bytes);
            if (m) memcpy(m, data, (size_t)bytes);
            pthread_mutex_lock(&sp->mu);
            if (!m) {
                x->mem_bytes -= bytes;
                e->state = E_NONE;
                st = pdb_err_set(PDB_NOMEM, "spool: %llu bytes for block %lld", (unsigned long long)bytes, (long long)block);
                break;
            }
            if (e->ver != ver || !x->in_table || sp->closing) {
                free(m);
                x->mem_bytes -= bytes;
                e->state = E_NONE;
                continue; /* re-evaluated: released or shutting down */
            }
            e->state = E_MEM;
            e->mem = m;
            e->sent = 0;
            e->prod_gen = x->prod_gen;
            break;
        }
        if (spill_reserve(sp, file_bytes(x), 1)) {
            uint32_t ver = e->ver;
            e->state = E_BUSY;
            e->sent = 0;
            e->prod_gen = x->prod_gen;
            pthread_mutex_unlock(&sp->mu);
            pdb_status wst = spill_write(x, block, data);
            pthread_mutex_lock(&sp->mu);
            spill_finish(x, block, ver, wst);
            st = wst;
            break;
        }
        if (!x->writer_attached) {
            x->prod_stopped = 1;
            st = pdb_err_set(PDB_TOO_LARGE, "spool: transfer %s has no consumer and the spill area is full (%llu bytes)",
                             x->id, (unsigned long long)sp->o.spill_max_bytes);
            break;
        }
        if (!paused) sp->st.pauses++;
        paused = 1;
        pthread_cond_wait(&sp->cv, &sp->mu); /* the engine pauses until the writer drains */
    }
    if (!st) x->prod_next = block + 1;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    return st;
}

void pdb_spool_end_production(pdb_spool_xfer *x, pdb_status st, const char *msg) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    x->prod_running = 0;
    x->prod_err = st && !x->prod_stopped ? st : PDB_OK;
    snprintf(x->prod_msg, sizeof x->prod_msg, "%s", st && msg ? msg : "");
    x->last_touch = pdb_clock_now();
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
}

void pdb_spool_cancel_production(pdb_spool_xfer *x) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    if (x->prod_running) x->prod_cancel = 1;
    pthread_cond_broadcast(&sp->cv);
    while (x->prod_running) pthread_cond_wait(&sp->cv, &sp->mu);
    x->prod_cancel = 0;
    pthread_mutex_unlock(&sp->mu);
}

/* ---- writer -------------------------------------------------------------------------------- */

uint64_t pdb_spool_attach_writer(pdb_spool_xfer *x, int *base_gen) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    uint64_t g = ++x->writer_gen;
    x->writer_attached = 1;
    if (base_gen) *base_gen = x->prod_gen;
    x->last_touch = pdb_clock_now();
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    return g;
}

int pdb_spool_writer_current(pdb_spool_xfer *x, uint64_t gen) {
    pthread_mutex_lock(&x->sp->mu);
    int cur = x->writer_gen == gen && x->in_table && !x->sp->closing;
    pthread_mutex_unlock(&x->sp->mu);
    return cur;
}

void pdb_spool_detach_writer(pdb_spool_xfer *x, uint64_t gen) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    if (x->writer_gen == gen) {
        x->writer_attached = 0;
        for (int64_t b = 0; b < x->n_blocks; b++) { /* the unsent queue goes to disk (or is dropped) */
            sp_entry *e = &x->e[b];
            if (e->state != E_MEM) continue;
            void *m = e->mem;
            e->mem = NULL;
            e->state = E_TAKEN;
            retain_to_disk(x, b, m, e->ver);
        }
    }
    x->last_touch = pdb_clock_now();
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
}

pdb_status pdb_spool_take_segment(pdb_spool_xfer *x, uint64_t gen, int64_t block, pdb_spool_seg *seg) {
    pdb_spool *sp = x->sp;
    if (block < 0 || block >= x->n_blocks) return pdb_err_set(PDB_INVALID, "spool: no block %lld", (long long)block);
    pthread_mutex_lock(&sp->mu);
    pdb_status st;
    for (;;) {
        sp_entry *e = &x->e[block];
        x->last_touch = pdb_clock_now();
        if (sp->closing || !x->in_table || x->writer_gen != gen) {
            st = pdb_err_set(PDB_IO, "spool: transfer %s %s", x->id,
                             sp->closing ? "is shutting down" : !x->in_table ? "was released" : "was taken over by a resume");
            break;
        }
        if (e->state == E_MEM) {
            *seg = (pdb_spool_seg){.block = block, .data = e->mem, .bytes = x->seg_bytes, .prod_gen = e->prod_gen,
                                   .from_mem = 1, .ver = e->ver};
            e->mem = NULL;
            e->state = E_TAKEN;
            st = PDB_OK;
            break;
        }
        if (e->state == E_DISK) {
            uint32_t ver = e->ver;
            int pg = e->prod_gen;
            pthread_mutex_unlock(&sp->mu);
            void *data = NULL;
            pdb_status rs = spill_read(x, block, &data);
            pthread_mutex_lock(&sp->mu);
            if (!rs) {
                *seg = (pdb_spool_seg){.block = block, .data = data, .bytes = x->seg_bytes, .prod_gen = pg, .ver = ver};
                st = PDB_OK;
                break;
            }
            if (rs == PDB_NOT_FOUND && e->ver != ver) continue; /* released meanwhile: look again */
            PDB_WARN("%s", pdb_err_msg());
            if (e->ver == ver && e->state == E_DISK) entry_release(x, block);
            sp->st.corrupt++;
            st = pdb_err_set(PDB_CORRUPT, "spool: block %lld of transfer %s failed verification", (long long)block, x->id);
            break;
        }
        if (e->state == E_NONE && !(x->prod_running && !x->prod_cancel && x->prod_next <= block)) {
            if (!x->prod_running && x->prod_err && x->prod_next <= block) {
                st = pdb_err_set(x->prod_err, "%s", x->prod_msg[0] ? x->prod_msg : "prefill failed");
                break;
            }
            st = pdb_err_set(PDB_NOT_FOUND, "spool: block %lld of transfer %s is not held", (long long)block, x->id);
            break;
        }
        pthread_cond_wait(&sp->cv, &sp->mu); /* being made, copied, written, or held by an old writer */
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

void pdb_spool_done_segment(pdb_spool_xfer *x, pdb_spool_seg *seg, int delivered) {
    pdb_spool *sp = x->sp;
    pthread_mutex_lock(&sp->mu);
    sp_entry *e = &x->e[seg->block];
    x->last_touch = pdb_clock_now();
    if (seg->from_mem) {
        if (e->ver == seg->ver && e->state == E_TAKEN && !delivered && x->in_table) {
            e->state = E_MEM; /* back to the queue */
            e->mem = seg->data;
        } else {
            if (delivered && e->ver == seg->ver) {
                e->sent = 1;
                e->sent_seq = ++sp->seq;
            }
            retain_to_disk(x, seg->block, seg->data, seg->ver);
        }
    } else {
        free(seg->data);
        if (delivered && e->ver == seg->ver && e->state == E_DISK) {
            e->sent = 1;
            e->sent_seq = ++sp->seq;
        }
    }
    seg->data = NULL;
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
}

/* ---- acknowledgement ----------------------------------------------------------------------- */

pdb_status pdb_spool_ack(pdb_spool_xfer *x, int64_t through, int64_t *released) {
    pdb_spool *sp = x->sp;
    int64_t n = 0;
    if (through < 0) return pdb_err_set(PDB_INVALID, "through_block must be >= 0");
    pthread_mutex_lock(&sp->mu);
    if (!x->in_table) {
        pthread_mutex_unlock(&sp->mu);
        return pdb_err_set(PDB_NOT_FOUND, "transfer %s was already released", x->id);
    }
    int64_t end = through < x->n_blocks ? through : x->n_blocks;
    for (int64_t b = 0; b < end; b++)
        if (x->e[b].state != E_NONE) {
            entry_release(x, b);
            n++;
        }
    if (through >= x->n_blocks) xfer_drop(x); /* everything acknowledged: released at once */
    x->last_touch = pdb_clock_now();
    pthread_cond_broadcast(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    if (released) *released = n;
    return PDB_OK;
}
