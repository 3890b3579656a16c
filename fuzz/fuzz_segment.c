/* fuzz_segment: the PDBF segment-stream parser (pdb_segment_parser_feed) as the front runs it on
 * bytes from the prefill server. The first byte sets the feed chunk size (1..256 bytes, so frame
 * boundaries fall anywhere); the rest is the stream. Properties: no crash/UB/leak; segments are
 * delivered only after a header, in strictly increasing order from first_block, each with
 * exactly block_bytes bytes (<= the limit) whose SHA-256 equals the frame's; nothing after a
 * failed feed; END at most once and nothing is accepted after it. */
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "fuzz_util.h"
#include "pdb_segment.h"

#define MAX_BLOCK_BYTES 4096

typedef struct {
    int got_header, ends;
    int64_t next, n_blocks;
    uint64_t block_bytes;
} state;

static pdb_status on_header(void *u, const pdb_segment_header *h) {
    state *s = u;
    FUZZ_CHECK(!s->got_header, "second header delivered");
    FUZZ_CHECK(h->block_bytes > 0 && h->block_bytes <= MAX_BLOCK_BYTES, "header block_bytes %llu", (unsigned long long)h->block_bytes);
    FUZZ_CHECK(strlen(h->fingerprint) == 64, "fingerprint length");
    s->got_header = 1;
    s->next = h->first_block;
    s->n_blocks = h->n_blocks;
    s->block_bytes = h->block_bytes;
    return PDB_OK;
}

static pdb_status on_segment(void *u, int64_t b, const void *data, uint64_t len) {
    state *s = u;
    FUZZ_CHECK(s->got_header && !s->ends, "segment outside header..END");
    FUZZ_CHECK(b == s->next && b < s->n_blocks, "block %lld, expected %lld of %lld", (long long)b, (long long)s->next, (long long)s->n_blocks);
    FUZZ_CHECK(len == s->block_bytes, "segment of %llu bytes", (unsigned long long)len);
    volatile uint8_t last = ((const uint8_t *)data)[len - 1];
    (void)last;
    s->next++;
    return b % 7 == 6 ? pdb_err_set(PDB_IO, "fuzz: callback refuses block %lld", (long long)b) : PDB_OK;
}

static void on_end(void *u, int32_t status, const char *msg) {
    state *s = u;
    FUZZ_CHECK(s->ends == 0, "END delivered twice");
    FUZZ_CHECK(msg && strlen(msg) <= PDB_SEG_MAX_MESSAGE, "END message");
    (void)status;
    s->ends++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t chunk = (size_t)data[0] + 1;
    data++;
    size--;
    state s = {0};
    pdb_segment_parser_cbs cbs = {on_header, on_segment, on_end, &s};
    pdb_segment_parser *p = NULL;
    if (pdb_segment_parser_init(&p, &cbs, MAX_BLOCK_BYTES) != PDB_OK) return 0;
    int failed = 0;
    for (size_t o = 0; o < size; o += chunk) {
        size_t n = size - o < chunk ? size - o : chunk;
        int64_t before = s.next;
        int ends_before = s.ends;
        pdb_status st = pdb_segment_parser_feed(p, data + o, n);
        if (failed) FUZZ_CHECK(st != PDB_OK && s.next == before && s.ends == ends_before, "parser accepted data after failing");
        if (st != PDB_OK) failed = 1;
    }
    FUZZ_CHECK(pdb_segment_parser_done(p) == (s.ends == 1), "done flag disagrees with END delivery");
    pdb_segment_parser_free(p);
    return 0;
}
