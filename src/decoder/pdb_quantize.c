/* pdb_quantize: per-tensor scheme choice, MX quantization rows through the shared core code,
 * the identity file, and the atomic directory publish. */
#include "pdb_quantize.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pdb_config.h"
#include "pdb_dec_model.h"
#include "pdb_dtype.h"
#include "pdb_file.h"
#include "pdb_pool.h"
#include "pdb_qmat_st.h"
#include "pdb_safetensors.h"


static int ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Scheme mx quantizes a 2-D float ".weight" whose input dim is a multiple of 32 as its
 * architecture's rule says (pdb_arch_def.quant_kind); everything else is kept as it is. */
static pdb_arch_quant choose(const pdb_arch_def *a, const pdb_tensor_view *v, const char *scheme) {
    if (strcmp(scheme, "mx") || v->ndim != 2 || !ends(v->name, ".weight") || v->shape[1] % 32) return PDB_ARCH_Q_KEEP;
    if (v->dtype != PDB_DT_BF16 && v->dtype != PDB_DT_F32 && v->dtype != PDB_DT_F16 && v->dtype != PDB_DT_F8_E4M3)
        return PDB_ARCH_Q_KEEP;
    return a->quant_kind(v->name);
}

/* DeepSeek's layout converted without loss (docs/formats/deepseek.md): pdb_qmat_st_fp8_scales
 * says whether a block-scaled FP8 weight is MXFP8 already and gives its per-32 scales. */

/* What quantize writes into its output directory, all it ever removes when it replaces one: the
 * checkpoint and its record, then the files copied from the source (OUT_COPIED on; config.json
 * first, the only one that must exist). */
enum { OUT_COPIED = 2, OUT_FILES = 5 };
static const char *const out_files[OUT_FILES] = {"model.safetensors", "pdbridge_decoder.json", "config.json", "tokenizer.json",
                                                 "tokenizer_config.json"};

/* dir may be replaced: it does not exist, or it is a directory holding nothing but files quantize
 * writes (an earlier output, a temp dir left by a crash, an empty directory). Anything else (a
 * file, someone's directory) is refused before any work: no --out typo ever deletes data. */
static pdb_status check_replaceable(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb)) return errno == ENOENT ? PDB_OK : pdb_err_set(PDB_IO, "quantize: %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return pdb_err_set(PDB_INVALID, "quantize: %s exists and is not a directory; refusing to replace it", dir);
    DIR *d = opendir(dir);
    if (!d) return pdb_err_set(PDB_IO, "quantize: %s: %s", dir, strerror(errno));
    struct dirent *e;
    pdb_status st = PDB_OK;
    while (!st && (e = readdir(d))) {
        int ours = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
        for (int i = 0; i < OUT_FILES; i++) ours |= !strcmp(e->d_name, out_files[i]);
        if (!ours)
            st = pdb_err_set(PDB_INVALID, "quantize: %s holds %s, which quantize does not write (not a decoder checkpoint); refusing "
                             "to replace it", dir, e->d_name);
    }
    closedir(d);
    return st;
}

/* Removes a directory quantize wrote: its own files, then the directory (which must then be
 * empty). A missing directory is fine. */
static pdb_status remove_output(const char *dir) {
    char p[4200];
    for (int i = 0; i < OUT_FILES; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, out_files[i]);
        if (unlink(p) && errno != ENOENT && errno != ENOTDIR) return pdb_err_set(PDB_IO, "quantize: cannot remove %s: %s", p, strerror(errno));
    }
    if (rmdir(dir) && errno != ENOENT)
        return pdb_err_set(PDB_IO, "quantize: cannot replace %s: %s (it holds files quantize did not write)", dir, strerror(errno));
    return PDB_OK;
}

/* One tensor's rows quantized on the pool, Q_ROWS rows per task: each row alone, so the same
 * bytes on any number of threads. */
enum { Q_ROWS = 64 };
typedef struct { const float *f; uint8_t *q, *sc; int64_t R, C; pdb_arch_quant k; } q_rows;

static void q_rows_task(void *vc, int64_t task, int thread) {
    const q_rows *t = vc;
    int64_t C = t->C, r1 = (task + 1) * Q_ROWS < t->R ? (task + 1) * Q_ROWS : t->R;
    for (int64_t r = task * Q_ROWS; r < r1; r++) {
        if (t->k == PDB_ARCH_Q_MXFP4) pdb_quant_mxfp4_row(t->f + r * C, C, t->q + r * C / 2, t->sc + r * C / 32);
        else pdb_quant_mxfp8_row(t->f + r * C, C, t->q + r * C, t->sc + r * C / 32);
    }
}

pdb_status pdb_quantize_model(const char *src, const char *out_dir, const char *scheme, int verbose) {
    return pdb_quantize_model_ex(src, out_dir, scheme, NULL, verbose);
}

pdb_status pdb_quantize_model_ex(const char *src, const char *out_dir, const char *scheme, const char *v4_semantics,
                                 int verbose) {
    const char *semantics_name = v4_semantics;
    if (strcmp(scheme, "mx") && strcmp(scheme, "none"))
        return pdb_err_set(PDB_INVALID, "quantize: unknown scheme '%s' (mx, none)", scheme);
    pdb_config cfg;
    PDB_TRY(pdb_config_load(src, &cfg));
    const pdb_arch_def *arch;
    int sem = 0;
    if (pdb_arch_of(&cfg, &arch)) return pdb_err_wrap(PDB_UNSUPPORTED, "quantize: %s", src);
    if (semantics_name && !arch->semantics_key)
        return pdb_err_set(PDB_INVALID, "quantize: %s has one cache semantics; --v4-semantics applies to deepseek_v4 models only",
                           arch->name);
    PDB_TRY(pdb_arch_semantics_parse(arch, semantics_name, &sem));
    if (arch->check_semantics) PDB_TRY(arch->check_semantics(&cfg, sem));
    const char *semantics = pdb_arch_semantics_fingerprint(arch, sem);
    char tmpdir[4096], path[4200], spath[4200];
    snprintf(tmpdir, sizeof tmpdir, "%s.tmp", out_dir);
    PDB_TRY(check_replaceable(out_dir));
    PDB_TRY(check_replaceable(tmpdir));
    PDB_TRY(remove_output(tmpdir)); /* a stale temp dir from a crash */
    pdb_st *st = NULL;
    PDB_TRY(pdb_st_open(src, &st));
    pdb_pool *pool = NULL;
    pdb_status s = pdb_pool_create(0, &pool);
    pdb_st_writer *w = NULL;
    void **bufs = NULL;
    int nb = 0;
    int64_t n = pdb_st_count(st);
    if (s || (s = pdb_file_mkdirs(tmpdir))) { pdb_pool_destroy(pool); pdb_st_close(st); return pdb_err_wrap(s, "quantize"); }
    bufs = calloc((size_t)(2 * n + 1), sizeof(void *));
    if (!bufs || (s = pdb_st_writer_init(&w))) { if (!s) s = pdb_err_set(PDB_NOMEM, "quantize"); goto done; }
    pdb_st_writer_meta(w, "format", "pt");
    pdb_st_writer_meta(w, "pdbridge_scheme", scheme);
    uint64_t in_bytes = 0, out_bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        const pdb_tensor_view *v = pdb_st_at(st, i);
        if (ends(v->name, "_scale_inv") || ends(v->name, ".scale")) continue; /* consumed with their FP8 weight */
        in_bytes += v->nbytes;
        pdb_arch_quant k = choose(arch, v, scheme);
        const pdb_tensor_view *dq = NULL, *dsc = NULL;
        int dfp4 = 0;
        if ((v->dtype == PDB_DT_I8 || v->dtype == PDB_DT_U8) && v->ndim == 2 &&
            (s = pdb_st_get_mx(st, v->name, -1, -1, &dq, &dsc, &dfp4)))
            goto done;
        if (dq && ends(dsc->name, "_mx_scale")) dq = NULL; /* already ours: kept as before */
        int64_t lshape[2] = {v->shape[0], dq ? 2 * v->shape[1] : v->shape[1]}; /* FP4: [R, C] of [R, C/2] bytes */
        if (dq && !strcmp(scheme, "mx")) { /* DeepSeek's FP4 (or an MX weight already): MXFP4 as it is */
            int64_t ss[2] = {dsc->shape[0], dsc->shape[1]};
            snprintf(spath, sizeof spath, "%s_mx_scale", v->name);
            if ((s = pdb_st_writer_add(w, v->name, dfp4 ? PDB_DT_U8 : PDB_DT_F8_E4M3, 2, v->shape, v->data)) ||
                (s = pdb_st_writer_add(w, spath, PDB_DT_F8_E8M0, 2, ss, dsc->data)))
                goto done;
            out_bytes += v->nbytes + dsc->nbytes;
            continue;
        }
        uint8_t *rep = NULL;
        if (k != PDB_ARCH_Q_KEEP && pdb_qmat_st_fp8_scales(st, v, &rep)) { /* FP8 128x128 with e8m0 scales: MXFP8 as it is */
            int64_t ss[2] = {v->shape[0], v->shape[1] / 32};
            bufs[nb++] = rep;
            snprintf(spath, sizeof spath, "%s_mx_scale", v->name);
            if ((s = pdb_st_writer_add(w, v->name, PDB_DT_F8_E4M3, 2, v->shape, v->data)) ||
                (s = pdb_st_writer_add(w, spath, PDB_DT_F8_E8M0, 2, ss, rep)))
                goto done;
            out_bytes += v->nbytes + (uint64_t)(ss[0] * ss[1]);
            continue;
        }
        if (k == PDB_ARCH_Q_KEEP && v->dtype != PDB_DT_F8_E4M3 && !dq) {
            if ((s = pdb_st_writer_add(w, v->name, v->dtype, v->ndim, v->shape, v->data))) goto done;
            out_bytes += v->nbytes;
            continue;
        }
        float *f = NULL;
        if ((s = pdb_st_load_f32(st, v->name, v->ndim, dq ? lshape : v->shape, &f))) goto done;
        if (k == PDB_ARCH_Q_KEEP) { /* block-scaled FP8 and FP4 kept as bf16 under scheme none (exact) */
            int64_t numel = dq ? 2 * v->numel : v->numel;
            uint16_t *b = malloc(sizeof(uint16_t) * (size_t)numel);
            if (!b) { free(f); s = pdb_err_set(PDB_NOMEM, "quantize"); goto done; }
            for (int64_t j = 0; j < numel; j++) b[j] = pdb_f32_to_bf16(f[j]);
            free(f);
            bufs[nb++] = b;
            if ((s = pdb_st_writer_add(w, v->name, PDB_DT_BF16, v->ndim, dq ? lshape : v->shape, b))) goto done;
            out_bytes += (uint64_t)numel * 2;
            continue;
        }
        int64_t R = v->shape[0], C = v->shape[1];
        uint8_t *q = malloc((size_t)(k == PDB_ARCH_Q_MXFP4 ? R * C / 2 : R * C)), *sc = malloc((size_t)(R * C / 32));
        if (!q || !sc) { free(q); free(sc); free(f); s = pdb_err_set(PDB_NOMEM, "quantize"); goto done; }
        q_rows qr = {f, q, sc, R, C, k};
        pdb_pool_run(pool, (R + Q_ROWS - 1) / Q_ROWS, q_rows_task, &qr);
        free(f);
        bufs[nb++] = q;
        bufs[nb++] = sc;
        int64_t qs[2] = {R, k == PDB_ARCH_Q_MXFP4 ? C / 2 : C}, ss[2] = {R, C / 32};
        snprintf(spath, sizeof spath, "%s_mx_scale", v->name);
        if ((s = pdb_st_writer_add(w, v->name, k == PDB_ARCH_Q_MXFP4 ? PDB_DT_U8 : PDB_DT_F8_E4M3, 2, qs, q))) goto done;
        if ((s = pdb_st_writer_add(w, spath, PDB_DT_F8_E8M0, 2, ss, sc))) goto done;
        out_bytes += (uint64_t)(qs[0] * qs[1] + ss[0] * ss[1]);
        if (verbose && i % 64 == 0) fprintf(stderr, "\rquantize: %lld/%lld tensors", (long long)i, (long long)n);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    if ((s = pdb_st_writer_finish(w, path))) goto done;
    if (verbose) fprintf(stderr, "\rquantize: %lld tensors, %.1f MB -> %.1f MB (%s)\n", (long long)n, in_bytes / 1e6,
                         out_bytes / 1e6, scheme);
    /* identity: digest over what we wrote, read back */
    {
        pdb_st *o = NULL;
        uint8_t dg[32], fp[32];
        if ((s = pdb_st_open(path, &o))) goto done;
        s = pdb_dec_weights_digest(o, dg);
        pdb_st_close(o);
        if (s || (s = pdb_dec_fingerprint(&cfg, scheme, semantics, dg, fp))) goto done;
        char dh[65], fh[65];
        for (int i = 0; i < 32; i++) { sprintf(dh + 2 * i, "%02x", dg[i]); sprintf(fh + 2 * i, "%02x", fp[i]); }
        json_t *id = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "scheme", scheme, "weights_sha256", dh, "fingerprint", fh,
                               "cache_semantics", semantics, "source", src, "format_version", 1);
        if (id && arch->semantics_key)
            json_object_set_new(id, arch->semantics_key, json_string(pdb_arch_semantics_name(arch, sem)));
        snprintf(path, sizeof path, "%s/pdbridge_decoder.json", tmpdir);
        int bad = !id || json_dump_file(id, path, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(id);
        if (bad) { s = pdb_err_set(PDB_IO, "quantize: writing %s failed", path); goto done; }
    }
    const char *const *copies = out_files + OUT_COPIED;
    for (int i = 0; i < OUT_FILES - OUT_COPIED; i++) {
        snprintf(spath, sizeof spath, "%s/%s", src, copies[i]);
        snprintf(path, sizeof path, "%s/%s", tmpdir, copies[i]);
        pdb_status cs = pdb_file_copy(spath, path); /* tokenizer files are optional, config.json is not */
        if (cs && cs != PDB_NOT_FOUND) { s = pdb_err_wrap(cs, "quantize"); goto done; }
        if (cs == PDB_NOT_FOUND && i == 0) { s = pdb_err_set(PDB_IO, "quantize: cannot read %s", spath); goto done; }
    }
    if (!(s = remove_output(out_dir)) && rename(tmpdir, out_dir))
        s = pdb_err_set(PDB_IO, "quantize: cannot publish %s: %s", out_dir, strerror(errno));
done:
    pdb_pool_destroy(pool);
    pdb_st_writer_free(w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    free(bufs);
    pdb_st_close(st);
    if (s) (void)remove_output(tmpdir); /* best effort: the next run removes what is left */
    return s;
}
