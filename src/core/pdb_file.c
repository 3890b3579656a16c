/* pdb_file: the atomic whole-file copy (64 KiB reads, DST.tmp, rename), mkdir -p, and whole-file
 * reads (a buffer doubling from 64 KiB, never past max + 1 bytes). */
#include "pdb_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

pdb_status pdb_file_read_stream(FILE *f, const char *name, size_t max, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (max >= SIZE_MAX / 2) return pdb_err_set(PDB_INVALID, "%s: read bound %zu too large", name, max);
    /* the buffer holds at most max + 1 bytes: one past the bound tells "too large" from "exactly max" */
    size_t cap = max < ((size_t)1 << 16) ? max + 1 : (size_t)1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return pdb_err_set(PDB_NOMEM, "%s: cannot allocate %zu bytes to read it", name, cap + 1);
    for (;;) {
        if (n == cap) {
            if (n > max) {
                free(buf);
                return pdb_err_set(PDB_TOO_LARGE, "%s: longer than %zu bytes", name, max);
            }
            size_t nc = cap > max / 2 ? max + 1 : 2 * cap;
            char *b = realloc(buf, nc + 1);
            if (!b) {
                free(buf);
                return pdb_err_set(PDB_NOMEM, "%s: cannot allocate %zu bytes to read it", name, nc + 1);
            }
            buf = b;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) {
            if (ferror(f)) {
                free(buf);
                return pdb_err_set(PDB_IO, "%s: read error", name);
            }
            break;
        }
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return PDB_OK;
}

pdb_status pdb_file_read_all(const char *path, size_t max, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return pdb_err_set(PDB_IO, "%s: cannot open: %s", path, strerror(errno));
    pdb_status s = pdb_file_read_stream(f, path, max, out, len);
    fclose(f);
    return s;
}
