/* pdb_cli_model: `pdbridge make-model` and `pdbridge forward` (the reference forward's CLI;
 * DeepSeek-V2 or DeepSeek-V4 by the model's config.json).
 * Invariant: errors print the library's message (naming file/tensor) and exit 1; usage errors
 * exit 2. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_arch.h"
#include "pdb_cli.h"
#include "pdb_clock.h"
#include "pdb_make_model.h"
#include "pdb_math.h"
#include "pdb_safetensors.h"

static int fail(const char *cmd) {
    pdb_cli_print_error(cmd, NULL);
    return 1;
}

static int parse_i64(const char *cmd, const char *opt, const char *v, int64_t *out) {
    long long x;
    if (!pdb_cli_parse_int(v, 0, LLONG_MAX, &x)) {
        fprintf(stderr, "pdbridge %s: %s needs a non-negative integer\n", cmd, opt);
        return 0;
    }
    *out = x;
    return 1;
}

int pdb_cli_make_model(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge make-model --arch deepseek_v2|deepseek_v4 --preset NAME --seed S --out DIR\n"
        "                           [--layers N] [--experts N] [--vocab N] [--hidden N] [--tokenizer FILE]\n"
        "                           [--format bf16|deepseek]\n\n"
        "Writes a random checkpoint in the Hugging Face layout: config.json, model.safetensors (bf16)\n"
        "and tokenizer.json when the vocabulary covers the DeepSeek tokenizer (--tokenizer, default\n"
        ".cache/tokenizer/deepseek_v3/tokenizer.json when it exists).\n"
        "--format deepseek writes the weights quantize --scheme mx would make MX in DeepSeek's own layout\n"
        "instead (docs/formats/deepseek.md): routed experts FP4 (I8 [out, in/2], two e2m1 per byte, low\n"
        "nibble first, + '<name minus .weight>.scale' e8m0 [out, in/32]), the other MX weights FP8 e4m3\n"
        "with one e8m0 scale per 128x128 block; the values are the bf16 checkpoint's, rounded per block.\n"
        "It holds one tensor in memory at a time. Default: bf16.\n"
        "Presets: tiny (unit tests), small (demo: real tokenizer vocabulary), v2-lite (DeepSeek-V2-Lite\n"
        "shapes; 15.7B parameters, use --layers/--experts to shrink).\n"
        "deepseek_v4 presets: tiny (every attention path on short prompts), v4-long-tiny (every path\n"
        "at the 1,048,576-token window on a CPU: real vocabulary, one head and index head, CSA rate 256,\n"
        "HCA rate 1024, block sizes multiples of 1024), v4-flash (V4-Flash's\n"
        "architecture exactly; --experts 8 gives its active compute in ~15B parameters).\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    pdb_make_model_opts o = {.arch = "deepseek_v2", .preset = "tiny", .seed = 0};
    const char *deftok = ".cache/tokenizer/deepseek_v3/tokenizer.json";
    FILE *tf = fopen(deftok, "rb");
    if (tf) { fclose(tf); o.tokenizer = deftok; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        if (!strcmp(a, "--arch") && v) o.arch = argv[++i];
        else if (!strcmp(a, "--preset") && v) o.preset = argv[++i];
        else if (!strcmp(a, "--out") && v) o.out_dir = argv[++i];
        else if (!strcmp(a, "--tokenizer") && v) o.tokenizer = argv[++i];
        else if (!strcmp(a, "--format") && v) o.format = argv[++i]; /* checked by pdb_make_model_write, before any file */
        else if (!strcmp(a, "--seed")) { if (!parse_i64("make-model", a, v, &x)) return 2; o.seed = (uint64_t)x; i++; }
        else if (!strcmp(a, "--layers")) { if (!parse_i64("make-model", a, v, &o.layers)) return 2; i++; }
        else if (!strcmp(a, "--experts")) { if (!parse_i64("make-model", a, v, &o.experts)) return 2; i++; }
        else if (!strcmp(a, "--vocab")) { if (!parse_i64("make-model", a, v, &o.vocab)) return 2; i++; }
        else if (!strcmp(a, "--hidden")) { if (!parse_i64("make-model", a, v, &o.hidden)) return 2; i++; }
        else { fprintf(stderr, "pdbridge make-model: unknown or incomplete option '%s'\n\n%s", a, usage); return 2; }
    }
    if (!o.out_dir) { fprintf(stderr, "pdbridge make-model: --out DIR is required\n\n%s", usage); return 2; }
    if (pdb_make_model_write(&o)) return fail("make-model");
    if (o.format && !strcmp(o.format, "deepseek"))
        printf("wrote %s (%s, preset %s, seed %llu, DeepSeek FP8/FP4 layout)\n", o.out_dir, o.arch, o.preset, (unsigned long long)o.seed);
    else
        printf("wrote %s (%s, preset %s, seed %llu)\n", o.out_dir, o.arch, o.preset, (unsigned long long)o.seed);
    return 0;
}

/* Read input_ids (I32 or I64, 1-D or [1,T]) from a safetensors file. */
static pdb_status read_ids(const char *path, int32_t **ids, int64_t *n) {
    pdb_st *st;
    PDB_TRY(pdb_st_open(path, &st));
    const pdb_tensor_view *v = pdb_st_find(st, "input_ids");
    pdb_status s = PDB_OK;
    if (!v) s = pdb_err_set(PDB_NOT_FOUND, "%s: no tensor 'input_ids'", path);
    else if (v->dtype != PDB_DT_I32 && v->dtype != PDB_DT_I64)
        s = pdb_err_set(PDB_MISMATCH, "%s: tensor 'input_ids' must be I32 or I64, not %s", path, pdb_dtype_name(v->dtype));
    else if (v->numel <= 0 || (v->ndim != 1 && !(v->ndim == 2 && v->shape[0] == 1)))
        s = pdb_err_set(PDB_MISMATCH, "%s: tensor 'input_ids' must be [T] or [1,T] with T > 0", path);
    if (!s) {
        *n = v->numel;
        *ids = malloc(sizeof(int32_t) * (size_t)v->numel);
        if (!*ids) s = pdb_err_set(PDB_NOMEM, "input_ids");
        else
            for (int64_t i = 0; i < v->numel; i++)
                (*ids)[i] = v->dtype == PDB_DT_I32 ? ((const int32_t *)v->data)[i] : (int32_t)((const int64_t *)v->data)[i];
    }
    pdb_st_close(st);
    return s;
}

int pdb_cli_forward(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge forward --model DIR --ids-file F --decode N --out OUT.safetensors [--chunk N]\n"
        "                        [--v4-semantics official|exact]\n\n"
        "Reference CPU forward (f32). F holds an I32 tensor input_ids [T]. OUT gets prefill_logits\n"
        "F32 [T,V], decode_tokens I32 [N] (greedy, fed back one at a time through the cache) and\n"
        "decode_logits F32 [N,V]. --chunk splits the prefill into chunks of N tokens (default: one).\n"
        "DeepSeek-V4 models: --v4-semantics official (default: DeepSeek's inference math, FP8 on cached\n"
        "K=V rows and compressed entries, Hadamard + FP4 in the indexer) or exact (transformers 5.17).\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    const char *model = NULL, *idsf = NULL, *out = NULL, *semname = NULL;
    int64_t ndec = 0, chunk = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--ids-file") && v) idsf = argv[++i];
        else if (!strcmp(a, "--out") && v) out = argv[++i];
        else if (!strcmp(a, "--v4-semantics") && v) semname = argv[++i];
        else if (!strcmp(a, "--decode")) { if (!parse_i64("forward", a, v, &ndec)) return 2; i++; }
        else if (!strcmp(a, "--chunk")) { if (!parse_i64("forward", a, v, &chunk)) return 2; i++; }
        else { fprintf(stderr, "pdbridge forward: unknown or incomplete option '%s'\n\n%s", a, usage); return 2; }
    }
    if (!model || !idsf || !out) { fprintf(stderr, "pdbridge forward: --model, --ids-file and --out are required\n\n%s", usage); return 2; }
    pdb_config mcfg;
    const pdb_arch_def *arch;
    int sem = 0;
    if (pdb_config_load(model, &mcfg) || pdb_arch_of(&mcfg, &arch)) return fail("forward");
    if (semname && (!arch->semantics_key || pdb_arch_semantics_parse(arch, semname, &sem))) {
        fprintf(stderr, "pdbridge forward: --v4-semantics must be official or exact, for a deepseek_v4 model\n\n%s", usage);
        return 2;
    }
    int32_t *ids = NULL;
    int64_t T = 0;
    if (read_ids(idsf, &ids, &T)) return fail("forward");
    void *ref = NULL;
    double t0 = pdb_clock_now();
    int64_t V = mcfg.vocab_size;
    float *pl = malloc(sizeof(float) * (size_t)(T * V)), *dl = malloc(sizeof(float) * (size_t)((ndec ? ndec : 1) * V));
    int32_t *dt = malloc(sizeof(int32_t) * (size_t)(ndec ? ndec : 1));
    int rc = 1;
    double t1 = 0, t2 = 0, t3 = 0;
    if (!pl || !dl || !dt) { pdb_err_set(PDB_NOMEM, "logits for %lld tokens", (long long)T); goto done; }
    if (arch->ref_open(model, sem, T + ndec, &ref)) goto done;
    t1 = pdb_clock_now();
    if (chunk <= 0) chunk = T;
    for (int64_t p = 0; p < T; p += chunk) {
        int64_t n = T - p < chunk ? T - p : chunk;
        if (arch->ref_forward(ref, ids + p, n, pl + p * V)) goto done;
    }
    t2 = pdb_clock_now();
    const float *last = pl + (T - 1) * V;
    for (int64_t i = 0; i < ndec; i++) {
        dt[i] = (int32_t)pdb_math_argmax(last, V);
        if (arch->ref_forward(ref, &dt[i], 1, dl + i * V)) goto done;
        last = dl + i * V;
    }
    t3 = pdb_clock_now();
    pdb_st_writer *w = NULL;
    if (pdb_st_writer_init(&w)) goto done;
    int64_t s_pl[2] = {T, V}, s_dt[1] = {ndec}, s_dl[2] = {ndec, V};
    pdb_status s = arch->semantics_key ? pdb_st_writer_meta(w, arch->semantics_key, pdb_arch_semantics_name(arch, sem)) : PDB_OK;
    if (!s) s = pdb_st_writer_add(w, "prefill_logits", PDB_DT_F32, 2, s_pl, pl);
    if (!s) s = pdb_st_writer_add(w, "decode_tokens", PDB_DT_I32, 1, s_dt, dt);
    if (!s) s = pdb_st_writer_add(w, "decode_logits", PDB_DT_F32, 2, s_dl, dl);
    if (!s) s = pdb_st_writer_finish(w, out);
    pdb_st_writer_free(w);
    if (s) goto done;
    fprintf(stderr, "forward (%s, %s): load %.2fs, prefill %lld tokens %.2fs (%.1f tok/s), decode %lld tokens %.2fs\n",
            arch->name, pdb_arch_semantics_name(arch, sem), t1 - t0, (long long)T, t2 - t1, T / (t2 - t1 + 1e-9),
            (long long)ndec, t3 - t2);
    rc = 0;
done:
    if (rc) fail("forward");
    if (ref) arch->ref_close(ref);
    free(pl);
    free(dl);
    free(dt);
    free(ids);
    return rc;
}
