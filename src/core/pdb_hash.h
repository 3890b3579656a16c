/* pdb_hash: SHA-256 of a file's bytes as lowercase hex (identity checks between processes,
 * e.g. "do the decoder and the front use the same tokenizer.json"). */
#ifndef PDB_HASH_H
#define PDB_HASH_H

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out: 65 bytes. PDB_IO names the file when it cannot be read. */
pdb_status pdb_hash_file_sha256(const char *path, char out[65]);

#ifdef __cplusplus
}
#endif

#endif
