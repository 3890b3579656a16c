/* pdb_file: whole-file copy published atomically (written to DST.tmp, then renamed), so a reader
 * never sees half a file, directory creation with its parents (mkdir -p), and reading a whole
 * file or stream into memory with a bound on its size. Used where a checkpoint directory is
 * written or takes files from another one, and where a command reads a prompt or config. */
#ifndef PDB_FILE_H
#define PDB_FILE_H

#include <stdio.h>

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
/* Read f to its end into a malloc'd buffer (*out, NUL-terminated; *len excludes the NUL; free it).
 * name is what errors call the source ("stdin", a path). PDB_TOO_LARGE when f holds more than max
 * bytes, PDB_NOMEM, PDB_IO on a read error; *out is then NULL. f is not closed. */
pdb_status pdb_file_read_stream(FILE *f, const char *name, size_t max, char **out, size_t *len);
/* pdb_file_read_stream of the file at path; PDB_IO naming it when it cannot be opened. */
pdb_status pdb_file_read_all(const char *path, size_t max, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
