/* pdb_store: the decoder's content-addressed prefix-cache store. Blocks of block_size tokens
 * (a multiple of 128), named by a chain hash, stored one safetensors-compatible file per
 * block (<dir>/<first 2 hex>/<hash hex>.pdbblk, format in docs/formats/block.md), published
 * atomically, verified before use, bounded by an LRU size cap. Any program may write blocks
 * through this API; any handle on the same directory finds them (a lookup that misses in
 * memory checks the file named by the hash).
 * Invariants: a visible block file is always complete; a block that fails verification is
 * never served (it is a miss, logged and removed); every function is thread-safe on one
 * handle; several handles/processes may share one directory. */
#ifndef PDB_STORE_H
#define PDB_STORE_H

#include <stdint.h>
#include <sys/types.h>

#include "pdb_dtype.h"
#include "pdb_status.h"

#define PDB_STORE_HASH_BYTES 32
#define PDB_STORE_MAX_POOLS 64
#define PDB_STORE_MAX_NAME 64 /* pool name length limit, bytes, excluding NUL */

/* ---- layout: what one block holds (generic over models; append-only enum) ---------------- */
typedef enum pdb_store_pool_kind {
    PDB_STORE_POOL_APPEND = 0, /* one row per `stride` tokens: block_size/stride rows per block */
    PDB_STORE_POOL_STATE = 1,  /* fixed snapshot of `rows` rows taken at the block's end */
} pdb_store_pool_kind;

typedef struct pdb_store_pool {
    const char *name;         /* tensor name; [A-Za-z0-9_.-]+, unique, not "tokens" */
    pdb_store_pool_kind kind;
    int64_t n_layers;         /* >= 1 */
    int64_t stride;           /* APPEND: tokens per row, divides block_size; STATE: ignored */
    int64_t rows;             /* STATE: snapshot rows (>= 1); APPEND: ignored */
    int64_t width;            /* elements per row (>= 1) */
    pdb_dtype dtype;
} pdb_store_pool;

typedef struct pdb_store_layout {
    int n_pools;                 /* 1..PDB_STORE_MAX_POOLS */
    const pdb_store_pool *pools; /* [n_pools]; the block tensor "<name>" is [n_layers, rows, width] */
} pdb_store_layout;

/* Rows of a pool per block (APPEND: block_size/stride; STATE: rows); 0 if invalid. */
int64_t pdb_store_pool_rows(const pdb_store_pool *pool, int64_t block_size);
/* Bytes of a pool per block: n_layers * rows * width * dtype size; 0 if invalid. */
uint64_t pdb_store_pool_bytes(const pdb_store_pool *pool, int64_t block_size);
/* Bytes of one block of the layout: its pools back to back. */
uint64_t pdb_store_layout_block_bytes(const pdb_store_layout *layout, int64_t block_size);

/* ---- chain hash ---------------------------------------------------------------------------- */
/* hash[b] = SHA-256(fingerprint[32] || parent[32] || tokens[b*bs .. (b+1)*bs) as LE u32), parent
 * = hash[b-1], or for b = 0 the root constant SHA-256("pdbridge-root-v1"). Only full blocks:
 * out_hashes holds n_tokens / block_size entries. */
pdb_status pdb_store_hash_chain(const uint8_t fingerprint[PDB_STORE_HASH_BYTES],
                                const int32_t *tokens /* [n_tokens] */, int64_t n_tokens,
                                int64_t block_size,
                                uint8_t (*out_hashes)[PDB_STORE_HASH_BYTES] /* [n_tokens/block_size] */);
/* Lower-case hex of a hash into out[65] (NUL-terminated). */
void pdb_store_hash_hex(const uint8_t hash[PDB_STORE_HASH_BYTES], char out[2 * PDB_STORE_HASH_BYTES + 1]);

/* ---- store ---------------------------------------------------------------------------------- */
typedef struct pdb_store pdb_store;

/* Open (creating dir if needed). block_size % 128 == 0 else PDB_INVALID. The first open
 * records block_size, the fingerprint and the layout in <dir>/store.json; a later open with a
 * different block_size or layout fails with PDB_MISMATCH (a different fingerprint is fine).
 * Scans the directory to rebuild the index (LRU order from file mtimes) and removes temp
 * files left by crashed writers. max_bytes: cap on block file bytes, 0 = unlimited; a cap above
 * what the disk can hold (blocks already there + free space) is warned about, not refused. Under
 * the cap a put evicts least recently used blocks before it writes, never the writing prompt's
 * own earlier blocks (when those and the new block exceed the cap the put is PDB_TOO_LARGE); a
 * put the disk refuses for space evicts and retries once. */
pdb_status pdb_store_open(const char *dir, const pdb_store_layout *layout,
                          const uint8_t fingerprint[PDB_STORE_HASH_BYTES], int64_t block_size,
                          uint64_t max_bytes, pdb_store **out);
void pdb_store_close(pdb_store *store); /* finish or abort its streams first */

/* Sum of pdb_store_pool_bytes over the layout (the caller's buffers for one block). */
uint64_t pdb_store_block_bytes(const pdb_store *store);

/* *n_hit = number of leading blocks of hashes[0..n_blocks) that are present and valid.
 * Verification at lookup (cheap): the file exists; the first time this handle sees it, its
 * header is parsed and its identity checked (block_hash, parent_hash = hashes[b-1] or root,
 * fingerprint, block_index, block_size, tensor names/dtypes/shapes, hash recomputed from the
 * file's parent hash and tokens). The tensor checksum is checked at load, not here. */
pdb_status pdb_store_longest_prefix(pdb_store *store,
                                    const uint8_t (*hashes)[PDB_STORE_HASH_BYTES] /* [n_blocks] */,
                                    int64_t n_blocks, int64_t *n_hit);

/* Mount one block into caller buffers pool_out[p] (pdb_store_pool_bytes(p) bytes each) after
 * full verification (identity as above + SHA-256 checksum of all tensor bytes).
 * PDB_NOT_FOUND if absent; PDB_CORRUPT if the file was bad (it is removed). */
pdb_status pdb_store_load_block(pdb_store *store, const uint8_t hash[PDB_STORE_HASH_BYTES],
                                int64_t block_index, void *const *pool_out /* [n_pools] */);

/* Mount n consecutive blocks of a chain (hashes[i] is block first_index + i) into
 * pool_outs[i][p], as pdb_store_load_block each (full verification), several at once: each
 * block is one task of pool (NULL: one after the other on the caller's thread). *n_ok = the
 * number of leading blocks mounted; when it is < n the status and message are those of block
 * first_index + *n_ok (later blocks may have been read too: their buffers are not meaningful). */
typedef struct pdb_pool pdb_pool;
pdb_status pdb_store_load_blocks(pdb_store *store, const uint8_t (*hashes)[PDB_STORE_HASH_BYTES], int64_t first_index, int64_t n,
                                 void *const *const *pool_outs /* [n][n_pools] */, pdb_pool *pool, int64_t *n_ok);

/* ---- streaming writer: keeps no block data; writes straight from the caller's buffers.
 * One stream is used by one thread at a time; many streams may run on one store at once. */
typedef struct pdb_store_stream pdb_store_stream;

/* Computes the chain hashes of the full blocks of tokens[0..n_tokens). */
pdb_status pdb_store_stream_begin(pdb_store *store, const int32_t *tokens, int64_t n_tokens,
                                  pdb_store_stream **out);
int64_t pdb_store_stream_n_blocks(const pdb_store_stream *stream);
const uint8_t *pdb_store_stream_hash(const pdb_store_stream *stream, int64_t block_index); /* [32] */
/* Write block b from pool_data[p] (pdb_store_pool_bytes(p) bytes each). Blocks go in strictly
 * increasing order, and 0..b-1 must be present (put earlier in this stream or already in the
 * store), else PDB_INVALID. A valid existing file makes this a no-op success. After a failed
 * put the same b may be retried. */
pdb_status pdb_store_stream_put(pdb_store_stream *stream, int64_t block_index,
                                const void *const *pool_data /* [n_pools] */);
pdb_status pdb_store_stream_finish(pdb_store_stream *stream); /* frees the stream */
void pdb_store_stream_abort(pdb_store_stream *stream);        /* frees the stream */

/* ---- stats (for /metrics) --------------------------------------------------------------- */
typedef struct pdb_store_stats {
    uint64_t hits;            /* blocks found by longest_prefix */
    uint64_t misses;          /* longest_prefix calls that stopped before n_blocks */
    uint64_t loads;           /* successful load_block calls */
    uint64_t writes;          /* block files published by this handle */
    uint64_t write_noops;     /* puts that found a valid block already there */
    uint64_t corrupt_removed; /* bad files found and removed */
    uint64_t evictions;       /* blocks removed by the size cap */
    uint64_t n_blocks;        /* blocks in this handle's index */
    uint64_t bytes;           /* bytes of those block files */
    uint64_t max_bytes;       /* the cap (0 = unlimited) */
    uint64_t disk_free_bytes; /* free bytes of the store's filesystem for this user (statvfs), UINT64_MAX unknown */
} pdb_store_stats;
void pdb_store_get_stats(pdb_store *store, pdb_store_stats *out);

/* ---- I/O seam (fault injection): every open/write/fsync/close/rename of a block write
 * (temp file and directory fsync) goes through this table (store.json is written at open,
 * before a table can be set, with the default one). Each member follows its POSIX namesake (-1 + errno on failure). NULL restores
 * the default table. Set it before the handle is shared between threads. */
typedef struct pdb_store_io {
    int (*open)(const char *path, int flags, mode_t mode);
    ssize_t (*write)(int fd, const void *buf, size_t n);
    int (*fsync)(int fd);
    int (*close)(int fd);
    int (*rename)(const char *from, const char *to);
} pdb_store_io;
void pdb_store_set_io(pdb_store *store, const pdb_store_io *io);

#endif
