/* pdb_block: the block file format of the prefix-cache store (internal to src/store).
 * One file per block, safetensors-compatible; the byte-by-byte format is documented next to
 * pdb_block_write in pdb_block.c and in docs/formats/block.md.
 * Invariants: pdb_block_write never leaves a temp file behind and never makes a partial file
 * visible (temp file in the same directory, fsync, rename, fsync dir); pdb_block_verify never
 * returns PDB_OK for a file whose identity, shapes or (when asked) checksum disagree with the
 * caller's expectation, and only ever returns PDB_CORRUPT for a problem with the file's
 * content (never for a transient I/O error, so callers may delete on PDB_CORRUPT). */
#ifndef PDB_BLOCK_H
#define PDB_BLOCK_H

#include <stdint.h>
#include <sys/types.h>

#include "pdb_store.h"

#define PDB_BLOCK_FORMAT "pdbridge-block"
#define PDB_BLOCK_VERSION "2" /* 2: pools may be packed rows (U8) an architecture defines (D36); 1 held f32 only */
#define PDB_BLOCK_EXT ".pdbblk"
#define PDB_BLOCK_TMP_PREFIX ".tmp-" /* temp files: .tmp-<pid>-<seq>-<what> */
#define PDB_BLOCK_MAX_BLOCK_SIZE (1LL << 24)  /* tokens per block */
#define PDB_BLOCK_MAX_TENSOR_BYTES (1ULL << 40)

/* What the caller expects a block file to be. */
typedef struct pdb_block_id {
    const uint8_t *hash;        /* [32] */
    const uint8_t *parent;      /* [32], or NULL when the caller does not know the parent */
    const uint8_t *fingerprint; /* [32] */
    int64_t block_index;
    int64_t block_size;
} pdb_block_id;

/* The root parent: SHA-256("pdbridge-root-v1"). */
const uint8_t *pdb_block_root_hash(void);

/* SHA-256(fingerprint || parent || tokens as LE u32) into out[32]. */
pdb_status pdb_block_hash_one(const uint8_t *fingerprint, const uint8_t *parent,
                              const int32_t *tokens, int64_t n_tokens, uint8_t out[32]);

/* Write the block file for id into dir_path/<hash hex>.pdbblk (dir_path must exist) from
 * tokens [block_size] and pool_data[p] [n_layers, rows, width] of layout. *published says
 * whether the final file became visible (it can be, complete, even when a later dir fsync
 * fails and an error is returned). *file_bytes: size of the file. A write that fails because
 * the disk is full (ENOSPC, EDQUOT) returns PDB_TOO_LARGE, any other I/O failure PDB_IO. */
pdb_status pdb_block_write(const pdb_store_io *io, const char *dir_path, const pdb_block_id *id,
                           const pdb_store_layout *layout, const int32_t *tokens,
                           const void *const *pool_data, int *published, uint64_t *file_bytes);

/* Verify the file at path against id and layout. full != 0 also checks the checksum; with
 * pool_out != NULL (requires full) the pools are read into pool_out while being hashed: read()
 * from the same open file in large pieces, each hashed while in cache, the file read ahead by the
 * kernel meanwhile (the copies are only meaningful when PDB_OK is returned).
 * Returns PDB_OK, PDB_NOT_FOUND (no file), PDB_CORRUPT (bad content; the message says why),
 * or another status for transient failures (PDB_IO, PDB_NOMEM).
 * *file_bytes, *dev, *ino (each may be NULL) describe the file that was examined. */
pdb_status pdb_block_verify(const char *path, const pdb_block_id *id,
                            const pdb_store_layout *layout, int full, void *const *pool_out,
                            uint64_t *file_bytes, dev_t *dev, ino_t *ino);

/* Unlink path only if it is still the inode (dev, ino) that was verified (a writer may have
 * renamed a fresh file over it meanwhile). Returns 1 if removed. */
int pdb_block_remove_if_same(const char *path, dev_t dev, ino_t ino);

/* Write a small file atomically through io: temp file in dir_path, fsync, then rename over
 * path (exclusive == 0) or link to path (exclusive != 0: when path already exists nothing is
 * written and *existed = 1), then fsync dir_path. The temp file never survives. */
pdb_status pdb_block_write_small(const pdb_store_io *io, const char *dir_path, const char *path,
                                 const void *data, size_t n, int exclusive, int *existed);

/* Hex helpers. pdb_block_parse_hex: exactly 64 lower-case hex chars -> 32 bytes; 0 on error. */
int pdb_block_parse_hex(const char *s, uint8_t out[32]);

/* The default POSIX I/O table. */
const pdb_store_io *pdb_block_default_io(void);

#endif
