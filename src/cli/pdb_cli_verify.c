/* pdb_cli_verify: the exactness tools an operator runs to prove a bridge is exact:
 * `verify-blocks` (two block files or two cache directories, tensor by tensor), `diff-state`
 * (the decoder's own cache after a native prefill versus the blocks mounted from a store);
 * `pool-validate` is pdb_cli_pool_validate.c.
 * Invariants: a tool exits 0 only when its stated condition holds (verify-blocks: every block
 * identical; diff-state: >= 1 block found and every found block bit-identical); 1 when it ran and the condition fails; 2 on a
 * usage error; 3 when it could not run (unreadable model, backend unavailable) — never 0 for
 * "nothing was compared". Every error names the file or option at fault. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdb_arch.h"
#include "pdb_block_compare.h"
#include "pdb_cli.h"
#include "pdb_dec_model.h"
#include "pdb_file.h"
#include "pdb_prompt.h"
#include "pdb_store.h"
#include "pdb_tokenizer.h"

enum { EXIT_PASS = 0, EXIT_DIFF = 1, EXIT_USAGE = 2, EXIT_CANNOT = 3 };

#define BLOCK_EXT ".pdbblk"
#define VERIFY_MAX_BLOCKS (1 << 24) /* block files one directory scan accepts */

/* ======================================= verify-blocks ====================================== */

typedef struct { char **v; size_t n, cap; } name_list;

static void names_free(name_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
}

static int is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every <dir>/<2 hex>/<64 hex>.pdbblk, as "<2 hex>/<64 hex>.pdbblk", sorted. */
static pdb_status scan_blocks(const char *dir, name_list *out) {
    memset(out, 0, sizeof *out);
    DIR *d = opendir(dir);
    if (!d) return pdb_err_set(errno == ENOENT ? PDB_NOT_FOUND : PDB_IO, "%s: %s", dir, strerror(errno));
    pdb_status s = PDB_OK;
    struct dirent *e;
    while (!s && (e = readdir(d))) {
        if (strlen(e->d_name) != 2 || !is_hex(e->d_name, 2)) continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        DIR *d2 = opendir(sub);
        if (!d2) continue; /* a file named like a shard directory: not a block */
        struct dirent *f;
        while (!s && (f = readdir(d2))) {
            size_t n = strlen(f->d_name);
            if (n != 64 + strlen(BLOCK_EXT) || strcmp(f->d_name + 64, BLOCK_EXT) || !is_hex(f->d_name, 64)) continue;
            if (out->n == out->cap) {
                size_t cap = out->cap ? 2 * out->cap : 64;
                char **v = cap <= VERIFY_MAX_BLOCKS ? realloc(out->v, cap * sizeof *v) : NULL;
                if (!v) { s = pdb_err_set(PDB_TOO_LARGE, "%s: more than %d block files", dir, VERIFY_MAX_BLOCKS); break; }
                out->v = v;
                out->cap = cap;
            }
            char *name = malloc(3 + n + 1);
            if (!name) { s = pdb_err_set(PDB_NOMEM, "%s: scan", dir); break; }
            snprintf(name, 3 + n + 1, "%s/%s", e->d_name, f->d_name);
            out->v[out->n++] = name;
        }
        closedir(d2);
    }
    closedir(d);
    if (s) { names_free(out); return s; }
    qsort(out->v, out->n, sizeof *out->v, cmp_names);
    return PDB_OK;
}

static void print_stats_detail(const pdb_block_cmp_tensor *t) {
    const pdb_block_cmp_stats *st = &t->stats;
    printf("    %s: %s", t->name, pdb_block_compare_kind_str(t->kind));
    if (t->kind == PDB_BLOCK_CMP_VALUES) {
        printf(", %lld/%lld elements differ (%.6f%% identical), worst %.6g ulps (%s)", (long long)st->n_diff, (long long)st->n,
               100.0 * (double)(st->n - st->n_diff) / (double)(st->n ? st->n : 1), st->worst_ulps, pdb_dtype_name(t->dtype_a));
        if (t->dtype_a == PDB_DT_F32)
            printf(" = %.6g bf16 ulps, %.6f%% within 1 bf16 ulp", st->worst_bf16_ulps,
                   100.0 * (double)(st->n - st->n_beyond_bf16) / (double)(st->n ? st->n : 1));
        printf(", worst |d| %.6g, worst rel %.6g", st->worst_abs, st->worst_rel);
    } else if (t->kind == PDB_BLOCK_CMP_DTYPE) {
        printf(" (%s vs %s)", pdb_dtype_name(t->dtype_a), pdb_dtype_name(t->dtype_b));
    }
    printf("\n");
}

/* Compare one pair of files and print its line(s). Returns 1 when identical. */
static int verify_pair(const char *label, const char *pa, const char *pb, int strict, pdb_block_cmp_stats *total) {
    pdb_block_cmp_report r;
    pdb_status s = pdb_block_compare_files(pa, pb, strict, &r);
    if (s) {
        printf("%s  UNREADABLE: %s\n", label, pdb_err_msg());
        return 0;
    }
    pdb_block_compare_merge_stats(total, &r.total);
    if (r.identical) {
        printf("%s  identical (%d tensors, %lld elements)\n", label, r.n_tensors, (long long)r.total.n);
    } else {
        printf("%s  DIFFERS\n", label);
        for (int i = 0; i < r.n_tensors; i++)
            if (r.tensors[i].kind != PDB_BLOCK_CMP_SAME) print_stats_detail(&r.tensors[i]);
        if (r.n_meta_diff)
            printf("    metadata: %d key(s) differ, first '%s'\n", r.n_meta_diff, r.first_meta_diff);
    }
    int same = r.identical;
    pdb_block_compare_free_report(&r);
    return same;
}

int pdb_cli_verify_blocks(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge verify-blocks A B [--strict-meta]\n\n"
        "A and B are two block files (.pdbblk) or two prefix-cache directories. Directories are\n"
        "matched by block file name (<2 hex>/<chain hash>.pdbblk). Every tensor is compared: dtype,\n"
        "shape and values; identical means byte-identical. For a difference it prints the count of\n"
        "differing elements and the worst distance in ulps of the tensor's dtype (for F32 also in\n"
        "bf16 ulps), the worst absolute and relative difference. Metadata (created_at, ...) is\n"
        "ignored unless --strict-meta. One line per block, then `N/M identical`; a block present on\n"
        "one side only counts as not identical.\n\n"
        "exit: 0 all M >= 1 blocks identical; 1 a difference, a one-sided or unreadable block, or no\n"
        "blocks at all; 2 usage error (also: missing path, a file compared with a directory).\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return EXIT_PASS; }
    const char *path[2] = {NULL, NULL};
    int strict = 0, np = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--strict-meta")) strict = 1;
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "pdbridge verify-blocks: unknown option '%s'\n\n%s", argv[i], usage);
            return EXIT_USAGE;
        } else if (np < 2) path[np++] = argv[i];
        else { fprintf(stderr, "pdbridge verify-blocks: more than two paths ('%s')\n\n%s", argv[i], usage); return EXIT_USAGE; }
    }
    if (np != 2) { fprintf(stderr, "pdbridge verify-blocks: need two paths A and B\n\n%s", usage); return EXIT_USAGE; }
    struct stat sa, sb;
    for (int k = 0; k < 2; k++)
        if (stat(path[k], k ? &sb : &sa)) {
            fprintf(stderr, "pdbridge verify-blocks: %s: %s\n", path[k], strerror(errno));
            return EXIT_USAGE;
        }
    if (S_ISDIR(sa.st_mode) != S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "pdbridge verify-blocks: %s is a %s but %s is a %s: compare two files or two directories\n", path[0],
                S_ISDIR(sa.st_mode) ? "directory" : "file", path[1], S_ISDIR(sb.st_mode) ? "directory" : "file");
        return EXIT_USAGE;
    }
    pdb_block_cmp_stats total = {0};
    long long n_same = 0, n_all = 0, only_a = 0, only_b = 0;
    if (!S_ISDIR(sa.st_mode)) {
        n_all = 1;
        n_same = verify_pair(path[0], path[0], path[1], strict, &total);
    } else {
        name_list la, lb;
        if (scan_blocks(path[0], &la)) { pdb_cli_print_error("verify-blocks", NULL); return EXIT_CANNOT; }
        if (scan_blocks(path[1], &lb)) {
            pdb_cli_print_error("verify-blocks", NULL);
            names_free(&la);
            return EXIT_CANNOT;
        }
        size_t i = 0, j = 0;
        char fa[8192], fb[8192];
        while (i < la.n || j < lb.n) {
            int c = i == la.n ? 1 : j == lb.n ? -1 : cmp_names(&la.v[i], &lb.v[j]);
            const char *name = c <= 0 ? la.v[i] : lb.v[j];
            char label[80];
            snprintf(label, sizeof label, "%.64s", strchr(name, '/') + 1);
            n_all++;
            if (c < 0) { printf("%s  only in A (%s)\n", label, path[0]); only_a++; i++; continue; }
            if (c > 0) { printf("%s  only in B (%s)\n", label, path[1]); only_b++; j++; continue; }
            snprintf(fa, sizeof fa, "%s/%s", path[0], name);
            snprintf(fb, sizeof fb, "%s/%s", path[1], name);
            n_same += verify_pair(label, fa, fb, strict, &total);
            i++;
            j++;
        }
        names_free(&la);
        names_free(&lb);
    }
    printf("%lld/%lld identical", n_same, n_all);
    if (only_a || only_b) printf(" (%lld only in A, %lld only in B)", only_a, only_b);
    printf("; %lld/%lld compared elements differ, worst %.6g ulps", (long long)total.n_diff, (long long)total.n,
           total.worst_ulps);
    if (total.worst_bf16_ulps > 0)
        printf(" (%.6g bf16 ulps for F32; %lld F32 elements beyond 1 bf16 ulp)", total.worst_bf16_ulps, (long long)total.n_beyond_bf16);
    printf(", worst |d| %.6g\n", total.worst_abs);
    if (n_all == 0) fprintf(stderr, "pdbridge verify-blocks: no block files in %s or %s: nothing was proven\n", path[0], path[1]);
    return n_all > 0 && n_same == n_all ? EXIT_PASS : EXIT_DIFF;
}

/* ======================================== diff-state ======================================== */

/* block_size recorded in DIR/store.json; 0 when the file is absent. */
static pdb_status store_block_size(const char *dir, int64_t *bs) {
    char p[4096];
    snprintf(p, sizeof p, "%s/store.json", dir);
    *bs = 0;
    struct stat sb;
    if (stat(p, &sb)) return PDB_OK;
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    json_t *v = j ? json_object_get(j, "block_size") : NULL;
    if (!v || !json_is_integer(v)) {
        json_decref(j);
        return pdb_err_set(PDB_CORRUPT, "%s: no integer block_size (%s)", p, j ? "missing" : je.text);
    }
    *bs = json_integer_value(v);
    json_decref(j);
    return PDB_OK;
}

static const char *const ds_usage =
    "usage: pdbridge diff-state --model DEC_DIR --prompt-file F --cache-dir DIR [--block-size N]\n"
    "                           [--chat] [--threads N]\n\n"
    "Tokenizes the bytes of F exactly as decode-server does (a text completion: BOS + text; with\n"
    "--chat: one user message through the chat template), runs the decoder's own prefill over the\n"
    "prompt's full blocks, then mounts every block of that prompt from the store DIR (the\n"
    "decoder's layout and fingerprint; full verification incl. checksum, as the decoder mounts)\n"
    "and compares the mounted state with the native one, pool by pool (every pool of the layout:\n"
    "V2's latent rows, V4's window, compressed entries, indexer keys and overlap halves, each taken\n"
    "at its block's end): bit-exact elements, worst\n"
    "absolute and relative delta, worst ulps, and how many blocks were found. DIR must hold a\n"
    "store.json (a decoder's cache dir); --block-size defaults to its block_size. The store's\n"
    "own rules apply: a file that fails verification is a miss, and is removed, as the decoder\n"
    "would.\n\n"
    "exit: 0 at least one block found and every found block bit-identical; 1 otherwise;\n"
    "2 usage error; 3 cannot run (model, tokenizer, prompt file or store unreadable).\n";

/* One diff-state run: the options, what the phases open (ds_close frees it), the totals. A phase
 * returns DS_GO to go on, DS_FAIL when a call failed with the error in pdb_err_msg (the command
 * prints it and exits EXIT_CANNOT), or the exit code after printing its own message. */
enum { DS_GO = -1, DS_FAIL = -2 };
typedef struct {
    const char *model, *pfile, *cdir;
    long long bs_opt, threads;
    int chat;
    int64_t bs;                  /* the block size compared: --block-size, else the store's */
    char *text;
    size_t tlen;
    pdb_tokenizer *tok;
    pdb_pool *pool;
    pdb_dec_model *m;
    pdb_store *store;
    int32_t *ids;
    int64_t n_ids, nb;           /* prompt tokens, full blocks among them */
    uint8_t (*hashes)[32];       /* [nb] the blocks' store keys */
    float *nat, *mnt;            /* one block buffer each: native, mounted */
    pdb_dec_seq seq;
    const pdb_store_layout *lay;
    const void *natp[PDB_STORE_MAX_POOLS], *mntp[PDB_STORE_MAX_POOLS];
    pdb_block_cmp_stats ptot[PDB_STORE_MAX_POOLS], total;
    int64_t found, same, leading;
} ds_run;

/* The command line into d: DS_GO, EXIT_PASS after --help, EXIT_USAGE for a bad one. */
static int ds_parse(int argc, char **argv, ds_run *d) {
    if (pdb_cli_wants_help(argc, argv)) { fputs(ds_usage, stdout); return EXIT_PASS; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--chat")) { d->chat = 1; continue; }
        if (!v) { fprintf(stderr, "pdbridge diff-state: option '%s' needs a value or is unknown\n\n%s", a, ds_usage); return EXIT_USAGE; }
        i++;
        if (!strcmp(a, "--model")) d->model = v;
        else if (!strcmp(a, "--prompt-file")) d->pfile = v;
        else if (!strcmp(a, "--cache-dir")) d->cdir = v;
        else if (!strcmp(a, "--block-size")) {
            if (!pdb_cli_parse_int(v, 128, 1 << 24, &d->bs_opt) || d->bs_opt % 128) {
                fprintf(stderr, "pdbridge diff-state: --block-size '%s': a multiple of 128\n", v);
                return EXIT_USAGE;
            }
        } else if (!strcmp(a, "--threads")) {
            if (!pdb_cli_parse_int(v, 0, 4096, &d->threads)) { fprintf(stderr, "pdbridge diff-state: --threads '%s'\n", v); return EXIT_USAGE; }
        } else { fprintf(stderr, "pdbridge diff-state: unknown option '%s'\n\n%s", a, ds_usage); return EXIT_USAGE; }
    }
    if (!d->model || !d->pfile || !d->cdir) {
        fprintf(stderr, "pdbridge diff-state: --model, --prompt-file and --cache-dir are required\n\n%s", ds_usage);
        return EXIT_USAGE;
    }
    return DS_GO;
}

/* --cache-dir must be a store's directory (store.json); sets d->bs. DS_GO or EXIT_CANNOT. */
static int ds_check_cache_dir(ds_run *d) {
    struct stat sd;
    if (stat(d->cdir, &sd) || !S_ISDIR(sd.st_mode)) {
        fprintf(stderr, "pdbridge diff-state: --cache-dir %s: not a directory\n", d->cdir);
        return EXIT_CANNOT;
    }
    if (store_block_size(d->cdir, &d->bs)) { pdb_cli_print_error("diff-state", NULL); return EXIT_CANNOT; }
    if (!d->bs) { /* opening a store would create one here: refuse instead of writing into a stranger's directory */
        fprintf(stderr, "pdbridge diff-state: --cache-dir %s: no store.json: not a prefix-cache directory\n", d->cdir);
        return EXIT_CANNOT;
    }
    if (d->bs_opt) d->bs = d->bs_opt;
    return DS_GO;
}

/* The prompt file's token ids as decode-server would make them (d->ids, d->n_ids). */
static int ds_tokenize(ds_run *d) {
    char tokp[4096];
    snprintf(tokp, sizeof tokp, "%s/tokenizer.json", d->model);
    if (pdb_file_read_all(d->pfile, PDB_TOKENIZER_MAX_TEXT, &d->text, &d->tlen) || pdb_tokenizer_load(tokp, &d->tok)) return DS_FAIL;
    pdb_openai_message msg = {.role = "user", .content = d->text};
    pdb_openai_request q = {.kind = d->chat ? PDB_OPENAI_CHAT : PDB_OPENAI_COMPLETION, .prompt_text = d->text,
                            .prompt_len = d->tlen, .messages = &msg, .n_messages = 1, .max_tokens = -1};
    pdb_openai_error oe;
    if (pdb_prompt_encode_request(d->tok, &q, &d->ids, &d->n_ids, &oe)) {
        fprintf(stderr, "pdbridge diff-state: %s: the decoder would refuse this prompt: %s\n", d->pfile, oe.message);
        return EXIT_CANNOT;
    }
    return DS_GO;
}

/* The decoder (d->m on d->pool); EXIT_DIFF when the prompt has no full block, EXIT_CANNOT when
 * a pool of its layout has no f32 values (the comparison is of the values the decoder computes
 * with: an F32 pool as it is, a compact one decoded by its architecture, pdb_arch_pool_values). */
static int ds_open_model(ds_run *d) {
    if (pdb_pool_create((int)d->threads, &d->pool) || pdb_dec_model_open(d->model, d->pool, &d->m)) return DS_FAIL;
    d->nb = d->n_ids / d->bs;
    printf("prompt: %lld tokens (%s), block size %lld: %lld full block(s)\n", (long long)d->n_ids, d->chat ? "chat" : "completion",
           (long long)d->bs, (long long)d->nb);
    if (d->nb == 0) {
        fprintf(stderr, "pdbridge diff-state: %s: %lld tokens, fewer than one block of %lld: nothing to compare\n", d->pfile,
                (long long)d->n_ids, (long long)d->bs);
        return EXIT_DIFF;
    }
    d->lay = pdb_dec_model_layout(d->m);
    for (int p = 0; p < d->lay->n_pools; p++)
        if (d->lay->pools[p].dtype != PDB_DT_F32) {
            int64_t dim;
            const pdb_arch_def *a;
            if (pdb_arch_of(pdb_dec_model_config(d->m), &a) || !a->pool_decode ||
                a->pool_decode(pdb_dec_model_config(d->m), pdb_dec_model_semantics_index(d->m), &d->lay->pools[p], NULL, 0, NULL, &dim)) {
                fprintf(stderr, "pdbridge diff-state: %s: pool %s is %s and has no f32 values\n", d->model, d->lay->pools[p].name,
                        pdb_dtype_name(d->lay->pools[p].dtype));
                return EXIT_CANNOT;
            }
        }
    return DS_GO;
}

/* The store, the sequence cache for the full blocks, the two block buffers and the blocks' keys. */
static int ds_open_store(ds_run *d) {
    if (pdb_store_open(d->cdir, d->lay, pdb_dec_model_fingerprint(d->m), d->bs, 0, &d->store)) return DS_FAIL;
    if (pdb_dec_seq_init(&d->seq, d->m, d->nb * d->bs)) return DS_FAIL;
    uint64_t bbytes = pdb_store_block_bytes(d->store);
    d->hashes = malloc((size_t)d->nb * sizeof *d->hashes);
    d->nat = malloc(bbytes);
    d->mnt = malloc(bbytes);
    if (!d->hashes || !d->nat || !d->mnt) {
        pdb_err_set(PDB_NOMEM, "out of memory for %llu bytes per block", (unsigned long long)bbytes);
        return DS_FAIL;
    }
    if (pdb_store_hash_chain(pdb_dec_model_fingerprint(d->m), d->ids, d->nb * d->bs, d->bs, d->hashes)) return DS_FAIL;
    char fp[65];
    pdb_store_hash_hex(pdb_dec_model_fingerprint(d->m), fp);
    printf("decoder %s (scheme %s, fingerprint %.16s...), store %s, %d pool(s)\n", d->model, pdb_dec_model_scheme(d->m), fp, d->cdir,
           d->lay->n_pools);
    pdb_arch_block_pools(d->lay, d->bs, d->nat, d->natp);
    pdb_arch_block_pools(d->lay, d->bs, d->mnt, d->mntp);
    return DS_GO;
}

/* Block b: the decoder's native prefill of it, the store's copy mounted, compared pool by pool
 * (a line per block, totals into d). *gap is set once a block is missing (later ones are not
 * leading). Nonzero: a call failed. */
static pdb_status ds_compare_block(ds_run *d, int64_t b, int *gap) {
    int64_t bs = d->bs;
    const int np = d->lay->n_pools;
    /* the decoder's native prefill of block b, taken at its end (STATE pools are the state
     * there); chunks never cross the block's end, as in the decode service */
    for (int64_t p = b * bs; p < (b + 1) * bs; p += 512) {
        pdb_dec_seg sg = {&d->seq, d->ids + p, (b + 1) * bs - p < 512 ? (b + 1) * bs - p : 512, NULL};
        PDB_TRY(pdb_dec_forward(d->m, &sg, 1));
    }
    char hx[65];
    pdb_store_hash_hex(d->hashes[b], hx);
    /* mntp points into mnt, a writable buffer (pdb_arch_block_pools hands out const pointers) */
    pdb_status s = pdb_store_load_block(d->store, d->hashes[b], b, (void *const *)d->mntp);
    if (s == PDB_NOT_FOUND || s == PDB_CORRUPT) {
        printf("block %lld %.16s  %s\n", (long long)b, hx, s == PDB_NOT_FOUND ? "not in the store" : "corrupt (removed)");
        *gap = 1;
        return PDB_OK;
    }
    if (s) return s;
    d->found++;
    d->leading += !*gap;
    pdb_dec_seq_get_block(&d->seq, b, bs, d->nat);
    int64_t n_el = 0, n_diff = 0;
    for (int p = 0; p < np; p++) {
        pdb_block_cmp_stats st = {0};
        const pdb_config *cfg = pdb_dec_model_config(d->m);
        int sem = pdb_dec_model_semantics_index(d->m);
        float *va = NULL, *vb = NULL;
        int64_t na = 0, nb = 0;
        if (!(s = pdb_arch_pool_values(cfg, sem, &d->lay->pools[p], bs, d->natp[p], &va, &na)))
            s = pdb_arch_pool_values(cfg, sem, &d->lay->pools[p], bs, d->mntp[p], &vb, &nb);
        if (!s) s = pdb_block_compare_values(PDB_DT_F32, va, vb, na, &st);
        free(va);
        free(vb);
        if (s) return s;
        pdb_block_compare_merge_stats(&d->ptot[p], &st);
        pdb_block_compare_merge_stats(&d->total, &st);
        n_el += st.n;
        n_diff += st.n_diff;
        if (st.n_diff)
            printf("block %lld %.16s  %s: %lld/%lld differ, worst |d| %.6g, worst rel %.6g, worst %.6g ulps (%.6g bf16 ulps)\n",
                   (long long)b, hx, d->lay->pools[p].name, (long long)st.n_diff, (long long)st.n, st.worst_abs, st.worst_rel,
                   st.worst_ulps, st.worst_bf16_ulps);
    }
    d->same += n_diff == 0;
    if (!n_diff)
        printf("block %lld %.16s  %s: bit-identical (%lld elements)\n", (long long)b, hx, np == 1 ? d->lay->pools[0].name : "all pools",
               (long long)n_el);
    return PDB_OK;
}

/* The totals per pool, over all pools and over blocks; EXIT_PASS when at least one block was
 * found and every found block is bit-identical, else EXIT_DIFF. */
static int ds_report(const ds_run *d) {
    const pdb_store_layout *lay = d->lay;
    const int np = lay->n_pools;
    const pdb_block_cmp_stats *total = &d->total;
    for (int p = 0; p < np; p++) {
        const pdb_block_cmp_stats *t = &d->ptot[p];
        printf("pool %s: %lld/%lld elements bit-exact (%.6f%%), worst |d| %.6g, worst rel %.6g, worst %.6g ulps (%.6g bf16 ulps), "
               "%lld beyond 1 bf16 ulp\n",
               lay->pools[p].name, (long long)(t->n - t->n_diff), (long long)t->n,
               t->n ? 100.0 * (double)(t->n - t->n_diff) / (double)t->n : 0.0, t->worst_abs, t->worst_rel, t->worst_ulps,
               t->worst_bf16_ulps, (long long)t->n_beyond_bf16);
    }
    if (np > 1)
        printf("all pools: %lld/%lld elements bit-exact (%.6f%%), worst |d| %.6g\n", (long long)(total->n - total->n_diff),
               (long long)total->n, total->n ? 100.0 * (double)(total->n - total->n_diff) / (double)total->n : 0.0, total->worst_abs);
    printf("blocks: %lld/%lld found (%lld leading: the prefix the decoder would mount), %lld/%lld found bit-identical\n",
           (long long)d->found, (long long)d->nb, (long long)d->leading, (long long)d->same, (long long)d->found);
    if (!d->found) fprintf(stderr, "pdbridge diff-state: no block of this prompt in %s: nothing was proven\n", d->cdir);
    return d->found > 0 && d->same == d->found ? EXIT_PASS : EXIT_DIFF;
}

/* Frees what the phases opened (any prefix of them). */
static void ds_close(ds_run *d) {
    pdb_dec_seq_free(&d->seq);
    free(d->nat);
    free(d->mnt);
    free(d->hashes);
    free(d->ids);
    pdb_store_close(d->store);
    pdb_dec_model_close(d->m);
    pdb_pool_destroy(d->pool);
    pdb_tokenizer_free(d->tok);
    free(d->text);
}

int pdb_cli_diff_state(int argc, char **argv) {
    ds_run d = {0};
    int rc = ds_parse(argc, argv, &d);
    if (rc == DS_GO) rc = ds_check_cache_dir(&d);
    if (rc != DS_GO) return rc;
    if ((rc = ds_tokenize(&d)) == DS_GO && (rc = ds_open_model(&d)) == DS_GO && (rc = ds_open_store(&d)) == DS_GO) {
        int gap = 0;
        for (int64_t b = 0; b < d.nb && rc == DS_GO; b++)
            if (ds_compare_block(&d, b, &gap)) rc = DS_FAIL;
        if (rc == DS_GO) rc = ds_report(&d);
    }
    if (rc == DS_FAIL) {
        pdb_cli_print_error("diff-state", NULL);
        rc = EXIT_CANNOT;
    }
    ds_close(&d);
    return rc;
}
