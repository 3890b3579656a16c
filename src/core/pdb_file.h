/* pdb_file: whole-file copy published atomically (written to DST.tmp, then renamed), so a reader
 * never sees half a file, and directory creation with its parents (mkdir -p). Used where a
 * checkpoint directory is written or takes files from another one. */
#ifndef PDB_FILE_H
#define PDB_FILE_H

#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PDB_NOT_FOUND when src cannot be opened (the caller decides whether that is an error),
 * PDB_IO naming the file on any other failure; dst is then left untouched. */
pdb_status pdb_file_copy(const char *src, const char *dst);
/* Create dir and any missing parents (mode 0755); an existing directory is fine. PDB_IO naming
 * the component that could not be created. */
pdb_status pdb_file_mkdirs(const char *dir);

#ifdef __cplusplus
}
#endif

#endif
