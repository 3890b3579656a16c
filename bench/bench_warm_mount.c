/* bench_warm_mount: how fast the decoder mounts a cached prefix (issue 18 Must-show 5). A store
 * with V4-Flash's block layout at block size 2048 (8 f32 pools, 39,882,752 pool bytes, as
 * docs/limits.md section 0) gets N blocks of one chain; then, in the same run, each pass reads
 * the same N block files three ways and reports MB/s of file bytes:
 *   seq      a plain sequential read (open, read() in 4 MiB pieces into one buffer, close);
 *   mount1   pdb_store_load_block one block after another (identity, SHA-256 of every tensor
 *            byte, the bytes read into the block buffer);
 *   mountK   the decoder's path: pdb_store_load_blocks, K blocks at once on a pool of K threads
 *            (what pdb_dec_service's admit does with SVC_MOUNT_BATCH and its pool).
 * Page cache, consistently for all three: "cold" passes drop every block file from the page
 * cache first (fsync was done at write; posix_fadvise(POSIX_FADV_DONTNEED) on each file, no
 * root needed), so each read comes from the disk; "hot" passes read every file once first so
 * all three read from memory. Each of the 6 (mode, method) cells is the best of R passes,
 * interleaved (seq, mount1, mountK, seq, ...), with the CPU seconds the process spent in that
 * pass (user + system, all threads: less sensitive than wall time to other processes sharing the
 * cores). Output: one line per cell.
 * Usage: bench_warm_mount [dir (default /tmp)] [blocks (16)] [threads K (4)] [passes R (3)] */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_pool.h"
#include "pdb_store.h"

#define BS 2048
static const pdb_store_pool V4F[] = {
    {"win", PDB_STORE_POOL_STATE, 43, 0, 128, 512, PDB_DT_F32},
    {"comp_csa", PDB_STORE_POOL_APPEND, 21, 4, 0, 512, PDB_DT_F32},
    {"ikeys", PDB_STORE_POOL_APPEND, 21, 4, 0, 128, PDB_DT_F32},
    {"ov_kv", PDB_STORE_POOL_STATE, 21, 0, 4, 512, PDB_DT_F32},
    {"ov_gate", PDB_STORE_POOL_STATE, 21, 0, 4, 512, PDB_DT_F32},
    {"iov_kv", PDB_STORE_POOL_STATE, 21, 0, 4, 128, PDB_DT_F32},
    {"iov_gate", PDB_STORE_POOL_STATE, 21, 0, 4, 128, PDB_DT_F32},
    {"comp_hca", PDB_STORE_POOL_APPEND, 20, 128, 0, 512, PDB_DT_F32},
};
#define NP 8
static const pdb_store_layout LAYOUT = {NP, V4F};

static double cpu_s(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what) {
    fprintf(stderr, "bench_warm_mount: %s: %s\n", what, pdb_err_msg());
    exit(1);
}

static void block_path(const char *dir, const uint8_t *h, char *out) { /* dir is at most 4000 bytes (main) */
    char hex[65];
    pdb_store_hash_hex(h, hex);
    snprintf(out, 4096, "%s/%.2s/%s.pdbblk", dir, hex, hex);
}

static void drop_cache(const char *dir, uint8_t (*h)[32], int64_t n) {
    char p[4096];
    for (int64_t i = 0; i < n; i++) {
        block_path(dir, h[i], p);
        int fd = open(p, O_RDONLY);
        if (fd < 0) continue;
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

/* bytes read; a plain sequential read of every file in chain order */
static uint64_t read_seq(const char *dir, uint8_t (*h)[32], int64_t n, char *buf, size_t cap) {
    char p[4096];
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        block_path(dir, h[i], p);
        int fd = open(p, O_RDONLY);
        if (fd < 0) { perror(p); exit(1); }
        ssize_t r;
        while ((r = read(fd, buf, cap)) > 0) total += (uint64_t)r;
        close(fd);
    }
    return total;
}

int main(int argc, char **argv) {
    const char *parent = argc > 1 ? argv[1] : "/tmp";
    int64_t nb = argc > 2 ? atoll(argv[2]) : 16;
    int k = argc > 3 ? atoi(argv[3]) : 4, passes = argc > 4 ? atoi(argv[4]) : 3;
    if (nb < 1 || k < 1 || k > 64 || passes < 1) { fprintf(stderr, "usage: bench_warm_mount [dir] [blocks] [threads] [passes]\n"); return 2; }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/pdb-warm-mount-XXXXXX", parent);
    if (!mkdtemp(dir)) { perror(dir); return 1; }
    uint8_t fp[32];
    for (int i = 0; i < 32; i++) fp[i] = (uint8_t)(i * 7 + 1);
    pdb_store *s = NULL;
    if (pdb_store_open(dir, &LAYOUT, fp, BS, 0, &s)) die("open");
    uint64_t bb = pdb_store_block_bytes(s);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(nb * BS));
    for (int64_t i = 0; i < nb * BS; i++) tok[i] = (int32_t)((i * 2654435761u) % 129280);
    /* K block buffers (the pools of one block back to back, as the decoder's) */
    char *bufs = malloc(bb * (uint64_t)k);
    void *ptrs[64][NP];
    void *const *outs[64];
    for (int i = 0; i < k; i++) {
        uint64_t off = 0;
        for (int p = 0; p < NP; p++) {
            ptrs[i][p] = bufs + (uint64_t)i * bb + off;
            off += pdb_store_pool_bytes(&V4F[p], BS);
        }
        outs[i] = ptrs[i];
    }
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; i < bb * (uint64_t)k / 8; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ((uint64_t *)bufs)[i] = x;
    }
    pdb_store_stream *w = NULL;
    if (pdb_store_stream_begin(s, tok, nb * BS, &w)) die("stream");
    uint8_t(*h)[32] = malloc(32 * (size_t)nb);
    double t0 = pdb_clock_now();
    for (int64_t b = 0; b < nb; b++) {
        memcpy(h[b], pdb_store_stream_hash(w, b), 32);
        ((uint64_t *)bufs)[0] = (uint64_t)b; /* every block different */
        if (pdb_store_stream_put(w, b, (const void *const *)ptrs[0])) die("put");
    }
    pdb_store_stream_finish(w);
    double tw = pdb_clock_now() - t0;
    uint64_t file_bytes = 0;
    char p[4096];
    for (int64_t b = 0; b < nb; b++) {
        struct stat sb;
        block_path(dir, h[b], p);
        if (stat(p, &sb) == 0) file_bytes += (uint64_t)sb.st_size;
    }
    pdb_pool *pool = NULL;
    if (pdb_pool_create(k, &pool)) die("pool");
    size_t cap = 4u << 20;
    char *rbuf = malloc(cap);
    printf("bench_warm_mount: %lld blocks of %llu pool bytes (%llu file bytes in all, %.1f MB), block size %d, K = %d, best of %d;"
           " written in %.2f s (%.0f MB/s)\n",
           (long long)nb, (unsigned long long)bb, (unsigned long long)file_bytes, file_bytes / 1e6, BS, k, passes, tw,
           file_bytes / 1e6 / tw);
    const char *modes[2] = {"cold", "hot"}, *meth[3] = {"seq", "mount1", "mountK"};
    for (int m = 0; m < 2; m++) {
        double best[3] = {1e30, 1e30, 1e30}, cpu[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < passes; r++)
            for (int j = 0; j < 3; j++) {
                if (m == 0) drop_cache(dir, h, nb);
                else read_seq(dir, h, nb, rbuf, cap);
                double a = pdb_clock_now(), c0 = cpu_s();
                if (j == 0) {
                    if (read_seq(dir, h, nb, rbuf, cap) != file_bytes) { fprintf(stderr, "short read\n"); return 1; }
                } else if (j == 1) {
                    for (int64_t b = 0; b < nb; b++)
                        if (pdb_store_load_block(s, h[b], b, outs[0])) die("load_block");
                } else {
                    for (int64_t b = 0; b < nb; b += k) {
                        int64_t n = nb - b < k ? nb - b : k, ok = 0;
                        if (pdb_store_load_blocks(s, (const uint8_t(*)[32])h + b, b, n, outs, pool, &ok)) die("load_blocks");
                    }
                }
                double t = pdb_clock_now() - a, c = cpu_s() - c0;
                if (t < best[j]) best[j] = t;
                if (c < cpu[j]) cpu[j] = c;
            }
        for (int j = 0; j < 3; j++)
            printf("%-4s %-7s %8.1f MB/s  (%.3f s for %.1f MB; %.3f CPU s = %.2f CPU s/GB)%s\n", modes[m], meth[j],
                   file_bytes / 1e6 / best[j], best[j], file_bytes / 1e6, cpu[j], cpu[j] / (file_bytes / 1e9),
                   j ? "" : "  <- plain sequential read of the same files");
        printf("%-4s mount1/seq %.2f, mountK/seq %.2f\n", modes[m], best[0] / best[1], best[0] / best[2]);
    }
    pdb_pool_destroy(pool);
    pdb_store_close(s);
    for (int64_t b = 0; b < nb; b++) {
        block_path(dir, h[b], p);
        unlink(p);
        char *sl = strrchr(p, '/');
        *sl = 0;
        rmdir(p);
    }
    snprintf(p, sizeof p, "%s/store.json", dir);
    unlink(p);
    rmdir(dir);
    free(h);
    free(tok);
    free(bufs);
    free(rbuf);
    return 0;
}
