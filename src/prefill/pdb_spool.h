/* pdb_spool: keeps a prefill transfer's segments until the consumer acknowledges them, in memory
 * while the transfer's memory queue has room, else in files of a bounded spill directory.
 * One transfer = one prompt's blocks [0, n_blocks), produced in increasing order by at most one
 * producer at a time (the engine) and drained in order by at most one current writer (the HTTP
 * connection); a resume attaches a new writer, which supersedes the old one.
 * Invariants:
 *  - memory: a transfer holds at most max(mem_max, one segment) bytes of unsent segments, and
 *    only while a writer is attached; the spill directory holds at most spill_max bytes of files
 *    (header + data) across all transfers, counted before a file is written;
 *  - an unsent segment is never dropped to make room: when neither memory nor spill has room the
 *    producer waits (the engine pauses) until the writer drains; sent but unacknowledged segments
 *    are retained on disk and are the first thing given up (oldest first) when an unsent one
 *    needs the room; without a writer the producer does not wait: it stops (the blocks it could
 *    not keep will be recomputed);
 *  - a spill file is verified (magic, version, transfer, block, length, SHA-256) before it is
 *    sent; one that fails is deleted and reported PDB_CORRUPT, never sent;
 *  - acknowledged segments, transfers idle (no producer, no writer) for longer than the TTL and
 *    everything at pdb_spool_close are deleted; a directory the spool created is removed at close.
 * Spill file format: see pdb_spool.c (spill_write) and docs/protocol.md. */
#ifndef PDB_SPOOL_H
#define PDB_SPOOL_H

#include <stdint.h>

#include "pdb_status.h"

#define PDB_SPOOL_FILE_MAGIC 0x53424450u /* "PDBS" */
#define PDB_SPOOL_FILE_VERSION 1u
#define PDB_SPOOL_FILE_HEAD 72u

typedef struct pdb_spool pdb_spool;
typedef struct pdb_spool_xfer pdb_spool_xfer;

typedef struct pdb_spool_opts {
    const char *dir;          /* parent of the per-spool directory; NULL = $TMPDIR or /tmp */
    uint64_t spill_max_bytes; /* bound on spill files (bytes); 0 = no spill at all */
    uint64_t mem_max_bytes;   /* per transfer memory queue; one segment always fits */
    int64_t ttl_ms;           /* idle transfers are dropped after this; <= 0 = 120000 */
} pdb_spool_opts;

typedef struct pdb_spool_stats {
    uint64_t spill_bytes, spill_peak, spill_files, mem_bytes;
    uint64_t pauses;      /* times a producer waited for room */
    uint64_t evicted;     /* retained (sent) segments given up for room */
    uint64_t not_retained;/* sent segments that found no room to be retained */
    uint64_t corrupt;     /* spill files that failed verification */
    uint64_t expired;     /* transfers dropped by the TTL */
    int transfers;
} pdb_spool_stats;

/* A segment handed to the writer: data (bytes) is owned by the writer until pdb_spool_done. */
typedef struct pdb_spool_seg {
    int64_t block;
    void *data;
    uint64_t bytes;
    int prod_gen;     /* the production run that made it */
    int from_mem;
    uint32_t ver;
} pdb_spool_seg;

pdb_status pdb_spool_open(const pdb_spool_opts *o, pdb_spool **out);
/* Wake every waiter with PDB_IO (producers, writers): call before stopping their threads. */
void pdb_spool_shutdown(pdb_spool *sp);
/* Deletes every file and the directory the spool created; no transfer may be in use. */
void pdb_spool_close(pdb_spool *sp);
const char *pdb_spool_dir(const pdb_spool *sp);
void pdb_spool_get_stats(pdb_spool *sp, pdb_spool_stats *out);
/* Drop transfers idle for longer than the TTL (also done by the spool's own timer). */
void pdb_spool_reap(pdb_spool *sp);

/* A new transfer with a fresh random id (32 hex); key identifies the request (resumes must
 * match it). The caller holds one reference. user is freed with user_free with the transfer. */
pdb_status pdb_spool_create_xfer(pdb_spool *sp, const uint8_t key[32], int64_t n_blocks, uint64_t seg_bytes, void *user,
                                 void (*user_free)(void *), pdb_spool_xfer **out);
/* PDB_NOT_FOUND when no live transfer has that id; else a new reference. */
pdb_status pdb_spool_find_xfer(pdb_spool *sp, const char *id, pdb_spool_xfer **out);
void pdb_spool_unref_xfer(pdb_spool_xfer *x);
const char *pdb_spool_xfer_id(const pdb_spool_xfer *x);
const uint8_t *pdb_spool_xfer_key(const pdb_spool_xfer *x);
void *pdb_spool_xfer_user(const pdb_spool_xfer *x);
/* True when every block in [from, n_blocks) is held or will be made by the running producer. */
int pdb_spool_covers(pdb_spool_xfer *x, int64_t from);
/* True when every block in [from, n_blocks) is held now (a production run may stop early). */
int pdb_spool_holds(pdb_spool_xfer *x, int64_t from);

/* ---- producer ---- */
/* Starts a production run from block `from` (PDB_INVALID while one runs); *gen: its number. */
pdb_status pdb_spool_begin_production(pdb_spool_xfer *x, int64_t from, int *gen);
/* Keep block's bytes (copied). Waits while there is no room and a writer is attached. PDB_IO:
 * cancelled, transfer released or shutting down; PDB_TOO_LARGE: no writer and no room. */
pdb_status pdb_spool_put_segment(pdb_spool_xfer *x, int64_t block, const void *data, uint64_t bytes);
/* st: how the run ended (its message is pdb_err_msg() of the producer's thread when st != 0). */
void pdb_spool_end_production(pdb_spool_xfer *x, pdb_status st, const char *msg);
/* Make a running producer stop at its next segment and wait until it has ended. */
void pdb_spool_cancel_production(pdb_spool_xfer *x);

/* ---- writer ---- */
/* Become the transfer's writer (the previous one is superseded); *base_gen: the number of the
 * last production run started before, so segments with prod_gen > base_gen were made for us. */
uint64_t pdb_spool_attach_writer(pdb_spool_xfer *x, int *base_gen);
int pdb_spool_writer_current(pdb_spool_xfer *x, uint64_t gen);
/* The writer goes away: its memory segments are spilled (or dropped when there is no room). */
void pdb_spool_detach_writer(pdb_spool_xfer *x, uint64_t gen);
/* Block `block` for sending; waits while the running producer will still make it. PDB_NOT_FOUND:
 * nobody will make it (start a production run from it); PDB_CORRUPT: its spill file failed
 * verification and was deleted (idem); PDB_IO: superseded, released or shutting down; another
 * status: the production run failed (message in pdb_err_msg()). */
pdb_status pdb_spool_take_segment(pdb_spool_xfer *x, uint64_t gen, int64_t block, pdb_spool_seg *seg);
/* The writer is done with seg: delivered = it was sent (retain it until acknowledged), else it
 * goes back to the queue. Frees seg->data. */
void pdb_spool_done_segment(pdb_spool_xfer *x, pdb_spool_seg *seg, int delivered);

/* ---- consumer acknowledgement ---- */
/* Release blocks < through; through >= n_blocks releases the whole transfer (it is then no longer
 * found). *released: segments deleted (may be NULL). */
pdb_status pdb_spool_ack(pdb_spool_xfer *x, int64_t through, int64_t *released);
int64_t pdb_spool_xfer_blocks(const pdb_spool_xfer *x);

#endif
