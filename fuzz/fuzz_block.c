/* fuzz_block: block files of the prefix-cache store. A store with a small layout lives in a
 * private temp dir; each input is written as the file of block 0 of a fixed chain and mounted
 * with pdb_store_load_block (pdb_st_open + identity + checksum), then header-checked with
 * pdb_block_verify. Properties: no crash/UB/leak; load_block answers PDB_OK, PDB_CORRUPT or
 * PDB_NOT_FOUND only; PDB_OK hands out exactly the pool bytes the block was written with (a
 * changed tensor never verifies); PDB_CORRUPT removes the file (a bad block is never served
 * twice). PDB_FUZZ_WRITE_SEED=PATH writes one valid block file to PATH and exits (the seed). */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "pdb_block.h"
#include "pdb_store.h"

#define BS 128
#define LAYERS 2
#define WIDTH 8

static pdb_store *store;
static char dir[256], path[512];
static uint8_t fp[32], hash0[32];
static float pool_ref[LAYERS * BS * WIDTH], pool_out[LAYERS * BS * WIDTH];
static const pdb_store_pool pool = {.name = "latent", .kind = PDB_STORE_POOL_APPEND, .n_layers = LAYERS, .stride = 1,
                                    .width = WIDTH, .dtype = PDB_DT_F32};
static const pdb_store_layout layout = {.n_pools = 1, .pools = &pool};

static void rm_tree(const char *d) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_block: could not remove %s\n", d);
}

static void cleanup(void) {
    pdb_store_close(store);
    rm_tree(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/pdb-fuzz-block-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    rm_tree(dir);
    for (int i = 0; i < 32; i++) fp[i] = (uint8_t)(i * 7 + 1);
    int32_t tokens[BS];
    for (int i = 0; i < BS; i++) tokens[i] = i * 13 % 1000;
    for (int i = 0; i < LAYERS * BS * WIDTH; i++) pool_ref[i] = (float)i * 0.25f - 3.0f;
    if (pdb_store_open(dir, &layout, fp, BS, 0, &store) != PDB_OK) { fprintf(stderr, "open: %s\n", pdb_err_msg()); exit(2); }
    pdb_store_stream *w = NULL;
    const void *pd[1] = {pool_ref};
    if (pdb_store_stream_begin(store, tokens, BS, &w) != PDB_OK || pdb_store_stream_put(w, 0, pd) != PDB_OK) {
        fprintf(stderr, "write: %s\n", pdb_err_msg());
        exit(2);
    }
    memcpy(hash0, pdb_store_stream_hash(w, 0), 32);
    pdb_store_stream_finish(w);
    char hex[65];
    pdb_store_hash_hex(hash0, hex);
    snprintf(path, sizeof path, "%s/%.2s/%s" PDB_BLOCK_EXT, dir, hex, hex);
    const char *seed = getenv("PDB_FUZZ_WRITE_SEED");
    if (seed && *seed) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, seed);
        int rc = system(cmd);
        cleanup();
        exit(rc == 0 ? 0 : 2);
    }
    atexit(cleanup);
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char sub[512];
    snprintf(sub, sizeof sub, "%.*s", (int)(strrchr(path, '/') - path), path);
    mkdir(sub, 0755);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) abort();
    for (size_t o = 0; o < size;) {
        ssize_t w = write(fd, data + o, size - o);
        if (w <= 0) abort();
        o += (size_t)w;
    }
    close(fd);
    void *out[1] = {pool_out};
    memset(pool_out, 0xA5, sizeof pool_out);
    pdb_status st = pdb_store_load_block(store, hash0, 0, out);
    FUZZ_CHECK(st == PDB_OK || st == PDB_CORRUPT || st == PDB_NOT_FOUND, "load_block status %d: %s", (int)st, pdb_err_msg());
    if (st == PDB_OK) {
        FUZZ_CHECK(memcmp(pool_out, pool_ref, sizeof pool_ref) == 0, "a verified block holds other pool bytes");
    } else if (st == PDB_CORRUPT) {
        struct stat sb;
        FUZZ_CHECK(stat(path, &sb) != 0, "a corrupt block file was left in the store");
    }
    /* header-only verification (what longest_prefix runs) on the same bytes */
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) abort();
    for (size_t o = 0; o < size;) {
        ssize_t w = write(fd, data + o, size - o);
        if (w <= 0) abort();
        o += (size_t)w;
    }
    close(fd);
    pdb_block_id id = {hash0, pdb_block_root_hash(), fp, 0, BS};
    st = pdb_block_verify(path, &id, &layout, 0, NULL, NULL, NULL, NULL);
    FUZZ_CHECK(st == PDB_OK || st == PDB_CORRUPT, "verify status %d: %s", (int)st, pdb_err_msg());
    unlink(path);
    return 0;
}
