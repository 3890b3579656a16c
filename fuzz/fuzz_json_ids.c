/* fuzz_json_ids: the prefill server's fast read of token_ids (pdb_json_ids_scan) on any body.
 * Properties: it returns (no hang: libFuzzer's timeout), PDB_OK; when it takes the body
 * (found = 1), jansson parses the whole body iff it parses the rest, and then the ids equal
 * jansson's token_ids array element by element, the first id past the vocabulary is the one
 * bad_index names, and the rest (the array replaced by 0) equals the whole body without the
 * array. Byte 0 picks the vocabulary size (1 << (byte0 % 31)), the rest is the body. */
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "fuzz_util.h"
#include "pdb_json_ids.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    int64_t max_id = (int64_t)1 << (data[0] % 31);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    pdb_json_ids x;
    pdb_status s = pdb_json_ids_scan(body, len, "token_ids", max_id, &x);
    FUZZ_CHECK(s == PDB_OK, "scan failed: %d", (int)s);
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
