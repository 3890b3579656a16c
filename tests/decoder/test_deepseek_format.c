/* test_deepseek_format: DeepSeek's own checkpoint layout end to end (make-model --format deepseek,
 * docs/formats/deepseek.md), on the tiny presets of deepseek_v4 and deepseek_v2. Checks:
 * (1) every FP8 / FP4 weight holds the bf16 checkpoint's values (same seed) rounded per block by
 *     pdb_quant_fp8_block128 / pdb_quant_fp4_row32, byte for byte, and each nonzero block's scale
 *     is the smallest power of two that fits (max |code| in [fmax/2, fmax]);
 * (2) quantize --scheme mx converts it without loss: each such weight becomes MX with the same
 *     codes, and pdb_st_load_f32 of the source equals pdb_st_load_f32 (the decoder's exact MX
 *     dequantization) of the output bit for bit;
 * (3) the reference forward gives bit-identical logits on the deepseek-layout checkpoint and on
 *     an f32 copy holding the same dequantized numbers;
 * (4) the decoder on `quantize --scheme mx` of the deepseek-layout checkpoint and the decoder on
 *     `--scheme none` of the f32 copy give bit-identical logits (both load their weights as the
 *     same numbers);
 * (5) DeepSeek-V4 served directly: the V4 loader holds the deepseek layout as stored (FP8 128x128
 *     as MXFP8 viewing the checkpoint's codes, FP4 experts as MXFP4 viewing its bytes; bytes held
 *     under a third of the f32 copy's), and the decoder opened on the deepseek directory itself
 *     gives the f32 copy's logits bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pdb_arch.h"
#include "pdb_dec_model.h"
#include "pdb_file.h"
#include "pdb_make_model.h"
#include "pdb_quantize.h"
#include "pdb_safetensors.h"
#include "pdb_test_util.h"
#include "pdb_v4.h"

enum { NA = 2, T = 45 };
typedef struct fx { const char *arch; uint64_t seed; char bf[512], ds[512], f32[512], dsmx[512], f32none[512]; } fx;
static fx F[NA] = {{.arch = "deepseek_v4", .seed = 9}, {.arch = "deepseek_v2", .seed = 4}};
static char *root;

static int ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* A weight in DeepSeek's layout: FP8 e4m3 with a 128x128 e8m0 scale, or FP4 I8 with a per-32 one. */
static int ds_weight(const pdb_st *st, const pdb_tensor_view *t, const pdb_tensor_view **sc, int *fp4) {
    if (t->ndim != 2 || !ends(t->name, ".weight") || (t->dtype != PDB_DT_F8_E4M3 && t->dtype != PDB_DT_I8)) return 0;
    char sn[400];
    snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(t->name) - 7), t->name);
    *sc = pdb_st_find(st, sn);
    *fp4 = t->dtype == PDB_DT_I8;
    assert_non_null(*sc);
    assert_int_equal((*sc)->dtype, PDB_DT_F8_E8M0);
    return 1;
}

/* The same numbers as f32: every float tensor dequantized (companions dropped), the rest as is. */
static void write_f32_copy(const char *src, const char *dir) {
    PDB_TEST_OK(pdb_file_mkdirs(dir));
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dir);
    PDB_TEST_OK(pdb_file_copy(a, b));
    pdb_st *in;
    PDB_TEST_OK(pdb_st_open(src, &in));
    pdb_st_writer *w;
    PDB_TEST_OK(pdb_st_writer_init(&w));
    int64_t n = pdb_st_count(in), nk = 0;
    void **keep = calloc((size_t)n, sizeof(void *));
    for (int64_t i = 0; i < n; i++) {
        const pdb_tensor_view *t = pdb_st_at(in, i), *sc;
        int fp4;
        if (ends(t->name, ".scale")) continue;
        int64_t shape[PDB_ST_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        int isw = ds_weight(in, t, &sc, &fp4);
        if (isw && fp4) shape[1] *= 2;
        if (!isw && t->dtype != PDB_DT_BF16 && t->dtype != PDB_DT_F32) {
            PDB_TEST_OK(pdb_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data));
            continue;
        }
        float *f = NULL;
        PDB_TEST_OK(pdb_st_load_f32(in, t->name, t->ndim, shape, &f));
        keep[nk++] = f;
        PDB_TEST_OK(pdb_st_writer_add(w, t->name, PDB_DT_F32, t->ndim, shape, f));
    }
    snprintf(b, sizeof b, "%s/model.safetensors", dir);
    PDB_TEST_OK(pdb_st_writer_finish(w, b));
    pdb_st_writer_free(w);
    for (int64_t i = 0; i < nk; i++) free(keep[i]);
    free(keep);
    pdb_st_close(in);
}

static int setup(void **st) {
    root = pdb_test_tmpdir("dsfmt");
    for (int k = 0; k < NA; k++) {
        fx *x = &F[k];
        snprintf(x->bf, sizeof x->bf, "%s/%s-bf16", root, x->arch);
        snprintf(x->ds, sizeof x->ds, "%s/%s-ds", root, x->arch);
        snprintf(x->f32, sizeof x->f32, "%s/%s-f32", root, x->arch);
        snprintf(x->dsmx, sizeof x->dsmx, "%s/%s-ds-mx", root, x->arch);
        snprintf(x->f32none, sizeof x->f32none, "%s/%s-f32-none", root, x->arch);
        pdb_make_model_opts o = {.arch = x->arch, .preset = "tiny", .seed = x->seed, .out_dir = x->bf};
        pdb_make_model_opts d = o;
        d.out_dir = x->ds;
        d.format = "deepseek";
        if (pdb_make_model_write(&o) || pdb_make_model_write(&d)) { fprintf(stderr, "%s\n", pdb_err_msg()); return -1; }
        write_f32_copy(x->ds, x->f32);
        if (pdb_quantize_model(x->ds, x->dsmx, "mx", 0) || pdb_quantize_model(x->f32, x->f32none, "none", 0)) {
            fprintf(stderr, "%s\n", pdb_err_msg());
            return -1;
        }
    }
    pdb_make_model_opts bad = {.arch = "deepseek_v4", .preset = "tiny", .out_dir = root, .format = "fp3"};
    if (pdb_make_model_write(&bad) != PDB_INVALID || !strstr(pdb_err_msg(), "fp3")) return -1;
    return 0;
}

static int teardown(void **st) {
    pdb_test_rmrf(root);
    free(root);
    return 0;
}

/* (1) the bf16 checkpoint's values rounded per block, the fitting scale. */
static void test_rounding(void **st) {
    for (int k = 0; k < NA; k++) {
        pdb_st *ds, *bf;
        PDB_TEST_OK(pdb_st_open(F[k].ds, &ds));
        PDB_TEST_OK(pdb_st_open(F[k].bf, &bf));
        int n8 = 0, n4 = 0;
        for (int64_t i = 0; i < pdb_st_count(ds); i++) {
            const pdb_tensor_view *t = pdb_st_at(ds, i), *sc;
            int fp4;
            if (!ds_weight(ds, t, &sc, &fp4)) {
                if (ends(t->name, ".scale")) continue;
                const pdb_tensor_view *b = pdb_st_find(bf, t->name); /* every other tensor as in the bf16 checkpoint */
                assert_non_null(b);
                assert_int_equal(b->nbytes, t->nbytes);
                assert_memory_equal(b->data, t->data, t->nbytes);
                continue;
            }
            int64_t R = t->shape[0], C = fp4 ? 2 * t->shape[1] : t->shape[1];
            float *f = NULL;
            PDB_TEST_OK(pdb_st_load_f32(bf, t->name, 2, (int64_t[]){R, C}, &f));
            uint8_t *q = malloc((size_t)t->nbytes), *s = malloc((size_t)sc->nbytes);
            if (fp4) for (int64_t r = 0; r < R; r++) pdb_quant_fp4_row32(f + r * C, C, q + r * C / 2, s + r * C / 32);
            else pdb_quant_fp8_block128(f, R, C, q, s);
            assert_memory_equal(q, t->data, t->nbytes);
            assert_memory_equal(s, sc->data, sc->nbytes);
            /* smallest fitting power of two: each block's largest |code| lies in [fmax/2, fmax] */
            const uint8_t *c = t->data;
            float fmax = fp4 ? 6.0f : 448.0f;
            int64_t bh = fp4 ? 1 : 128, bw = fp4 ? 32 : 128;
            for (int64_t r0 = 0; r0 < R; r0 += bh)
                for (int64_t c0 = 0; c0 < C; c0 += bw) {
                    float m = 0;
                    for (int64_t r = r0; r < r0 + bh && r < R; r++)
                        for (int64_t j = c0; j < c0 + bw && j < C; j++) {
                            float v = fp4 ? pdb_e2m1_to_f32(j % 2 ? c[(r * C + j) / 2] >> 4 : c[(r * C + j) / 2] & 15)
                                          : pdb_e4m3_to_f32(c[r * C + j]);
                            m = fmaxf(m, fabsf(v));
                        }
                    if (m < fmax / 2 || m > fmax) fail_msg("%s: block (%lld, %lld): max |code| %g", t->name, (long long)r0, (long long)c0, m);
                }
            fp4 ? n4++ : n8++;
            free(f);
            free(q);
            free(s);
        }
        assert_true(n8 > 0);
        assert_true(n4 > 0);
        printf("  [%s] %d FP8 and %d FP4 weights = the bf16 checkpoint's values rounded per block; the rest byte-identical\n",
               F[k].arch, n8, n4);
        pdb_st_close(ds);
        pdb_st_close(bf);
    }
}

/* (2) quantize --scheme mx: the same codes, the same f32 numbers, bit for bit. */
static void test_lossless_quantize(void **st) {
    for (int k = 0; k < NA; k++) {
        pdb_st *ds, *mx;
        PDB_TEST_OK(pdb_st_open(F[k].ds, &ds));
        PDB_TEST_OK(pdb_st_open(F[k].dsmx, &mx));
        int nw = 0;
        for (int64_t i = 0; i < pdb_st_count(ds); i++) {
            const pdb_tensor_view *t = pdb_st_at(ds, i), *sc, *q, *ms;
            int fp4, mfp4;
            if (!ds_weight(ds, t, &sc, &fp4)) continue;
            int64_t R = t->shape[0], C = fp4 ? 2 * t->shape[1] : t->shape[1];
            PDB_TEST_OK(pdb_st_get_mx(mx, t->name, R, C, &q, &ms, &mfp4));
            assert_non_null(q);
            assert_int_equal(mfp4, fp4);
            assert_int_equal(q->dtype, fp4 ? PDB_DT_U8 : PDB_DT_F8_E4M3);
            assert_memory_equal(q->data, t->data, t->nbytes); /* the codes copied (same nibble order) */
            float *a = NULL, *b = NULL;
            PDB_TEST_OK(pdb_st_load_f32(ds, t->name, 2, (int64_t[]){R, C}, &a));
            PDB_TEST_OK(pdb_st_load_f32(mx, t->name, 2, (int64_t[]){R, C}, &b));
            assert_memory_equal(a, b, sizeof(float) * (size_t)(R * C));
            free(a);
            free(b);
            nw++;
        }
        assert_true(nw > 0);
        printf("  [%s] quantize --scheme mx: %d FP8/FP4 weights converted with the same codes and bit-identical values\n",
               F[k].arch, nw);
        pdb_st_close(ds);
        pdb_st_close(mx);
    }
}

/* (3) the reference forward: deepseek layout = the same numbers in f32. */
static void test_reference_forward(void **st) {
    for (int k = 0; k < NA; k++) {
        const pdb_arch_def *a = pdb_arch_find(F[k].arch);
        pdb_config c;
        PDB_TEST_OK(pdb_config_load(F[k].ds, &c));
        int64_t V = c.vocab_size;
        int32_t ids[T];
        pdb_test_ids(ids, T, (int)V, 7);
        float *l0 = malloc(sizeof(float) * (size_t)(T * V)), *l1 = malloc(sizeof(float) * (size_t)(T * V));
        void *r0, *r1;
        PDB_TEST_OK(a->ref_open(F[k].ds, 0, T, &r0));
        PDB_TEST_OK(a->ref_open(F[k].f32, 0, T, &r1));
        PDB_TEST_OK(a->ref_forward(r0, ids, T, l0));
        PDB_TEST_OK(a->ref_forward(r1, ids, T, l1));
        assert_memory_equal(l0, l1, sizeof(float) * (size_t)(T * V));
        printf("  [%s] reference forward: %d positions' logits identical on the deepseek layout and its f32 copy\n", F[k].arch, T);
        a->ref_close(r0);
        a->ref_close(r1);
        free(l0);
        free(l1);
    }
}

/* The decoders of dir_a and dir_b give bit-identical last-position logits after one forward over
 * T seeded ids (seed). */
static void decoders_agree(const char *dir_a, const char *dir_b, uint32_t seed) {
    pdb_dec_model *m[2];
    PDB_TEST_OK(pdb_dec_model_open(dir_a, NULL, &m[0]));
    PDB_TEST_OK(pdb_dec_model_open(dir_b, NULL, &m[1]));
    int64_t V = pdb_dec_model_config(m[0])->vocab_size;
    int32_t ids[T];
    pdb_test_ids(ids, T, (int)V, seed);
    float *l[2];
    for (int j = 0; j < 2; j++) {
        l[j] = malloc(sizeof(float) * (size_t)V);
        pdb_dec_seq s;
        PDB_TEST_OK(pdb_dec_seq_init(&s, m[j], T));
        pdb_dec_seg sg = {&s, ids, T, l[j]};
        PDB_TEST_OK(pdb_dec_forward(m[j], &sg, 1));
        pdb_dec_seq_free(&s);
    }
    assert_memory_equal(l[0], l[1], sizeof(float) * (size_t)V);
    for (int j = 0; j < 2; j++) {
        free(l[j]);
        pdb_dec_model_close(m[j]);
    }
}

/* (4) the decoder: quantize mx of the deepseek layout = scheme none of the f32 copy. */
static void test_decoder(void **st) {
    for (int k = 0; k < NA; k++) {
        decoders_agree(F[k].dsmx, F[k].f32none, 11);
        printf("  [%s] decoder: quantize mx of the deepseek layout and scheme none of its f32 copy give identical logits\n",
               F[k].arch);
    }
}

/* (5) V4 on the deepseek layout as stored, and the decoder serving it directly. */
static void test_v4_served_directly(void **st) {
    const fx *f = &F[0];
    assert_string_equal(f->arch, "deepseek_v4");
    pdb_v4_model *ds, *fl;
    PDB_TEST_OK(pdb_v4_load(f->ds, &ds));
    PDB_TEST_OK(pdb_v4_load(f->f32, &fl));
    const pdb_st *rd = ds->own_st; /* the checkpoint pdb_v4_load keeps open for its views */
    assert_non_null(rd);
    const pdb_tensor_view *wq = pdb_st_find(rd, "layers.0.attn.wq_a.weight");
    if (!wq) wq = pdb_st_find(rd, "model.layers.0.attn.wq_a.weight");
    assert_non_null(wq);
    assert_int_equal(wq->dtype, PDB_DT_F8_E4M3);
    const pdb_v4_layer *L0 = &ds->layers[0];
    assert_int_equal(L0->wq_a.fmt, PDB_QF_MXFP8);
    assert_ptr_equal(L0->wq_a.data, wq->data); /* the codes viewed in place, not copied */
    assert_int_equal(L0->w1[0].fmt, PDB_QF_MXFP4);
    assert_int_equal(fl->layers[0].wq_a.fmt, PDB_QF_F32);
    printf("  [deepseek_v4] loader on the deepseek layout: %lld bytes of weights held (f32 copy: %lld)\n",
           (long long)pdb_v4_model_bytes(ds), (long long)pdb_v4_model_bytes(fl));
    assert_true(pdb_v4_model_bytes(ds) * 3 < pdb_v4_model_bytes(fl));
    pdb_v4_free(ds);
    pdb_v4_free(fl);
    decoders_agree(f->ds, f->f32, 13);
    printf("  [deepseek_v4] decoder serving the deepseek layout directly = the decoder on its f32 copy, bit for bit\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding), cmocka_unit_test(test_lossless_quantize),
        cmocka_unit_test(test_reference_forward), cmocka_unit_test(test_decoder),
        cmocka_unit_test(test_v4_served_directly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
