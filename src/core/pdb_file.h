/* pdb_file: whole-file copy published atomically (written to DST.tmp, then renamed), so a reader
 * never sees half a file. Used where a checkpoint directory takes files from another one. */
#ifndef PDB_FILE_H
#define PDB_FILE_H

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PDB_NOT_FOUND when src cannot be opened (the caller decides whether that is an error),
 * PDB_IO naming the file on any other failure; dst is then left untouched. */
pdb_status pdb_file_copy(const char *src, const char *dst);

#ifdef __cplusplus
}
#endif

#endif
