/* pdb_cli_pool_validate: `pdbridge pool-validate`, the capture hook's exactness on a backend, for
 * any architecture (the backend's one capture form: blocks in the decoder's store layout). Two
 * checks: `hook` feeds seeded attention inputs to the hook alone (backend->hook_chunk) and
 * compares every block with the CPU backend's from the same inputs (the decoder's own pool math:
 * THE definition of its cache); `prefill` runs seeded tokens through the whole backend and
 * compares every block with the decoder's native blocks. Each runs whole, chunked and in odd
 * chunks; every pool of every block is compared element by element.
 * Invariants: exit 0 only when every mode of every check run meets the backend's bar (CPU: every
 * element identical; CUDA: >= 99.95% identical and the worst <= 1 bf16 ulp); 1 when a bar is
 * missed; 2 usage; 3 could not run (no GPU, unreadable model) — never 0 for nothing compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_block_compare.h"
#include "pdb_cli.h"
#include "pdb_dec_model.h"
#include "pdb_prefill_backend.h"
#include "pdb_prefill_engine.h"

enum { EXIT_PASS = 0, EXIT_DIFF = 1, EXIT_USAGE = 2, EXIT_CANNOT = 3 };

/* Seeded attention inputs: approximately N(0, 1) per element (sum of 4 uniforms, rescaled),
 * the scale of an RMS-normed hidden state. */
static void fill_inputs(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    for (int64_t i = 0; i < n; i++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            acc += (double)(s >> 11) / 9007199254740992.0;
        }
        x[i] = (float)((acc - 2.0) * 1.7320508075688772);
    }
}

/* A chunking: sizes cycled (NULL: the whole sequence at once), clipped at block ends. */
typedef struct { const char *name; const int64_t *chunks; int n_chunks; } pv_mode;
static const int64_t C64[] = {64}, C7[] = {7}, CODD[] = {1, 3, 7, 13, 31, 129};

typedef struct pv_run {
    const pdb_store_layout *lay;
    const pdb_config *cfg;   /* with sem: the layout's values (pdb_arch_pool_values) */
    int sem;
    int64_t bs, nb, L, H;
    uint64_t bytes;          /* one block */
    int cuda;
    const float *xn;         /* hook check: [L, T, H] */
    float *xc;               /* hook check: one chunk's inputs [L, chunk, H] */
} pv_run;

/* The hook alone over all nb blocks in md's chunks: blocks into out [nb * bytes]. */
static pdb_status hook_blocks(const pv_run *r, pdb_prefill_backend *be, const pv_mode *md, char *out) {
    int64_t T = r->nb * r->bs;
    PDB_TRY(be->begin(be, T, r->bs));
    pdb_status s = PDB_OK;
    for (int64_t pos = 0, k = 0; !s && pos < T; k++) {
        int64_t b = pos / r->bs, n = md->chunks ? md->chunks[k % md->n_chunks] : T;
        if (pos + n > (b + 1) * r->bs) n = (b + 1) * r->bs - pos;
        for (int64_t l = 0; l < r->L; l++)
            memcpy(r->xc + l * n * r->H, r->xn + (l * T + pos) * r->H, sizeof(float) * (size_t)(n * r->H));
        s = be->hook_chunk(be, r->xc, pos, n);
        pos += n;
        if (!s && pos % r->bs == 0) s = be->get_block(be, b, out + (uint64_t)b * r->bytes);
    }
    be->end(be);
    return s;
}

typedef struct { char *blocks; } pv_sink;

static pdb_status on_segment(void *u, int64_t b, const void *data, uint64_t bytes) {
    memcpy(((pv_sink *)u)->blocks + (uint64_t)b * bytes, data, bytes);
    return PDB_OK;
}

/* Compare got with ref pool by pool over every block, as the values the decoder computes with (a
 * compact pool decoded by its architecture: pdb_arch_pool_values); prints one line per pool and the
 * mode's overall line; returns whether the mode meets the bar (CPU: identical; CUDA: >= 99.95% and
 * <= 1 bf16 ulp), 0 also when a pool cannot be read as values. */
static int compare_mode(const pv_run *r, const char *check, const char *mode, const char *ref, const char *got) {
    pdb_block_cmp_stats all = {0};
    for (int p = 0; p < r->lay->n_pools; p++) {
        const pdb_store_pool *pl = &r->lay->pools[p];
        pdb_block_cmp_stats st = {0};
        for (int64_t b = 0; b < r->nb; b++) { /* accumulates into st */
            const void *rp[PDB_STORE_MAX_POOLS], *gp[PDB_STORE_MAX_POOLS];
            pdb_arch_block_pools(r->lay, r->bs, ref + (uint64_t)b * r->bytes, rp);
            pdb_arch_block_pools(r->lay, r->bs, got + (uint64_t)b * r->bytes, gp);
            float *va = NULL, *vb = NULL;
            int64_t na = 0, nb = 0;
            pdb_status s = pdb_arch_pool_values(r->cfg, r->sem, pl, r->bs, rp[p], &va, &na);
            if (!s) s = pdb_arch_pool_values(r->cfg, r->sem, pl, r->bs, gp[p], &vb, &nb);
            if (!s) s = pdb_block_compare_values(PDB_DT_F32, va, vb, na, &st);
            free(va);
            free(vb);
            if (s) {
                pdb_cli_print_error("pool-validate", NULL);
                return 0;
            }
        }
        pdb_block_compare_merge_stats(&all, &st);
        printf("%-11s pool %-10s %lld/%lld identical (%.4f%%), worst %.4g bf16 ulps\n", mode, pl->name,
               (long long)(st.n - st.n_diff), (long long)st.n, 100.0 * (double)(st.n - st.n_diff) / (double)st.n,
               st.worst_bf16_ulps);
    }
    double frac = (double)(all.n - all.n_diff) / (double)all.n;
    int ok = frac >= (r->cuda ? 0.9995 : 1.0) && all.worst_bf16_ulps <= (r->cuda ? 1.0 : 0.0);
    printf("overall %-7s %-11s all pools: %lld/%lld identical (%.6f%%), worst %.6g bf16 ulps (%.6g f32 ulps), worst |d| %.6g: %s\n",
           check, mode, (long long)(all.n - all.n_diff), (long long)all.n, 100.0 * frac, all.worst_bf16_ulps, all.worst_ulps,
           all.worst_abs, ok ? "pass" : "FAIL");
    return ok;
}

/* Check `hook`: seeded inputs through the hook alone, the backend against the CPU's (whole). */
static pdb_status check_hook(pv_run *r, pdb_prefill_backend *be, pdb_prefill_backend *ref, uint64_t seed, int *pass) {
    int64_t T = r->nb * r->bs;
    float *xn = malloc(sizeof(float) * (size_t)(r->L * T * r->H));
    char *want = malloc(r->bytes * (size_t)r->nb), *got = malloc(r->bytes * (size_t)r->nb);
    r->xc = malloc(sizeof(float) * (size_t)(r->L * r->bs * r->H));
    pdb_status s = PDB_OK;
    if (!xn || !want || !got || !r->xc) s = pdb_err_set(PDB_NOMEM, "pool-validate: out of memory for %lld hook inputs", (long long)T);
    if (!s && (!be->hook_chunk || !ref->hook_chunk))
        s = pdb_err_set(PDB_UNSUPPORTED, "pool-validate: backend %s has no hook_chunk", be->hook_chunk ? ref->name : be->name);
    if (!s) {
        fill_inputs(xn, r->L * T * r->H, seed);
        r->xn = xn;
        const pv_mode whole = {"whole", NULL, 0}, modes[3] = {{"whole", NULL, 0}, {"chunked", C64, 1}, {"odd-chunked", CODD, 6}};
        s = hook_blocks(r, ref, &whole, want);
        for (int md = 0; md < 3 && !s; md++) {
            memset(got, 0x5a, r->bytes * (size_t)r->nb);
            if (!(s = hook_blocks(r, be, &modes[md], got))) *pass &= compare_mode(r, "hook", modes[md].name, want, got);
        }
    }
    free(xn);
    free(want);
    free(got);
    free(r->xc);
    r->xc = NULL;
    r->xn = NULL;
    return s;
}

/* Check `prefill`: seeded tokens through the whole backend against the decoder's native blocks. */
static pdb_status check_prefill(pv_run *r, pdb_prefill_backend *be, pdb_dec_model *m, const pdb_config *cfg, uint64_t seed,
                                int *pass) {
    int64_t T = r->nb * r->bs;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    char *want = malloc(r->bytes * (size_t)r->nb);
    pv_sink got = {malloc(r->bytes * (size_t)r->nb)};
    pdb_status s = PDB_OK;
    if (!ids || !want || !got.blocks) s = pdb_err_set(PDB_NOMEM, "pool-validate: out of memory for %lld tokens", (long long)T);
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int64_t i = 0; !s && i < T; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)cfg->vocab_size);
    }
    if (!s) s = pdb_dec_model_native_blocks(m, ids, r->nb, r->bs, want);
    const int64_t whole[1] = {T};
    const pv_mode modes[3] = {{"whole", whole, 1}, {"chunked", C64, 1}, {"odd-chunked", C7, 1}};
    for (int md = 0; md < 3 && !s; md++) {
        memset(got.blocks, 0x5a, r->bytes * (size_t)r->nb);
        s = pdb_prefill_run(be, cfg, ids, T, r->bs, 0, modes[md].chunks[0], on_segment, &got, NULL);
        if (!s) *pass &= compare_mode(r, "prefill", modes[md].name, want, got.blocks);
    }
    free(ids);
    free(want);
    free(got.blocks);
    return s;
}

int pdb_cli_pool_validate(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge pool-validate --decoder-model DEC_DIR [--backend cpu|cuda] [--check hook|prefill|both]\n"
        "                              [--tokens N] [--seed S] [--model HF_DIR] [--threads N] [--device D]\n"
        "                              [--block-size N] [--precision bf16|f32|exact]\n\n"
        "The capture hook's exactness on a backend, for every architecture, pool by pool of the decoder's\n"
        "store layout (blocks of --block-size, default 128):\n"
        "  hook (default): N seeded random attention inputs (every layer, positions 0..N-1, N rounded up\n"
        "    to whole blocks; default 300) through the hook alone on the backend, against the CPU\n"
        "    backend's hook on the same inputs run whole (the decoder's own pool math); whole, chunked\n"
        "    (64) and in odd-length chunks (1, 3, 7, 13, 31, 129 cycled).\n"
        "  prefill: N seeded tokens (whole blocks: N >= --block-size) through the whole backend on the\n"
        "    engine weights --model (default DEC_DIR), against the decoder's own native blocks; whole,\n"
        "    in chunks of 64 and of 7. It compares the engine's math too, so it needs an engine that runs\n"
        "    the decoder's math (the CPU, or CUDA with --precision exact;\n"
        "    otherwise exit 2) and passes only when the engine runs the decoder's weights.\n"
        "  both: hook, then prefill.\n"
        "--precision: the CUDA engine's precision (default bf16; the hook is exact in every one).\n"
        "Reports per pool and per mode the identical fraction and the worst difference in bf16 ulps.\n\n"
        "exit: 0 pass (cpu: every element identical in every mode; cuda: >= 99.95% identical and\n"
        "worst <= 1 bf16 ulp in every mode); 1 threshold missed; 2 usage error; 3 cannot run (no\n"
        "GPU or no CUDA build for --backend cuda, unreadable model).\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return EXIT_PASS; }
    const char *dec = NULL, *engine = NULL, *backend = "cpu", *check = "hook", *precision = "bf16";
    long long n = 300, seed = 1, threads = 0, device = 0, block = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "pdbridge pool-validate: option '%s' needs a value or is unknown\n\n%s", a, usage); return EXIT_USAGE; }
        i++;
        int ok = 1;
        if (!strcmp(a, "--decoder-model")) dec = v;
        else if (!strcmp(a, "--model")) engine = v;
        else if (!strcmp(a, "--backend")) { backend = v; ok = !strcmp(v, "cpu") || !strcmp(v, "cuda"); }
        else if (!strcmp(a, "--precision")) { precision = v; ok = !strcmp(v, "bf16") || !strcmp(v, "f32") || !strcmp(v, "exact"); }
        else if (!strcmp(a, "--check")) { check = v; ok = !strcmp(v, "hook") || !strcmp(v, "prefill") || !strcmp(v, "both"); }
        else if (!strcmp(a, "--tokens")) ok = pdb_cli_parse_int(v, 1, 1 << 20, &n);
        else if (!strcmp(a, "--seed")) ok = pdb_cli_parse_int(v, 0, (1LL << 62), &seed);
        else if (!strcmp(a, "--threads")) ok = pdb_cli_parse_int(v, 0, 4096, &threads);
        else if (!strcmp(a, "--device")) ok = pdb_cli_parse_int(v, 0, 1024, &device);
        else if (!strcmp(a, "--block-size")) ok = pdb_cli_parse_int(v, 128, 1 << 20, &block) && block % 128 == 0;
        else { fprintf(stderr, "pdbridge pool-validate: unknown option '%s'\n\n%s", a, usage); return EXIT_USAGE; }
        if (!ok) { fprintf(stderr, "pdbridge pool-validate: bad value '%s' for %s\n", v, a); return EXIT_USAGE; }
    }
    if (!dec) { fprintf(stderr, "pdbridge pool-validate: --decoder-model is required\n\n%s", usage); return EXIT_USAGE; }
    if (!engine) engine = dec;
    int do_hook = strcmp(check, "prefill") != 0, do_prefill = strcmp(check, "hook") != 0;
    if (do_prefill && n < block) {
        fprintf(stderr, "pdbridge pool-validate: --tokens %lld is less than one block of %lld (--check prefill)\n", n, block);
        return EXIT_USAGE;
    }

    int rc = EXIT_CANNOT, pass = 1;
    pdb_config cfg;
    pdb_arch_layout lay;
    pdb_pool *pool = NULL;
    pdb_dec_model *m = NULL;
    pdb_st *est = NULL, *dst = NULL;
    pdb_prefill_backend *be = NULL, *ref = NULL;
    int sem = 0;
    if (pdb_config_load(dec, &cfg) || pdb_dec_model_semantics_of(dec, &cfg, &sem) || pdb_arch_layout_of(&cfg, sem, &lay) ||
        pdb_arch_check_block_size(&cfg, block) || pdb_st_open(engine, &est) || pdb_st_open(dec, &dst))
        goto fail;
    pdb_prefill_backend_opts bo = {.cfg = &cfg, .engine = est, .decoder = dst, .semantics = sem,
                                   .precision = !strcmp(precision, "exact") ? PDB_CUDA_PREC_EXACT
                                                : !strcmp(precision, "f32") ? PDB_CUDA_PREC_F32 : PDB_CUDA_PREC_BF16,
                                   .exec = {.threads = (int)threads, .device = (int)device}};
    pdb_status bs = pdb_prefill_backend_create(&bo, backend, &be);
    if (bs) {
        fprintf(stderr, "pdbridge pool-validate: --backend %s unavailable: %s (%s)\n", backend, pdb_cli_error_text("pool-validate"),
                pdb_status_str(bs));
        goto out;
    }
    if (do_prefill && !be->exact) {
        fprintf(stderr, "pdbridge pool-validate: --check %s: backend %s does not run the decoder's math (precision %s), so its "
                "whole prefill cannot equal the decoder's blocks; use --check hook, or --precision exact\n", check, be->name,
                precision);
        rc = EXIT_USAGE;
        goto out;
    }
    pv_run r = {.lay = &lay.layout, .cfg = &cfg, .sem = sem, .bs = block, .L = cfg.num_layers, .H = cfg.hidden_size, .cuda = !strcmp(backend, "cuda"),
                .bytes = pdb_store_layout_block_bytes(&lay.layout, block)};
    printf("pool-validate: backend %s, decoder %s (%s, %d pools), blocks of %lld, seed %lld, check %s\n", be->name, dec,
           cfg.model_type, lay.layout.n_pools, block, seed, check);
    if (do_hook) {
        r.nb = (n + block - 1) / block;
        printf("hook: %lld seeded attention inputs per layer (%lld blocks) against the CPU's hook\n", (long long)(r.nb * block),
               (long long)r.nb);
        if (pdb_prefill_backend_create(&bo, "cpu", &ref) || check_hook(&r, be, ref, (uint64_t)seed, &pass)) goto fail;
    }
    if (do_prefill) {
        r.nb = n / block;
        printf("prefill: %lld seeded tokens (%lld blocks) against the decoder's native blocks\n", (long long)(r.nb * block),
               (long long)r.nb);
        if (pdb_pool_create((int)threads, &pool) || pdb_dec_model_open(dec, pool, &m) ||
            check_prefill(&r, be, m, &cfg, (uint64_t)seed, &pass))
            goto fail;
    }
    printf("%s (threshold %s: %s)\n", pass ? "PASS" : "FAIL", be->name,
           r.cuda ? ">= 99.95% identical and worst <= 1 bf16 ulp" : "every element identical");
    rc = pass ? EXIT_PASS : EXIT_DIFF;
    goto out;
fail:
    pdb_cli_print_error("pool-validate", NULL);
out:
    if (be) be->destroy(be);
    if (ref) ref->destroy(ref);
    if (m) pdb_dec_model_close(m);
    pdb_pool_destroy(pool);
    pdb_st_close(est);
    pdb_st_close(dst);
    return rc;
}
