/* fuzz_safetensors: the safetensors reader (pdb_st_open) on arbitrary file contents. The input
 * is written to a private temp file and opened. Properties: no crash/leak/UB; when open
 * succeeds every tensor view lies inside the file and its nbytes = numel * dtype size. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "pdb_safetensors.h"

static char path[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/pdb-fuzz-st-%ld.safetensors", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) abort();
    for (size_t o = 0; o < size;) {
        ssize_t w = write(fd, data + o, size - o);
        if (w <= 0) abort();
        o += (size_t)w;
    }
    close(fd);
    pdb_st *st = NULL;
    if (pdb_st_open(path, &st) == PDB_OK) {
        int64_t n = pdb_st_count(st);
        for (int64_t i = 0; i < n; i++) {
            const pdb_tensor_view *t = pdb_st_at(st, i);
            FUZZ_CHECK(t && t->name, "tensor %lld has no view", (long long)i);
            FUZZ_CHECK(pdb_st_find(st, t->name) == t, "find(%s) is not the tensor", t->name);
            FUZZ_CHECK(t->nbytes == (uint64_t)t->numel * pdb_dtype_size(t->dtype) || pdb_dtype_size(t->dtype) == 0,
                       "tensor %s: nbytes %llu for %lld elements", t->name, (unsigned long long)t->nbytes, (long long)t->numel);
            /* touch the first and last byte: must be mapped */
            if (t->nbytes) {
                volatile uint8_t a = ((const uint8_t *)t->data)[0], b = ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)a; (void)b;
            }
        }
        (void)pdb_st_meta(st, "format");
        pdb_st_close(st);
    }
    unlink(path);
    return 0;
}
