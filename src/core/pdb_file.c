/* pdb_file: the atomic whole-file copy (64 KiB reads, DST.tmp, rename) and mkdir -p. */
#include "pdb_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

pdb_status pdb_file_mkdirs(const char *dir) {
    char p[4096];
    if (!dir || !*dir || strlen(dir) >= sizeof p) return pdb_err_set(PDB_INVALID, "directory name empty or too long");
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = 0;
        struct stat sb;
        if (mkdir(p, 0755) && errno != EEXIST)
            return pdb_err_set(PDB_IO, "cannot create directory %s: %s", p, strerror(errno));
        if (stat(p, &sb) || !S_ISDIR(sb.st_mode)) return pdb_err_set(PDB_IO, "%s exists and is not a directory", p);
        if (!keep) break;
        *c = keep;
    }
    return PDB_OK;
}

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
