/* pdb_file: the atomic whole-file copy (64 KiB reads, DST.tmp, rename). */
#include "pdb_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

pdb_status pdb_file_copy(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb");
    if (!in) return pdb_err_set(PDB_NOT_FOUND, "cannot open %s: %s", src, strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return pdb_err_set(PDB_IO, "cannot create %s: %s", tmp, strerror(errno));
    }
    char buf[1 << 16];
    size_t r;
    int bad = 0;
    while ((r = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, r, out) != r) { bad = 1; break; }
    bad |= ferror(in);
    fclose(in);
    bad |= fclose(out) != 0;
    if (bad || rename(tmp, dst)) {
        remove(tmp);
        return pdb_err_set(PDB_IO, "writing %s failed", dst);
    }
    return PDB_OK;
}
