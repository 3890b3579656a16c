/* fuzz_json_ids: the prefill server's fast read of token_ids (pdb_json_ids_scan) on any body, and
 * the same body fed to the incremental reader in pieces (split mode).
 * Properties: it returns (no hang: libFuzzer's timeout), PDB_OK; when it takes the body
 * (found = 1), jansson parses the whole body iff it parses the rest, and then the ids equal
 * jansson's token_ids array element by element, the first id past the vocabulary is the one
 * bad_index names, and the rest (the array replaced by 0) equals the whole body without the
 * array. Split mode: the reader fed the body in pieces (sizes from a generator seeded by byte 0
 * and the length: 1 byte up to 1 + byte0 / 8) gives the whole scan's result (found, ids,
 * bad_index, rest); jansson on what it hands back (the rest with the ids put back, or a declined
 * body's stand-in; a found rest that jansson refuses through pdb_json_ids_stand_in) answers as
 * jansson on the body: the same error text, line and column, or the same values (ids past the
 * vocabulary compared as past it). Byte 0 picks the vocabulary size (1 << (byte0 % 31)), the
 * rest is the body. */
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_util.h"
#include "pdb_json_ids.h"

static void clamp_ids(json_t *j, int64_t max_id) {
    json_t *a = json_is_object(j) ? json_object_get(j, "token_ids") : NULL;
    for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++)
        if (json_is_integer(json_array_get(a, i)) && json_integer_value(json_array_get(a, i)) >= max_id)
            json_array_set_new(a, i, json_integer(max_id));
}

/* The reader on the body in pieces against the whole scan x, and jansson's answer on both. */
static void check_split(const char *body, size_t len, uint8_t seed, int64_t max_id, const pdb_json_ids *x) {
    pdb_json_ids_reader *rd;
    FUZZ_CHECK(pdb_json_ids_reader_new("token_ids", max_id, &rd) == PDB_OK, "reader_new");
    uint32_t r = 2166136261u ^ seed ^ (uint32_t)len * 16777619u;
    size_t at = 0, most = 1 + seed / 8;
    while (at < len) {
        r = r * 1103515245u + 12345u;
        size_t n = 1 + (r >> 16) % most;
        if (n > len - at) n = len - at;
        FUZZ_CHECK(pdb_json_ids_reader_feed(rd, body + at, n) == PDB_OK, "feed");
        at += n;
    }
    pdb_json_ids y;
    FUZZ_CHECK(pdb_json_ids_reader_finish(rd, &y) == PDB_OK, "finish");
    pdb_json_ids_reader_free(rd);
    FUZZ_CHECK(y.found == x->found, "pieces found %d, whole %d", y.found, x->found);
    FUZZ_CHECK(y.rest != NULL, "the reader handed back no text");
    if (x->found) {
        FUZZ_CHECK(y.n == x->n && !memcmp(y.ids, x->ids, sizeof(int32_t) * (size_t)x->n), "pieces read other ids");
        FUZZ_CHECK(y.bad_index == x->bad_index, "bad_index %lld vs %lld", (long long)y.bad_index, (long long)x->bad_index);
        FUZZ_CHECK(y.rest_len == x->rest_len && !memcmp(y.rest, x->rest, x->rest_len), "pieces left another rest");
    }
    json_error_t e1, e2;
    json_t *full = json_loadb(body, len, 0, &e1), *got = json_loadb(y.rest, y.rest_len, 0, &e2);
    if (!got && y.found) {
        char *t;
        size_t tl;
        FUZZ_CHECK(pdb_json_ids_stand_in(&y, max_id, &t, &tl) == PDB_OK, "stand_in");
        json_t *k = json_loadb(t, tl, 0, &e2);
        FUZZ_CHECK(!k, "jansson refuses the rest but parses the stand-in");
        free(t);
    }
    FUZZ_CHECK(!full == !got, "jansson parses %s but not the reader's text", full ? "the body" : "the reader's text, not the body");
    if (!full) {
        FUZZ_CHECK(e1.line == e2.line && e1.column == e2.column && !strcmp(e1.text, e2.text), "body %d:%d '%s', reader %d:%d '%s'",
                   e1.line, e1.column, e1.text, e2.line, e2.column, e2.text);
    } else {
        if (y.found) {
            json_t *a = json_array();
            for (int64_t i = 0; i < y.n; i++) json_array_append_new(a, json_integer(y.ids[i] < 0 ? max_id : y.ids[i]));
            json_object_set_new(got, "token_ids", a);
        }
        clamp_ids(full, max_id);
        clamp_ids(got, max_id);
        FUZZ_CHECK(json_equal(full, got), "the reader's text holds other values than the body");
    }
    json_decref(full);
    json_decref(got);
    pdb_json_ids_free(&y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    int64_t max_id = (int64_t)1 << (data[0] % 31);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    pdb_json_ids x;
    pdb_status s = pdb_json_ids_scan(body, len, "token_ids", max_id, &x);
    FUZZ_CHECK(s == PDB_OK, "scan failed: %d", (int)s);
    check_split(body, len, data[0], max_id, &x);
    if (!x.found) {
        FUZZ_CHECK(!x.ids && !x.rest, "declined but holds ids or rest");
        return 0;
    }
    FUZZ_CHECK(x.n > 0 && x.ids && x.rest, "taken without ids (%lld)", (long long)x.n);
    json_error_t e;
    json_t *full = json_loadb(body, len, 0, &e), *rest = json_loadb(x.rest, x.rest_len, 0, &e);
    FUZZ_CHECK(!full == !rest, "jansson parses %s but not %s", full ? "the body" : "the rest", full ? "the rest" : "the body");
    if (full && json_is_object(full)) {
        json_t *arr = json_object_get(full, "token_ids");
        FUZZ_CHECK(json_is_array(arr) && (int64_t)json_array_size(arr) == x.n, "array size %zu vs %lld",
                   json_array_size(arr), (long long)x.n);
        int64_t bad = -1;
        for (int64_t i = 0; i < x.n; i++) {
            json_int_t v = json_integer_value(json_array_get(arr, (size_t)i));
            if (v >= max_id && bad < 0) bad = i;
            FUZZ_CHECK(v >= max_id ? x.ids[i] == -1 : x.ids[i] == v, "id %lld: %d vs %lld", (long long)i, x.ids[i], (long long)v);
        }
        FUZZ_CHECK(bad == x.bad_index, "bad_index %lld vs %lld", (long long)x.bad_index, (long long)bad);
        FUZZ_CHECK(json_integer_value(json_object_get(rest, "token_ids")) == 0, "the rest's token_ids is not 0");
        json_object_del(full, "token_ids");
        json_object_del(rest, "token_ids");
        FUZZ_CHECK(json_equal(full, rest), "the rest differs from the body beyond token_ids");
    }
    json_decref(full);
    json_decref(rest);
    pdb_json_ids_free(&x);
    return 0;
}
