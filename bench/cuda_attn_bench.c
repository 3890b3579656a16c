/* cuda_attn_bench: the bf16 engine's MHA-form attention kernel alone (V2-Lite's head shapes by
 * default: 16 heads, q/k 128 + 64, v 128), per tile configuration, on seeded inputs, run as the
 * engine runs a prompt (passes of CHUNK query tokens). Prints one "cuda-attn ..." line per
 * (prompt length, configuration): the best of REPS whole-prompt times, the causal FLOP rate, and
 * how many output elements differ in their bits from the first configuration's (0 expected).
 * Invariant: every number printed was measured in this process.
 * Usage: cuda_attn_bench [T,T,... [CHUNK [W,W,... [REPS [HEADS]]]]] (W: warps per block, 4 or 8; 0 or wg64 the
 * warpgroup form with 64-key tiles, wg128 with 128-key tiles; a trailing p: the warpgroups ping-pong) (defaults 8192,32768,131072; 8192; 8,4; 3; 16). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda.h"
#include "pdb_cuda_attn_probe.h"

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: cuda_attn_bench [T,T,... [CHUNK [W,W,... [REPS [HEADS]]]]]  (W: warps per block, 4 or 8; 0 or wg64 the\n"
               "       warpgroup form with 64-key tiles, wg128 with 128-key tiles; a trailing p: the warpgroups ping-pong)\n");
        return 0;
    }
    int64_t Ts[8] = {8192, 32768, 131072}, nT = 3;
    if (argc > 1) {
        nT = 0;
        for (char *p = argv[1]; *p && nT < 8; p += strspn(p, ",")) Ts[nT++] = strtoll(p, &p, 10);
    }
    int64_t chunk = argc > 2 ? atoll(argv[2]) : 8192;
    pdb_cuda_attn_probe_row rows[8];
    int nr = 0;
    const char *cfgs = argc > 3 ? argv[3] : "8,4";
    for (const char *p = cfgs; *p && nr < 8;) {
        char *e;
        rows[nr].keys = 0;
        if (!strncmp(p, "wg", 2)) {
            rows[nr].warps = 0;
            rows[nr].keys = (int)strtol(p + 2, &e, 10);
            if (e == p + 2 || (rows[nr].keys != 64 && rows[nr].keys != 128)) e = (char *)p;
            else if (*e == 'p') rows[nr].keys |= PDB_CUDA_ATTN_PROBE_PINGPONG, e++;
        } else {
            rows[nr].warps = (int)strtol(p, &e, 10);
        }
        if (e == p) { fprintf(stderr, "cuda_attn_bench: bad configuration list '%s' (want W,W,...: 4, 8, 0, wg64, wg128, wg64p, wg128p)\n", cfgs); return 2; }
        nr++;
        p = e + strspn(e, ",");
    }
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    int64_t heads = argc > 5 ? atoll(argv[5]) : 16;
    char name[256];
    if (!pdb_cuda_device_count(name, sizeof name)) { printf("cuda-attn skipped: no GPU\n"); return 0; }
    printf("cuda-attn device=\"%s\" heads=%lld qk=128+64 v=128 chunk=%lld reps=%d\n", name, (long long)heads,
           (long long)chunk, reps);
    for (int64_t k = 0; k < nT; k++) {
        pdb_cuda_attn_probe_opts o = {.tokens = Ts[k], .chunk = chunk, .heads = heads, .nope = 128, .rope = 64,
                                      .dv = 128, .seed = 7, .reps = reps};
        if (pdb_cuda_attn_probe_run(&o, rows, nr)) {
            fprintf(stderr, "cuda_attn_bench: %lld tokens: %s\n", (long long)Ts[k], pdb_err_msg());
            return 1;
        }
        for (int r = 0; r < nr; r++)
            printf("cuda-attn tokens=%lld warps=%d keys=%d pingpong=%d ms=%.3f tflops=%.1f differing=%lld speedup_vs_first=%.3f\n",
                   (long long)Ts[k], rows[r].warps, rows[r].warps || !rows[r].keys ? 64 : rows[r].keys & ~PDB_CUDA_ATTN_PROBE_PINGPONG,
                   (rows[r].keys & PDB_CUDA_ATTN_PROBE_PINGPONG) != 0, rows[r].ms, rows[r].tflops,
                   (long long)rows[r].differing, rows[0].ms / rows[r].ms);
        fflush(stdout);
    }
    return 0;
}
