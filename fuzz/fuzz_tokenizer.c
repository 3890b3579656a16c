/* fuzz_tokenizer: the real DeepSeek-V3 tokenizer (.cache/tokenizer/deepseek_v3/tokenizer.json,
 * or $PDB_FUZZ_TOKENIZER) on arbitrary input. The first byte picks the mode: even = encode the
 * rest as text, odd = decode the rest as little-endian i32 ids. Properties: no crash/UB/leak;
 * byte-level BPE loses nothing: decode(encode(text)) == text for every byte string; decoding
 * ids outside the vocabulary fails cleanly (PDB_INVALID), never reads out of bounds. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "pdb_tokenizer.h"

static pdb_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    char p[4096];
    const char *env = getenv("PDB_FUZZ_TOKENIZER");
    if (env && *env) snprintf(p, sizeof p, "%s", env);
    else snprintf(p, sizeof p, "%s/.cache/tokenizer/deepseek_v3/tokenizer.json", fuzz_src_dir());
    if (pdb_tokenizer_load(p, &tok) != PDB_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s (run scripts/setup.sh)\n", p, pdb_err_msg());
        exit(2);
    }
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 8192) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if ((data[0] & 1) == 0) {
        int32_t *ids = NULL;
        int64_t n = 0;
        pdb_status st = pdb_tokenizer_encode(tok, text, len, &ids, &n);
        FUZZ_CHECK(st == PDB_OK, "encode failed: %s", pdb_err_msg());
        FUZZ_CHECK(n >= 0 && (size_t)n <= len, "%lld ids for %zu bytes", (long long)n, len);
        char *back = NULL;
        size_t blen = 0;
        st = pdb_tokenizer_decode(tok, ids, n, &back, &blen);
        FUZZ_CHECK(st == PDB_OK, "decode of encoded ids failed: %s", pdb_err_msg());
        FUZZ_CHECK(blen == len && memcmp(back, text, len) == 0, "decode(encode(x)) != x (%zu vs %zu bytes)", blen, len);
        /* streaming pieces concatenate to the same bytes */
        size_t off = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t pl = 0;
            const char *piece = pdb_tokenizer_token_bytes(tok, ids[i], &pl);
            FUZZ_CHECK(piece && off + pl <= blen && memcmp(back + off, piece, pl) == 0, "token_bytes of id %d", ids[i]);
            off += pl;
        }
        FUZZ_CHECK(off == blen, "pieces cover %zu of %zu bytes", off, blen);
        free(back);
        free(ids);
    } else {
        int64_t n = (int64_t)(len / 4);
        int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
        if (!ids) return 0;
        memcpy(ids, text, (size_t)n * 4);
        char *out = NULL;
        size_t olen = 0;
        pdb_status st = pdb_tokenizer_decode(tok, ids, n, &out, &olen);
        int32_t vs = pdb_tokenizer_vocab_size(tok);
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= vs) FUZZ_CHECK(st != PDB_OK, "id %d outside the vocabulary decoded", ids[i]);
        if (st == PDB_OK) FUZZ_CHECK(out && out[olen] == 0, "decoded text not NUL-terminated");
        free(out);
        free(ids);
    }
    return 0;
}
