/* pdb_make_model: the writer of random checkpoints: config.json (through the parser, so what is
 * written is what loads), model.safetensors from the architecture's tensor list (its
 * make_tensors, pdb_v2_make.c / pdb_v4_make.c) and the tokenizer. Weights: linear layers
 * ~ N(0, 1/in_features), embeddings ~ N(0, 1), norm weights ~ 1 + N(0, 0.05^2). */
#include "pdb_make_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pdb_dtype.h"
#include "pdb_file.h"
#include "pdb_pool.h"
#include "pdb_ptrs.h"
#include "pdb_safetensors.h"
#include "pdb_arch.h"

void pdb_make_model_defaults(pdb_config *c, pdb_arch arch, const char *model_type) {
    c->arch = arch;
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    c->rms_norm_eps = 1e-6;
    c->moe_layer_freq = 1;
    c->n_group = 1;
    c->topk_group = 1;
    c->bos_token_id = 0;
    c->eos_token_id = 1;
}

pdb_status pdb_make_model_preset(const char *arch, const char *preset, pdb_config *c) {
    memset(c, 0, sizeof *c);
    const pdb_arch_def *a = pdb_arch_find(arch);
    char names[256];
    if (!a) return pdb_err_set(PDB_UNSUPPORTED, "make-model: architecture '%s' is not supported (%s)", arch, pdb_arch_names(names, sizeof names));
    return a->make_preset(preset, c);
}

/* ---- deterministic normal stream per tensor (splitmix64 + Box-Muller) ---------------------- */

typedef struct { uint64_t s; } mm_rng;
static const uint64_t MM_STEP = 0x9E3779B97F4A7C15ull; /* splitmix64's state increment per draw */
static uint64_t mm_next(mm_rng *r) {
    uint64_t z = (r->s += MM_STEP);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double mm_uniform(mm_rng *r) { return ((double)(mm_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static uint64_t mm_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* deepseek: format "deepseek" (every tensor but the picks is a fill tensor, generated as the file is
 * written); pending: the scales of the FP8/FP4 weight just generated, until its companion writes
 * them (the writer writes in add order: the weight, then its scale). */
struct pdb_make_ctx {
    pdb_st_writer *w;
    pdb_ptrs bufs;
    uint64_t seed, bytes, next_report;
    pdb_pool *pool;
    int deepseek;
    const pdb_arch_def *arch;
    uint8_t *pending;
    uint64_t pending_bytes;
};

/* A tensor's values in chunks on the pool: element pair p takes draws 2p + 1 and 2p + 2 of its
 * tensor's splitmix64 stream, whose state after k draws is seed + k * increment, so a chunk
 * starting at an even element i0 starts from state seed + i0 * increment and every chunking
 * writes the same bits as one pass. */
enum { MM_CHUNK = 1 << 14 };
typedef struct { uint16_t *b; float *f; int64_t n; uint64_t s0; double mean, std; } mm_fill; /* b or f (bf16 values as f32) */

static void mm_fill_task(void *vc, int64_t task, int thread) {
    const mm_fill *f = vc;
    int64_t i0 = task * MM_CHUNK, i1 = i0 + MM_CHUNK < f->n ? i0 + MM_CHUNK : f->n;
    mm_rng r = {f->s0 + (uint64_t)i0 * MM_STEP};
    if (f->f) { /* the same bf16 values, widened (deepseek format: rounded further per block) */
        for (int64_t i = i0; i < i1; i += 2) {
            double u1 = mm_uniform(&r), u2 = mm_uniform(&r), rad = sqrt(-2 * log(u1));
            f->f[i] = pdb_bf16_to_f32(pdb_f32_to_bf16((float)(f->mean + f->std * rad * cos(2 * M_PI * u2))));
            if (i + 1 < f->n) f->f[i + 1] = pdb_bf16_to_f32(pdb_f32_to_bf16((float)(f->mean + f->std * rad * sin(2 * M_PI * u2))));
        }
        return;
    }
    for (int64_t i = i0; i < i1; i += 2) {
        double u1 = mm_uniform(&r), u2 = mm_uniform(&r), rad = sqrt(-2 * log(u1));
        f->b[i] = pdb_f32_to_bf16((float)(f->mean + f->std * rad * cos(2 * M_PI * u2)));
        if (i + 1 < f->n) f->b[i + 1] = pdb_f32_to_bf16((float)(f->mean + f->std * rad * sin(2 * M_PI * u2)));
    }
}

/* ---- format deepseek: tensors generated while the file is written ------------------------- */

static void mm_count(pdb_make_ctx *x, uint64_t bytes) {
    x->bytes += bytes;
    if (x->bytes >= x->next_report) { /* progress for the big presets (v2-lite, v4-flash) */
        if (x->next_report) PDB_INFO("make-model: %.1f GB of weights generated", x->bytes / 1e9);
        x->next_report = x->bytes + (1ull << 30);
    }
}

/* One fill tensor: its stream, its format (KEEP: bf16) and, for the scale companion, sc = 1. */
typedef struct mm_lazy {
    pdb_make_ctx *x;
    int64_t rows, cols, n;
    uint64_t s0;
    double mean, std;
    pdb_arch_quant k;
    int sc;
} mm_lazy;

/* Quantizing bands on the pool: FP8 128 rows (one row of blocks) per task, FP4 64 rows per task;
 * each band alone, so the bytes do not depend on the thread count. */
typedef struct { const float *f; uint8_t *q, *sc; int64_t R, C; pdb_arch_quant k; } mm_quant;
static void mm_quant_task(void *vc, int64_t task, int thread) {
    const mm_quant *t = vc;
    int64_t C = t->C;
    if (t->k == PDB_ARCH_Q_MXFP8) {
        int64_t r0 = task * 128, nr = r0 + 128 < t->R ? 128 : t->R - r0;
        pdb_quant_fp8_block128(t->f + r0 * C, nr, C, t->q + r0 * C, t->sc + task * ((C + 127) / 128));
        return;
    }
    int64_t r1 = (task + 1) * 64 < t->R ? (task + 1) * 64 : t->R;
    for (int64_t r = task * 64; r < r1; r++) pdb_quant_fp4_row32(t->f + r * C, C, t->q + r * C / 2, t->sc + r * C / 32);
}

static pdb_status mm_lazy_fill(void *vc, void *dst, uint64_t nbytes) {
    mm_lazy *z = vc;
    pdb_make_ctx *x = z->x;
    mm_count(x, nbytes);
    if (z->sc) { /* the companion of the weight written just before */
        if (!x->pending || x->pending_bytes != nbytes) return pdb_err_set(PDB_INVALID, "make-model: scale written out of order");
        memcpy(dst, x->pending, nbytes);
        free(x->pending);
        x->pending = NULL;
        return PDB_OK;
    }
    if (z->k == PDB_ARCH_Q_KEEP) {
        mm_fill f = {dst, NULL, z->n, z->s0, z->mean, z->std};
        pdb_pool_run(x->pool, (z->n + MM_CHUNK - 1) / MM_CHUNK, mm_fill_task, &f);
        return PDB_OK;
    }
    float *v = malloc(sizeof(float) * (size_t)z->n);
    uint64_t sb = z->k == PDB_ARCH_Q_MXFP8 ? (uint64_t)(((z->rows + 127) / 128) * ((z->cols + 127) / 128))
                                            : (uint64_t)(z->rows * z->cols / 32);
    free(x->pending);
    x->pending = malloc((size_t)sb);
    x->pending_bytes = sb;
    if (!v || !x->pending) { free(v); return pdb_err_set(PDB_NOMEM, "make-model: out of memory for %lld values", (long long)z->n); }
    mm_fill f = {NULL, v, z->n, z->s0, z->mean, z->std};
    pdb_pool_run(x->pool, (z->n + MM_CHUNK - 1) / MM_CHUNK, mm_fill_task, &f);
    mm_quant q = {v, dst, x->pending, z->rows, z->cols, z->k};
    pdb_pool_run(x->pool, z->k == PDB_ARCH_Q_MXFP8 ? (z->rows + 127) / 128 : (z->rows + 63) / 64, mm_quant_task, &q);
    free(v);
    return PDB_OK;
}

static pdb_status mm_lazy_add(pdb_make_ctx *x, const char *name, pdb_dtype dt, int ndim, const int64_t *shape, mm_lazy z) {
    mm_lazy *p = malloc(sizeof *p);
    if (pdb_ptrs_push(&x->bufs, p)) return pdb_err_set(PDB_NOMEM, "make-model: tensor %s", name);
    *p = z;
    p->x = x;
    return pdb_st_writer_add_fill(x->w, name, dt, ndim, shape, mm_lazy_fill, p);
}


pdb_status pdb_make_model_normal(pdb_make_ctx *x, const char *name, int64_t d0, int64_t d1, double mean, double std) {
    int64_t n = d0 * (d1 ? d1 : 1);
    if (x->deepseek) {
        int64_t shape[2] = {d0, d1};
        return mm_lazy_add(x, name, PDB_DT_BF16, d1 ? 2 : 1, shape,
                           (mm_lazy){.rows = d0, .cols = d1, .n = n, .s0 = mm_hash(name, x->seed), .mean = mean, .std = std});
    }
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)n);
    if (pdb_ptrs_push(&x->bufs, b)) return pdb_err_set(PDB_NOMEM, "make-model: tensor %s", name);
    mm_fill f = {b, NULL, n, mm_hash(name, x->seed), mean, std};
    pdb_pool_run(x->pool, (n + MM_CHUNK - 1) / MM_CHUNK, mm_fill_task, &f);
    mm_count(x, (uint64_t)n * 2);
    int64_t shape[2] = {d0, d1};
    return pdb_st_writer_add(x->w, name, PDB_DT_BF16, d1 ? 2 : 1, shape, b);
}

pdb_status pdb_make_model_linear(pdb_make_ctx *x, const char *name, int64_t out, int64_t in) {
    size_t nl = strlen(name);
    pdb_arch_quant k = x->deepseek && in % 32 == 0 && nl > 7 && !strcmp(name + nl - 7, ".weight") ? x->arch->quant_kind(name)
                                                                                                   : PDB_ARCH_Q_KEEP;
    if (k == PDB_ARCH_Q_KEEP) return pdb_make_model_normal(x, name, out, in, 0, 1.0 / sqrt((double)in));
    /* DeepSeek's layout: the weight, then "<name minus .weight>.scale" (e8m0) */
    char sname[PDB_NAMES_MAX_LEN + 16];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(nl - 7), name);
    int fp4 = k == PDB_ARCH_Q_MXFP4;
    int64_t ws[2] = {out, fp4 ? in / 2 : in}, ss[2] = {fp4 ? out : (out + 127) / 128, fp4 ? in / 32 : (in + 127) / 128};
    mm_lazy z = {.rows = out, .cols = in, .n = out * in, .s0 = mm_hash(name, x->seed), .std = 1.0 / sqrt((double)in), .k = k};
    PDB_TRY(mm_lazy_add(x, name, fp4 ? PDB_DT_I8 : PDB_DT_F8_E4M3, 2, ws, z));
    return mm_lazy_add(x, sname, PDB_DT_F8_E8M0, 2, ss, (mm_lazy){.sc = 1});
}
pdb_status pdb_make_model_norm(pdb_make_ctx *x, const char *name, int64_t n) { return pdb_make_model_normal(x, name, n, 0, 1.0, 0.05); }

/* tid2eid [V, K] from stream s0: K distinct experts per token (partial Fisher-Yates). */
static int picks_fill(uint64_t s0, int64_t V, int64_t K, int64_t E, int64_t *b64, int32_t *b32) {
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)(E > 0 ? E : 1));
    if (!perm || K > E) { free(perm); return -1; }
    mm_rng r = {s0};
    for (int64_t v = 0; v < V; v++) {
        for (int64_t e = 0; e < E; e++) perm[e] = e;
        for (int64_t k = 0; k < K; k++) {
            int64_t j = k + (int64_t)(mm_next(&r) % (uint64_t)(E - k)), t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
            if (b64) b64[v * K + k] = perm[k];
            else b32[v * K + k] = (int32_t)perm[k];
        }
    }
    free(perm);
    return 0;
}

pdb_status pdb_make_model_picks(pdb_make_ctx *x, const char *name, int64_t V, int64_t K, int64_t E) {
    int64_t *b = malloc(sizeof(int64_t) * (size_t)(V * K));
    if (pdb_ptrs_push(&x->bufs, b) || picks_fill(mm_hash(name, x->seed), V, K, E, b, NULL)) /* b is the list's either way */
        return pdb_err_set(PDB_NOMEM, "make-model: tensor %s", name);
    int64_t shape[2] = {V, K};
    return pdb_st_writer_add(x->w, name, PDB_DT_I64, 2, shape, b);
}

uint64_t pdb_make_model_stream(const char *name, uint64_t seed) { return mm_hash(name, seed); }

pdb_status pdb_make_model_picks_fill(uint64_t s0, int64_t V, int64_t K, int64_t E, int32_t *out) {
    if (picks_fill(s0, V, K, E, NULL, out)) return pdb_err_set(PDB_NOMEM, "make-model: picks of %lld tokens", (long long)V);
    return PDB_OK;
}

pdb_status pdb_make_model_write(const pdb_make_model_opts *o) {
    if (o->format && strcmp(o->format, "bf16") && strcmp(o->format, "deepseek"))
        return pdb_err_set(PDB_INVALID, "make-model: --format '%s' is not a format (bf16, deepseek)", o->format);
    pdb_config c;
    const pdb_arch_def *a;
    PDB_TRY(pdb_make_model_preset(o->arch ? o->arch : "deepseek_v2", o->preset ? o->preset : "tiny", &c));
    PDB_TRY(pdb_arch_of(&c, &a));
    if (o->layers > 0) PDB_TRY(a->make_layers(&c, o->layers));
    if (o->experts > 0) { c.n_routed_experts = o->experts; if (c.num_experts_per_tok > o->experts) c.num_experts_per_tok = o->experts; }
    if (o->vocab > 0) c.vocab_size = o->vocab;
    if (o->hidden > 0) c.hidden_size = o->hidden;
    if (c.bos_token_id >= c.vocab_size) c.bos_token_id = 0;
    if (c.eos_token_id >= c.vocab_size) c.eos_token_id = c.vocab_size > 1 ? 1 : 0;
    /* round-trip through the parser so that what we write is what we accept */
    char *json = NULL;
    PDB_TRY(pdb_config_to_json(&c, &json));
    pdb_config check;
    pdb_status s = pdb_config_parse(json, "make-model config", &check);
    if (s) { free(json); return s; }
    if ((s = pdb_file_mkdirs(o->out_dir))) {
        free(json);
        return pdb_err_wrap(s, "make-model");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", o->out_dir);
    FILE *f = fopen(path, "wb");
    if (!f) { free(json); return pdb_err_set(PDB_IO, "make-model: cannot create %s: %s", path, strerror(errno)); }
    int bad = fputs(json, f) < 0 || fputc('\n', f) < 0;
    bad |= fclose(f) != 0;
    free(json);
    if (bad) return pdb_err_set(PDB_IO, "make-model: writing %s failed", path);

    pdb_make_ctx x = {0};
    x.seed = o->seed;
    x.arch = a;
    x.deepseek = o->format && !strcmp(o->format, "deepseek");
    if ((s = pdb_pool_create(0, &x.pool))) return s; /* the values are the same on any number of threads */
    if ((s = pdb_st_writer_init(&x.w))) { pdb_pool_destroy(x.pool); return s; }
    char seedbuf[32];
    snprintf(seedbuf, sizeof seedbuf, "%llu", (unsigned long long)o->seed);
    if (!(s = pdb_st_writer_meta(x.w, "format", "pt")) && !(s = pdb_st_writer_meta(x.w, "pdbridge_seed", seedbuf)) &&
        !(s = pdb_st_writer_meta(x.w, "pdbridge_preset", o->preset ? o->preset : "tiny")) &&
        !(s = x.deepseek ? pdb_st_writer_meta(x.w, "pdbridge_format", "deepseek") : PDB_OK) &&
        !(s = a->make_tensors(&x, &c))) {
        snprintf(path, sizeof path, "%s/model.safetensors", o->out_dir);
        s = pdb_st_writer_finish(x.w, path);
    }
    pdb_st_writer_free(x.w);
    pdb_pool_destroy(x.pool);
    pdb_ptrs_free(&x.bufs);
    free(x.pending);
    if (s) return s;
    if (o->tokenizer && c.vocab_size >= 129280) {
        snprintf(path, sizeof path, "%s/tokenizer.json", o->out_dir);
        pdb_status cs = pdb_file_copy(o->tokenizer, path);
        if (cs) return pdb_err_wrap(cs, "make-model: tokenizer");
    }
    return PDB_OK;
}
