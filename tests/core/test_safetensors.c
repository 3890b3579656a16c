/* test_safetensors: writer -> reader round trips (every dtype, sharded directories, FP8
 * companions) and one test per malformed input, each asserting the exact status and that
 * the message names the file and tensor at fault. Invariant: every test works in its own
 * mkdtemp directory under /tmp, removed by the teardown. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pdb_mem.h"
#include "pdb_safetensors.h"

typedef struct fixture {
    char dir[64];
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    strcpy(fx->dir, "/tmp/pdb_test_st_XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", fx->dir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(fx->dir);
    free(fx);
    return 0;
}

static char *fx_path(void **state, const char *name) {
    static char buf[4][512];
    static int k;
    fixture *fx = *state;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", fx->dir, name);
    return p;
}

/* A file with the given header text (unpadded) followed by data_len bytes of data. */
static void write_raw(const char *path, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = strlen(header);
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(fwrite(lenb, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, n, f), n);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xFF), f);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* Open must fail with `want`, mapped and resident alike; the message must contain each of the
 * given substrings. */
static void expect_open_fail(const char *path, pdb_status want, const char *s1, const char *s2) {
    for (int flags = 0; flags <= PDB_ST_RESIDENT; flags += PDB_ST_RESIDENT) {
        pdb_st *st = NULL;
        pdb_err_clear();
        pdb_status rc = pdb_st_open_flags(path, flags, &st);
        if (rc != want)
            fail_msg("open %s (flags %d): want %s got %s (%s)", path, flags, pdb_status_str(want), pdb_status_str(rc), pdb_err_msg());
        assert_null(st);
        if (s1 && !strstr(pdb_err_msg(), s1)) fail_msg("message '%s' lacks '%s'", pdb_err_msg(), s1);
        if (s2 && !strstr(pdb_err_msg(), s2)) fail_msg("message '%s' lacks '%s'", pdb_err_msg(), s2);
    }
}

static int count_dir_entries(void **state) {
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- round trips ------------------------------------------------------------------------------ */

static void test_roundtrip_all_dtypes(void **state) {
    const char *path = fx_path(state, "model.safetensors");
    float f32[6] = {1, -2, 3.5f, 0, 1e-20f, -7};
    uint16_t bf16[4] = {0x3F80, 0xC000, 0x7F80, 0x0001};
    uint16_t f16[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
    uint8_t e4m3[15], e8m0[7] = {127, 128, 0, 254, 1, 126, 130}, u8[3] = {1, 2, 255};
    int8_t i8[5] = {-128, -1, 0, 1, 127};
    int32_t i32[2] = {-5, 1 << 30};
    int64_t i64[3] = {-1, INT64_MAX, 42};
    double f64[2] = {0.25, -1e300};
    float scalar = 9.5f;
    for (int i = 0; i < 15; i++) e4m3[i] = (uint8_t)(i * 17);
    struct {
        const char *name;
        pdb_dtype dt;
        int ndim;
        int64_t shape[3];
        const void *data;
        size_t nbytes;
    } t[] = {
        {"a.f32", PDB_DT_F32, 2, {2, 3}, f32, sizeof f32},
        {"u8", PDB_DT_U8, 1, {3}, u8, 3}, /* odd size: later tensors are unaligned */
        {"b.bf16", PDB_DT_BF16, 1, {4}, bf16, sizeof bf16},
        {"c.f16", PDB_DT_F16, 2, {2, 2}, f16, sizeof f16},
        {"d.e4m3", PDB_DT_F8_E4M3, 2, {3, 5}, e4m3, sizeof e4m3},
        {"e.e8m0", PDB_DT_F8_E8M0, 1, {7}, e8m0, sizeof e8m0},
        {"i8", PDB_DT_I8, 1, {5}, i8, sizeof i8},
        {"i32", PDB_DT_I32, 1, {2}, i32, sizeof i32},
        {"i64", PDB_DT_I64, 1, {3}, i64, sizeof i64},
        {"f64", PDB_DT_F64, 1, {2}, f64, sizeof f64},
        {"scalar", PDB_DT_F32, 0, {0}, &scalar, 4},
        {"empty", PDB_DT_BF16, 3, {2, 0, 4}, NULL, 0},
    };
    size_t nt = sizeof t / sizeof t[0];
    pdb_st_writer *w;
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    assert_int_equal(pdb_st_writer_meta(w, "format", "pt"), PDB_OK);
    assert_int_equal(pdb_st_writer_meta(w, "note", "quote\" and \\ and \xc3\xa9"), PDB_OK);
    for (size_t i = 0; i < nt; i++)
        assert_int_equal(pdb_st_writer_add(w, t[i].name, t[i].dt, t[i].ndim, t[i].shape, t[i].data), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "a.f32", PDB_DT_F32, 1, (int64_t[]){1}, f32), PDB_INVALID);
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);
    assert_int_equal(count_dir_entries(state), 1); /* no temp file left behind */

    /* header length is a multiple of 8 and the JSON keeps insertion order */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t lenb[8];
    assert_int_equal(fread(lenb, 1, 8, f), 8);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    assert_int_equal(hlen % 8, 0);

    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    assert_int_equal(pdb_st_count(st), nt);
    assert_string_equal(pdb_st_meta(st, "format"), "pt");
    assert_string_equal(pdb_st_meta(st, "note"), "quote\" and \\ and \xc3\xa9");
    assert_null(pdb_st_meta(st, "absent"));
    for (size_t i = 0; i < nt; i++) {
        assert_string_equal(pdb_st_at(st, (int64_t)i)->name, t[i].name);
        const pdb_tensor_view *v = pdb_st_find(st, t[i].name);
        assert_non_null(v);
        assert_int_equal(v->dtype, t[i].dt);
        assert_int_equal(v->ndim, t[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            assert_int_equal(v->shape[d], t[i].shape[d]);
            numel *= t[i].shape[d];
        }
        assert_int_equal(v->numel, numel);
        assert_int_equal(v->nbytes, t[i].nbytes);
        if (t[i].nbytes) assert_memory_equal(v->data, t[i].data, t[i].nbytes);
        assert_string_equal(v->file, path);
    }
    assert_null(pdb_st_at(st, (int64_t)nt));
    assert_null(pdb_st_at(st, -1));

    /* pdb_st_load_f32 over the float dtypes */
    float *out;
    assert_int_equal(pdb_st_load_f32(st, "a.f32", 2, (int64_t[]){2, -1}, &out), PDB_OK);
    assert_memory_equal(out, f32, sizeof f32);
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "b.bf16", 1, (int64_t[]){4}, &out), PDB_OK);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && isinf(out[2]) && out[3] == pdb_bf16_to_f32(1));
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "c.f16", 2, (int64_t[]){2, 2}, &out), PDB_OK);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f && out[3] == 0x1p-24f);
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "f64", 1, (int64_t[]){2}, &out), PDB_OK);
    assert_true(out[0] == 0.25f && isinf(out[1]));
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "d.e4m3", 2, (int64_t[]){3, 5}, &out), PDB_OK); /* no scale: plain */
    for (int i = 0; i < 15; i++) assert_true(out[i] == pdb_e4m3_to_f32(e4m3[i]) || isnan(out[i]));
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "empty", 3, (int64_t[]){2, 0, 4}, &out), PDB_OK);
    free(out);
    assert_int_equal(pdb_st_load_f32(st, "i32", 1, (int64_t[]){2}, &out), PDB_UNSUPPORTED);
    assert_null(out);
    assert_non_null(strstr(pdb_err_msg(), "i32"));
    pdb_st_close(st);

    /* a directory holding model.safetensors opens too */
    fixture *fx = *state;
    assert_int_equal(pdb_st_open(fx->dir, &st), PDB_OK);
    assert_int_equal(pdb_st_count(st), nt);
    pdb_st_close(st);
}

static void test_fp8_companions(void **state) {
    const char *path = fx_path(state, "fp8.safetensors");
    enum { R = 200, C = 300 };
    uint8_t *w8 = malloc(R * C);
    assert_non_null(w8);
    for (int i = 0; i < R * C; i++) w8[i] = (uint8_t)((i * 37 + 11) % 0x7E);
    float sinv[2 * 3] = {0.5f, 2, 0.25f, 4, 8, 0.125f};
    uint16_t sinv_bf16[6];
    uint8_t sinv_e8m0[6];
    for (int i = 0; i < 6; i++) {
        sinv_bf16[i] = pdb_f32_to_bf16(sinv[i]);
        sinv_e8m0[i] = pdb_f32_to_e8m0(sinv[i]);
    }
    int64_t wshape[2] = {R, C}, sshape[2] = {2, 3}, bad[2] = {2, 2};
    int64_t w3shape[3] = {2, R / 2, C}, s3shape[3] = {2, 1, 3};
    float s3[6] = {1, 2, 3, 4, 5, 6};
    pdb_st_writer *w;
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    /* V2/V3 naming, f32 scales */
    assert_int_equal(pdb_st_writer_add(w, "model.layers.0.mlp.gate_proj.weight", PDB_DT_F8_E4M3, 2, wshape, w8), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "model.layers.0.mlp.gate_proj.weight_scale_inv", PDB_DT_F32, 2, sshape, sinv), PDB_OK);
    /* V4 naming, e8m0 scales */
    assert_int_equal(pdb_st_writer_add(w, "layers.1.ffn.w1.weight", PDB_DT_F8_E4M3, 2, wshape, w8), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "layers.1.ffn.w1.scale", PDB_DT_F8_E8M0, 2, sshape, sinv_e8m0), PDB_OK);
    /* bf16 scales */
    assert_int_equal(pdb_st_writer_add(w, "x.weight", PDB_DT_F8_E4M3, 2, wshape, w8), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "x.weight_scale_inv", PDB_DT_BF16, 2, sshape, sinv_bf16), PDB_OK);
    /* wrong scale shape */
    assert_int_equal(pdb_st_writer_add(w, "bad.weight", PDB_DT_F8_E4M3, 2, wshape, w8), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "bad.weight_scale_inv", PDB_DT_F32, 2, bad, sinv), PDB_OK);
    /* stacked experts [2, 100, 300] with scales [2, 1, 3] */
    assert_int_equal(pdb_st_writer_add(w, "experts.weight", PDB_DT_F8_E4M3, 3, w3shape, w8), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "experts.weight_scale_inv", PDB_DT_F32, 3, s3shape, s3), PDB_OK);
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);

    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    const char *names[3] = {"model.layers.0.mlp.gate_proj.weight", "layers.1.ffn.w1.weight", "x.weight"};
    for (int k = 0; k < 3; k++) {
        float *out;
        assert_int_equal(pdb_st_load_f32(st, names[k], 2, wshape, &out), PDB_OK);
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) {
                float want = pdb_e4m3_to_f32(w8[r * C + c]) * sinv[(r / 128) * 3 + c / 128];
                if (out[r * C + c] != want) fail_msg("%s [%d,%d]: %g != %g", names[k], r, c, out[r * C + c], want);
            }
        free(out);
    }
    float *out = NULL;
    assert_int_equal(pdb_st_load_f32(st, "experts.weight", 3, w3shape, &out), PDB_OK);
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < R / 2; r++)
            for (int c = 0; c < C; c++) {
                int64_t i = ((int64_t)e * (R / 2) + r) * C + c;
                assert_true(out[i] == pdb_e4m3_to_f32(w8[i]) * s3[e * 3 + c / 128]);
            }
    free(out);
    out = NULL;
    assert_int_equal(pdb_st_load_f32(st, "bad.weight", 2, wshape, &out), PDB_MISMATCH);
    assert_null(out);
    assert_non_null(strstr(pdb_err_msg(), "bad.weight_scale_inv"));
    assert_non_null(strstr(pdb_err_msg(), "[2,2]"));
    assert_non_null(strstr(pdb_err_msg(), "fp8.safetensors"));
    pdb_st_close(st);
    free(w8);
}

/* DeepSeek's FP4 experts: I8 (or U8) [R, C/2] packed e2m1 with a per-32 e8m0 companion under the
 * FP8 scale names; read as MXFP4 (pdb_st_get_mx) and dequantized exactly by pdb_st_load_f32. */
static void test_deepseek_fp4_experts(void **state) {
    const char *path = fx_path(state, "fp4.safetensors");
    enum { R = 3, C = 64 };
    uint8_t q[R * C / 2], sc[R * C / 32], sc_bad[R * 3];
    for (int i = 0; i < R * C / 2; i++) q[i] = (uint8_t)(i * 73 + 5);
    for (int i = 0; i < R * C / 32; i++) sc[i] = (uint8_t)(120 + i);
    memset(sc_bad, 127, sizeof sc_bad);
    int64_t qs[2] = {R, C / 2}, ss[2] = {R, C / 32}, bs[2] = {R, 3};
    pdb_st_writer *w;
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "layers.0.ffn.experts.0.w1.weight", PDB_DT_I8, 2, qs, q), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "layers.0.ffn.experts.0.w1.scale", PDB_DT_F8_E8M0, 2, ss, sc), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "e.weight", PDB_DT_U8, 2, qs, q), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "e.weight_scale_inv", PDB_DT_U8, 2, ss, sc), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "odd.weight", PDB_DT_I8, 2, qs, q), PDB_OK); /* scale grid not per-32 */
    assert_int_equal(pdb_st_writer_add(w, "odd.weight_scale_inv", PDB_DT_F8_E8M0, 2, bs, sc_bad), PDB_OK);
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);
    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    float want[R * C];
    for (int r = 0; r < R; r++) pdb_dequant_mxfp4_row(q + r * C / 2, sc + r * C / 32, C, want + r * C);
    const char *names[2] = {"layers.0.ffn.experts.0.w1.weight", "e.weight"};
    for (int k = 0; k < 2; k++) {
        const pdb_tensor_view *tq, *ts;
        int fp4 = 0;
        assert_int_equal(pdb_st_get_mx(st, names[k], R, C, &tq, &ts, &fp4), PDB_OK);
        assert_non_null(tq);
        assert_int_equal(fp4, 1);
        float *out = NULL;
        assert_int_equal(pdb_st_load_f32(st, names[k], 2, (int64_t[]){R, C}, &out), PDB_OK);
        assert_memory_equal(out, want, sizeof want);
        free(out);
    }
    const pdb_tensor_view *tq = (const pdb_tensor_view *)1, *ts;
    int fp4 = 0;
    assert_int_equal(pdb_st_get_mx(st, "odd.weight", -1, -1, &tq, &ts, &fp4), PDB_OK);
    assert_null(tq); /* not an MX weight: an integer tensor, not loadable as floats */
    float *out = NULL;
    assert_int_equal(pdb_st_load_f32(st, "odd.weight", 2, qs, &out), PDB_UNSUPPORTED);
    assert_null(out);
    pdb_st_close(st);
}

static void write_shard(const char *path, const char *name1, const char *name2, float base, const char *meta) {
    pdb_st_writer *w;
    float v[4] = {base, base + 1, base + 2, base + 3};
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    if (meta) assert_int_equal(pdb_st_writer_meta(w, "format", meta), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, name1, PDB_DT_F32, 2, (int64_t[]){2, 2}, v), PDB_OK);
    if (name2) assert_int_equal(pdb_st_writer_add(w, name2, PDB_DT_F32, 1, (int64_t[]){4}, v), PDB_OK);
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);
}

/* Two shards and their index in the fixture's directory: embed.weight and layers.0.w (format
 * "first") in the first, head.weight (values from 10) in the second. */
static void write_two_shards(void **state) {
    write_shard(fx_path(state, "model-00001-of-00002.safetensors"), "embed.weight", "layers.0.w", 1, "first");
    write_shard(fx_path(state, "model-00002-of-00002.safetensors"), "head.weight", NULL, 10, "second");
    write_text(fx_path(state, "model.safetensors.index.json"),
               "{\"metadata\": {\"total_size\": 48},\n \"weight_map\": {\n"
               "  \"embed.weight\": \"model-00001-of-00002.safetensors\",\n"
               "  \"head.weight\": \"model-00002-of-00002.safetensors\",\n"
               "  \"layers.0.w\": \"model-00001-of-00002.safetensors\"}}\n");
}

static void test_sharded_directory(void **state) {
    fixture *fx = *state;
    write_two_shards(state);
    for (int k = 0; k < 2; k++) {
        pdb_st *st;
        const char *p = k == 0 ? fx->dir : fx_path(state, "model.safetensors.index.json");
        assert_int_equal(pdb_st_open(p, &st), PDB_OK);
        assert_int_equal(pdb_st_count(st), 3);
        const pdb_tensor_view *v;
        assert_int_equal(pdb_st_get(st, "head.weight", 2, (int64_t[]){2, 2}, &v), PDB_OK);
        assert_true(((const float *)v->data)[0] == 10.0f);
        assert_non_null(strstr(v->file, "model-00002-of-00002.safetensors"));
        assert_non_null(v = pdb_st_find(st, "layers.0.w"));
        assert_non_null(strstr(v->file, "model-00001-of-00002.safetensors"));
        assert_string_equal(pdb_st_meta(st, "format"), "first");
        float *out;
        assert_int_equal(pdb_st_load_f32(st, "embed.weight", 2, (int64_t[]){-1, -1}, &out), PDB_OK);
        assert_true(out[3] == 4.0f);
        free(out);
        pdb_st_close(st);
    }
}

/* PDB_ST_RESIDENT: the same tensors with the same bytes as the mapped reader, held in a copy */
static void test_resident_matches_mmap(void **state) {
    fixture *fx = *state;
    write_two_shards(state);
    pdb_st *m, *r;
    assert_int_equal(pdb_st_open(fx->dir, &m), PDB_OK);
    assert_int_equal(pdb_st_open_flags(fx->dir, PDB_ST_RESIDENT, &r), PDB_OK);
    assert_int_equal(pdb_st_count(r), pdb_st_count(m));
    for (int64_t i = 0; i < pdb_st_count(m); i++) {
        const pdb_tensor_view *a = pdb_st_at(m, i), *b = pdb_st_find(r, a->name);
        assert_non_null(b);
        assert_int_equal(b->nbytes, a->nbytes);
        assert_int_equal(b->dtype, a->dtype);
        assert_true(b->data != a->data);
        assert_memory_equal(b->data, a->data, a->nbytes);
        assert_string_equal(b->file, a->file);
    }
    assert_string_equal(pdb_st_meta(r, "format"), "first");
    pdb_st_close(m);
    pdb_st_close(r);
}

/* pdb_mem (the resident reader's memory): whole 2 MB units from a 2 MB boundary, zero-filled, writable */
static void test_mem_map(void **state) {
    (void)state;
    const size_t M = (size_t)2 << 20;
    assert_int_equal(pdb_mem_len(1), M);
    assert_int_equal(pdb_mem_len(M), M);
    assert_int_equal(pdb_mem_len(M + 1), 2 * M);
    for (int huge = 0; huge <= 1; huge++) {
        uint8_t *p = pdb_mem_map(M + 5, huge);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % M, 0);
        for (size_t i = 0; i < 2 * M; i += 4096) assert_int_equal(p[i], 0);
        p[0] = 1, p[2 * M - 1] = 2;
        assert_int_equal(p[0] + p[2 * M - 1], 3);
        pdb_mem_unmap(p, M + 5);
    }
}

/* the resident read leaves an eighth of the available memory and 1 GiB; unknown memory reads */
static void test_resident_fits(void **state) {
    (void)state;
    const uint64_t G = (uint64_t)1 << 30;
    assert_true(pdb_st_resident_fits(100 * G, 0));
    assert_true(pdb_st_resident_fits(10 * G, 16 * G));
    assert_true(pdb_st_resident_fits(13 * G, 16 * G));
    assert_false(pdb_st_resident_fits(13 * G + 1, 16 * G));
    assert_false(pdb_st_resident_fits(200 * G, 128 * G));
    assert_false(pdb_st_resident_fits(1, G));
    assert_true(pdb_st_resident_fits(1 << 20, 2 * G));
}

static void test_single_unnamed_file_in_dir(void **state) {
    fixture *fx = *state;
    pdb_st *st;
    write_shard(fx_path(state, "weights.safetensors"), "w", NULL, 0, NULL);
    assert_int_equal(pdb_st_open(fx->dir, &st), PDB_OK);
    assert_non_null(pdb_st_find(st, "w"));
    assert_null(pdb_st_meta(st, "format"));
    pdb_st_close(st);
    write_shard(fx_path(state, "other.safetensors"), "v", NULL, 0, NULL);
    expect_open_fail(fx->dir, PDB_INVALID, fx->dir, "2 *.safetensors");
}

static void test_many_tensors_lookup(void **state) {
    const char *path = fx_path(state, "many.safetensors");
    enum { N = 5000 };
    static uint16_t vals[N];
    pdb_st_writer *w;
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    char name[64];
    for (int i = 0; i < N; i++) {
        vals[i] = (uint16_t)i;
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.w%d.weight", i / 300, i % 300, i % 3);
        assert_int_equal(pdb_st_writer_add(w, name, PDB_DT_BF16, 1, (int64_t[]){1}, &vals[i]), PDB_OK);
    }
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);
    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    assert_int_equal(pdb_st_count(st), N);
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.w%d.weight", i / 300, i % 300, i % 3);
        const pdb_tensor_view *v = pdb_st_find(st, name);
        assert_non_null(v);
        uint16_t got;
        memcpy(&got, v->data, 2);
        assert_int_equal(got, i);
    }
    assert_null(pdb_st_find(st, "model.layers.0.mlp.experts.0.w0.bias"));
    pdb_st_close(st);
}

/* ---- malformed inputs ------------------------------------------------------------------------- */

static void test_truncated_file(void **state) {
    const char *path = fx_path(state, "trunc.safetensors");
    write_shard(path, "first", "last.weight", 0, NULL);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 4), 0);
    expect_open_fail(path, PDB_CORRUPT, "trunc.safetensors", "'last.weight'");
    assert_int_equal(truncate(path, 5), 0);
    expect_open_fail(path, PDB_CORRUPT, "trunc.safetensors", "5 bytes");
    assert_int_equal(truncate(path, 0), 0);
    expect_open_fail(path, PDB_CORRUPT, "trunc.safetensors", NULL);
}

static void test_header_length_past_eof(void **state) {
    const char *path = fx_path(state, "hdr.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t b[10] = {0xE8, 0x03, 0, 0, 0, 0, 0, 0, '{', '}'}; /* claims 1000 bytes */
    assert_int_equal(fwrite(b, 1, sizeof b, f), sizeof b);
    fclose(f);
    expect_open_fail(path, PDB_CORRUPT, "hdr.safetensors", "header length 1000");
}

static void test_absurd_header_length(void **state) {
    const char *path = fx_path(state, "huge.safetensors");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t n = 200ull * 1000 * 1000;
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    fclose(f);
    assert_int_equal(truncate(path, (off_t)(n + 8)), 0); /* sparse: costs no disk */
    expect_open_fail(path, PDB_TOO_LARGE, "huge.safetensors", "200000000");
}

static void test_invalid_json(void **state) {
    const char *path = fx_path(state, "json.safetensors");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\",\n \"shape\": [1] \"data_offsets\": [0, 4]}}", 4);
    expect_open_fail(path, PDB_CORRUPT, "json.safetensors", "line 2 column");
    write_raw(path, "[1, 2]", 0);
    expect_open_fail(path, PDB_CORRUPT, "json.safetensors", "not an object");
    write_raw(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                    " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4);
    expect_open_fail(path, PDB_CORRUPT, "json.safetensors", "duplicate");
    write_raw(path, "{\"__metadata__\": {\"k\": 1}}", 0);
    expect_open_fail(path, PDB_CORRUPT, "json.safetensors", "'k'");
    write_raw(path, "{\"t.w\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4);
    expect_open_fail(path, PDB_CORRUPT, "json.safetensors", "'t.w'");
}

static void test_offsets_past_end(void **state) {
    const char *path = fx_path(state, "off.safetensors");
    write_raw(path, "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [3,4], \"data_offsets\": [8, 56]}}", 50);
    expect_open_fail(path, PDB_CORRUPT, "off.safetensors", "tensor 'x.weight': data_offsets [8, 56] extend past");
}

static void test_offsets_inconsistent_with_shape(void **state) {
    const char *path = fx_path(state, "model.safetensors");
    write_raw(path, "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [3,4], \"data_offsets\": [0, 10]}}", 48);
    expect_open_fail(path, PDB_CORRUPT,
                     "model.safetensors: tensor 'x.weight': data_offsets [0, 10] but shape [3,4] F32 needs 48 bytes",
                     NULL);
    write_raw(path, "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [3,4], \"data_offsets\": [40, 0]}}", 48);
    expect_open_fail(path, PDB_CORRUPT, "'x.weight'", "not ordered");
    write_raw(path, "{\"x.weight\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], "
                    "\"data_offsets\": [0, 0]}}", 0);
    expect_open_fail(path, PDB_CORRUPT, "'x.weight'", "overflow");
}

static void test_unknown_dtype(void **state) {
    const char *path = fx_path(state, "dt.safetensors");
    write_raw(path, "{\"ok\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]},"
                    " \"odd.bias\": {\"dtype\": \"F33\", \"shape\": [2], \"data_offsets\": [2, 4]}}", 4);
    expect_open_fail(path, PDB_UNSUPPORTED, "dt.safetensors: tensor 'odd.bias'", "'F33'");
}

static void test_negative_dim(void **state) {
    const char *path = fx_path(state, "neg.safetensors");
    write_raw(path, "{\"n.w\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 8]}}", 8);
    expect_open_fail(path, PDB_CORRUPT, "neg.safetensors: tensor 'n.w'", "negative dim");
}

static void test_missing_tensor_and_wrong_shape(void **state) {
    const char *path = fx_path(state, "m.safetensors");
    write_raw(path, "{\"x.weight\": {\"dtype\": \"BF16\", \"shape\": [3,4], \"data_offsets\": [0, 24]}}", 24);
    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    const pdb_tensor_view *v = (const void *)1;
    assert_int_equal(pdb_st_get(st, "y.weight", 2, (int64_t[]){3, 4}, &v), PDB_NOT_FOUND);
    assert_null(v);
    assert_non_null(strstr(pdb_err_msg(), "'y.weight'"));
    assert_non_null(strstr(pdb_err_msg(), path));
    float *out = (float *)1;
    assert_int_equal(pdb_st_load_f32(st, "y.weight", 1, (int64_t[]){1}, &out), PDB_NOT_FOUND);
    assert_null(out);

    assert_int_equal(pdb_st_get(st, "x.weight", 2, (int64_t[]){4, 3}, &v), PDB_MISMATCH);
    assert_non_null(strstr(pdb_err_msg(), "m.safetensors: tensor 'x.weight'"));
    assert_non_null(strstr(pdb_err_msg(), "shape [3,4]"));
    assert_non_null(strstr(pdb_err_msg(), "expected [4,3]"));
    assert_int_equal(pdb_st_get(st, "x.weight", 3, (int64_t[]){3, 4, 1}, &v), PDB_MISMATCH);
    assert_int_equal(pdb_st_get(st, "x.weight", 2, (int64_t[]){-1, 4}, &v), PDB_OK);
    assert_int_equal(v->numel, 12);
    pdb_st_close(st);

    fixture *fx = *state;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope", fx->dir);
    expect_open_fail(missing, PDB_NOT_FOUND, "nope", NULL);
}

static void test_index_missing_shard(void **state) {
    fixture *fx = *state;
    write_shard(fx_path(state, "model-00001-of-00002.safetensors"), "a.weight", NULL, 0, NULL);
    write_text(fx_path(state, "model.safetensors.index.json"),
               "{\"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\","
               " \"b.weight\": \"model-00002-of-00002.safetensors\"}}");
    expect_open_fail(fx->dir, PDB_NOT_FOUND, "model-00002-of-00002.safetensors", "'b.weight'");
    /* the index names a tensor its shard lacks */
    write_text(fx_path(state, "model.safetensors.index.json"),
               "{\"weight_map\": {\"a.weight\": \"model-00001-of-00002.safetensors\","
               " \"c.weight\": \"model-00001-of-00002.safetensors\"}}");
    expect_open_fail(fx->dir, PDB_CORRUPT, "model.safetensors.index.json", "'c.weight'");
    /* bad JSON in the index */
    write_text(fx_path(state, "model.safetensors.index.json"), "{\"weight_map\": {\n\"a\": }");
    expect_open_fail(fx->dir, PDB_CORRUPT, "model.safetensors.index.json", "line 2");
    /* shard names may not leave the directory */
    write_text(fx_path(state, "model.safetensors.index.json"), "{\"weight_map\": {\"a.weight\": \"../x.safetensors\"}}");
    expect_open_fail(fx->dir, PDB_CORRUPT, "'a.weight'", NULL);
}

static void test_writer_errors(void **state) {
    pdb_st_writer *w;
    float v = 1;
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    assert_int_equal(pdb_st_writer_add(w, "__metadata__", PDB_DT_F32, 0, NULL, &v), PDB_INVALID);
    assert_int_equal(pdb_st_writer_add(w, "neg", PDB_DT_F32, 1, (int64_t[]){-2}, &v), PDB_INVALID);
    assert_non_null(strstr(pdb_err_msg(), "'neg'"));
    assert_int_equal(pdb_st_writer_add(w, "ok", PDB_DT_F32, 0, NULL, &v), PDB_OK);
    const char *path = fx_path(state, "no/such/dir/out.safetensors");
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_IO);
    assert_non_null(strstr(pdb_err_msg(), path));
    pdb_st_writer_free(w);
    /* an empty writer still produces a valid (empty) file */
    assert_int_equal(pdb_st_writer_init(&w), PDB_OK);
    path = fx_path(state, "empty.safetensors");
    assert_int_equal(pdb_st_writer_finish(w, path), PDB_OK);
    pdb_st_writer_free(w);
    pdb_st *st;
    assert_int_equal(pdb_st_open(path, &st), PDB_OK);
    assert_int_equal(pdb_st_count(st), 0);
    pdb_st_close(st);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_roundtrip_all_dtypes),
        T(test_fp8_companions),
        T(test_deepseek_fp4_experts),
        T(test_sharded_directory),
        T(test_resident_matches_mmap),
        T(test_resident_fits),
        T(test_mem_map),
        T(test_single_unnamed_file_in_dir),
        T(test_many_tensors_lookup),
        T(test_truncated_file),
        T(test_header_length_past_eof),
        T(test_absurd_header_length),
        T(test_invalid_json),
        T(test_offsets_past_end),
        T(test_offsets_inconsistent_with_shape),
        T(test_unknown_dtype),
        T(test_negative_dim),
        T(test_missing_tensor_and_wrong_shape),
        T(test_index_missing_shard),
        T(test_writer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
