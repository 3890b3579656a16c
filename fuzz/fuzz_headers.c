/* fuzz_headers: the request-header parsing a client reaches: X-PD-Bridge-Mode
 * (pdb_front_parse_mode) and the Authorization secret compare (pdb_http_equal_secret).
 * Properties: parse_mode answers -1..2 and agrees with a case-insensitive compare against
 * auto/off/force (empty = auto); equal_secret(a, b) == (len(a) == len(b) && memcmp == 0) for
 * every split of the input, including embedded NULs. */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "fuzz_util.h"
#include "pdb_front_policy.h"
#include "pdb_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    int m = pdb_front_parse_mode(s);
    FUZZ_CHECK(m >= -1 && m <= 2, "parse_mode %d", m);
    int want = !*s || !strcasecmp(s, "auto") ? PDB_MODE_AUTO : !strcasecmp(s, "off") ? PDB_MODE_OFF
             : !strcasecmp(s, "force") ? PDB_MODE_FORCE : -1;
    FUZZ_CHECK(m == want, "parse_mode('%s') = %d, want %d", s, m, want);
    size_t cut = size ? data[0] % (size + 1) : 0;
    const char *a = (const char *)data, *b = (const char *)data + cut;
    size_t al = cut, bl = size - cut;
    int eq = pdb_http_equal_secret(a, al, b, bl);
    FUZZ_CHECK(eq == (al == bl && memcmp(a, b, al) == 0), "equal_secret wrong for lengths %zu/%zu", al, bl);
    FUZZ_CHECK(pdb_http_equal_secret(a, al, a, al) == 1, "a secret differs from itself");
    free(s);
    return 0;
}
