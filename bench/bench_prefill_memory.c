/* bench_prefill_memory: peak resident memory of a prefill process against the prompt length.
 * For each T a fresh child process loads the engine (CPU backend by default), runs the chunked
 * prefill with the capture hook over T tokens (segments handed to a callback that drops them,
 * as a consumer that keeps up would) and exits; the parent reads the child's peak RSS (wait4).
 * Reported beside it: the engine's own cache (T * layers * row * 4 bytes on the CPU backend)
 * and the capture buffers (one chunk + one segment), so "RSS - engine cache" shows what the
 * capture path holds. Usage: bench_prefill_memory HF_DIR DEC_DIR [--backend cpu|cuda]
 * [--block-size N] [--chunk N] T1 T2 ... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_dec_model.h"
#include "pdb_prefill_engine.h"

static pdb_status drop(void *u, int64_t b, const void *d, uint64_t n) {
    (void)d;
    *(uint64_t *)u += n;
    (void)b;
    return PDB_OK;
}

static int child(const char *hf, const char *dec, const char *backend, int64_t T, int64_t bs, int64_t chunk, int fd) {
    pdb_config cfg;
    pdb_st *e, *d;
    if (pdb_config_load(hf, &cfg) || pdb_st_open(hf, &e) || pdb_st_open(dec, &d)) return 1;
    int sem = 0;
    if (pdb_dec_model_semantics_of(dec, &cfg, &sem)) return 1;
    pdb_prefill_backend_opts o = {.cfg = &cfg, .engine = e, .decoder = d, .semantics = sem};
    pdb_prefill_backend *be = NULL;
    pdb_status s = pdb_prefill_backend_create(&o, backend, &be);
    if (s) { fprintf(stderr, "bench: %s\n", pdb_err_msg()); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t i = 0; i < T; i++) ids[i] = (int32_t)((i * 7919 + 13) % cfg.vocab_size);
    uint64_t got = 0;
    pdb_prefill_stats st;
    double t0 = pdb_clock_now();
    s = pdb_prefill_run(be, &cfg, ids, T, bs, 0, chunk, drop, &got, &st);
    double secs = pdb_clock_now() - t0;
    if (s) { fprintf(stderr, "bench: %s\n", pdb_err_msg()); return 1; }
    char line[256];
    int n = snprintf(line, sizeof line, "%lld %llu %.3f %llu\n", (long long)st.blocks_sent, (unsigned long long)st.capture_bytes_peak,
                     secs, (unsigned long long)got);
    if (write(fd, line, (size_t)n) != n) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_prefill_memory HF_DIR DEC_DIR [--backend cpu|cuda] [--block-size N] [--chunk N] T...\n");
        return 2;
    }
    const char *hf = argv[1], *dec = argv[2], *backend = "cpu";
    int64_t bs = 2048, chunk = 512;
    pdb_config cfg;
    if (pdb_config_load(hf, &cfg)) { fprintf(stderr, "bench: %s\n", pdb_err_msg()); return 1; }
    int64_t row = cfg.kv_lora_rank + cfg.qk_rope_head_dim;
    printf("| T | blocks | time s | peak RSS MB | engine cache MB | RSS - engine cache MB | capture buffers MB |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) { backend = argv[++i]; continue; }
        if (!strcmp(argv[i], "--block-size") && i + 1 < argc) { bs = atoll(argv[++i]); continue; }
        if (!strcmp(argv[i], "--chunk") && i + 1 < argc) { chunk = atoll(argv[++i]); continue; }
        int64_t T = atoll(argv[i]);
        int pfd[2];
        if (pipe(pfd)) return 1;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(pfd[0]);
            _exit(child(hf, dec, backend, T, bs, chunk, pfd[1]));
        }
        close(pfd[1]);
        char buf[256] = "";
        ssize_t r = read(pfd[0], buf, sizeof buf - 1);
        close(pfd[0]);
        int status;
        struct rusage ru;
        wait4(pid, &status, 0, &ru);
        if (r <= 0 || !WIFEXITED(status) || WEXITSTATUS(status)) { fprintf(stderr, "bench: T=%lld failed\n", (long long)T); return 1; }
        buf[r] = 0;
        long long blocks;
        unsigned long long cap, got;
        double secs;
        sscanf(buf, "%lld %llu %lf %llu", &blocks, &cap, &secs, &got);
        double rss = ru.ru_maxrss / 1024.0, eng = !strcmp(backend, "cpu") ? (double)(T / bs * bs) * cfg.num_layers * row * 4 / 1048576.0 : 0;
        printf("| %lld | %lld | %.1f | %.1f | %.1f | %.1f | %.2f |\n", (long long)T, blocks, secs, rss, eng, rss - eng, cap / 1048576.0);
        fflush(stdout);
    }
    return 0;
}
