/* pdb_segment: the prefill -> front stream format ("PDBF" frames) and its incremental parser.
 * A stream is HEADER, then SEGMENT frames in increasing block order, then END. Byte by byte
 * (all integers little-endian):
 *   frame   := magic u32 = 0x46424450 ("PDBF") | type u32 | payload_len u64 | payload
 *   HEADER  (type 1): payload = UTF-8 JSON object, <= 64 KiB:
 *             {"version":1, "fingerprint":"<64 hex>", "block_size":N, "first_block":k,
 *              "n_blocks":B (full blocks of the prompt), "block_bytes":S}
 *   SEGMENT (type 2): payload = block_index i64 | sha256 [32] of data | data [S bytes]:
 *             the block's pool tensors in the store layout's order, each [n_layers, rows,
 *             width] in the pool's dtype, exactly the bytes pdb_store_stream_put takes.
 *   END     (type 3): payload = status i32 (0 = every requested block was sent; else a pdb_status) |
 *             message_len u32 | message bytes (<= 4 KiB; on success the JSON object
 *             {"engine_s": seconds in the backend, "tokens": run, "blocks": sent})
 * Invariants: the parser holds at most one frame (one segment) in memory; a frame whose
 * checksum, size or order is wrong stops the parse with PDB_CORRUPT / PDB_PROTOCOL and no
 * callback for that frame. Documented also in docs/protocol.md. */
#ifndef PDB_SEGMENT_H
#define PDB_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

#define PDB_SEG_MAGIC 0x46424450u
#define PDB_SEG_HEADER 1u
#define PDB_SEG_SEGMENT 2u
#define PDB_SEG_END 3u
#define PDB_SEG_MAX_HEADER_JSON (64u << 10)
#define PDB_SEG_MAX_MESSAGE (4u << 10)

/* Encode the 16-byte frame prefix into out. */
void pdb_segment_frame_prefix(uint32_t type, uint64_t payload_len, uint8_t out[16]);
/* Encode a SEGMENT frame's payload head (block_index + sha256 of data) into out[40]. */
void pdb_segment_payload_head(int64_t block_index, const void *data, uint64_t len, uint8_t out[40]);

typedef struct pdb_segment_header {
    int version;
    char fingerprint[65];
    int64_t block_size, first_block, n_blocks;
    uint64_t block_bytes;
} pdb_segment_header;

typedef struct pdb_segment_parser_cbs {
    pdb_status (*on_header)(void *user, const pdb_segment_header *h);
    /* data: block_bytes verified bytes of block b; valid during the call only. */
    pdb_status (*on_segment)(void *user, int64_t block, const void *data, uint64_t len);
    void (*on_end)(void *user, int32_t status, const char *message);
    void *user;
} pdb_segment_parser_cbs;

typedef struct pdb_segment_parser pdb_segment_parser;
/* max_block_bytes: refuse headers announcing bigger segments (PDB_TOO_LARGE). */
pdb_status pdb_segment_parser_init(pdb_segment_parser **out, const pdb_segment_parser_cbs *cbs, uint64_t max_block_bytes);
void pdb_segment_parser_free(pdb_segment_parser *p);
/* Feed bytes as they arrive; a callback's error stops the parser and is returned. */
pdb_status pdb_segment_parser_feed(pdb_segment_parser *p, const void *data, size_t len);
/* True once END was parsed. */
int pdb_segment_parser_done(const pdb_segment_parser *p);

#endif
