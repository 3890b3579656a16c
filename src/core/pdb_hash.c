/* pdb_hash: streaming SHA-256 over a file (64 KiB reads). */
#include "pdb_hash.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

pdb_status pdb_hash_file_sha256(const char *path, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return pdb_err_set(PDB_IO, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c) { fclose(f); return pdb_err_set(PDB_NOMEM, "sha256"); }
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    unsigned char buf[1 << 16], md[32];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(c, buf, n);
    int bad = ferror(f);
    fclose(f);
    EVP_DigestFinal_ex(c, md, NULL);
    EVP_MD_CTX_free(c);
    if (bad) return pdb_err_set(PDB_IO, "%s: read error", path);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    return PDB_OK;
}
