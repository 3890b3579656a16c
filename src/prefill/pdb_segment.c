/* pdb_segment: frame encoding and the incremental parser. Parser state: a 16-byte prefix being
 * filled, then a payload buffer of exactly payload_len bytes (bounded by the header's block
 * size for SEGMENT frames, by fixed limits for the others); frames are dispatched whole. */
#include "pdb_segment.h"
#include "pdb_dtype.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>


void pdb_segment_frame_prefix(uint32_t type, uint64_t payload_len, uint8_t out[16]) {
    pdb_put_le32(out, PDB_SEG_MAGIC);
    pdb_put_le32(out + 4, type);
    pdb_put_le64(out + 8, payload_len);
}

static void sha256(const void *data, uint64_t len, uint8_t out[32]) {
    unsigned n = 32;
    EVP_Digest(data, (size_t)len, out, &n, EVP_sha256(), NULL);
}

void pdb_segment_payload_head(int64_t block_index, const void *data, uint64_t len, uint8_t out[40]) {
    pdb_put_le64(out, (uint64_t)block_index);
    sha256(data, len, out + 8);
}

struct pdb_segment_parser {
    pdb_segment_parser_cbs cbs;
    uint64_t max_block_bytes;
    uint8_t prefix[16];
    size_t have_prefix;
    uint8_t *payload;
    uint64_t payload_len, have_payload, cap;
    uint32_t type;
    int got_header, done, failed;
    pdb_segment_header hdr;
    int64_t next_block;
};

pdb_status pdb_segment_parser_init(pdb_segment_parser **out, const pdb_segment_parser_cbs *cbs, uint64_t max_block_bytes) {
    pdb_segment_parser *p = calloc(1, sizeof *p);
    if (!p) return pdb_err_set(PDB_NOMEM, "segment parser");
    p->cbs = *cbs;
    p->max_block_bytes = max_block_bytes;
    *out = p;
    return PDB_OK;
}

void pdb_segment_parser_free(pdb_segment_parser *p) {
    if (!p) return;
    free(p->payload);
    free(p);
}

int pdb_segment_parser_done(const pdb_segment_parser *p) { return p->done; }

static pdb_status parse_header(pdb_segment_parser *p) {
    json_error_t e;
    json_t *j = json_loadb((const char *)p->payload, (size_t)p->payload_len, 0, &e);
    if (!j) return pdb_err_set(PDB_PROTOCOL, "segment stream: header is not JSON (line %d: %s)", e.line, e.text);
    pdb_segment_header *h = &p->hdr;
    const char *fp = json_string_value(json_object_get(j, "fingerprint"));
    h->version = (int)json_integer_value(json_object_get(j, "version"));
    h->block_size = json_integer_value(json_object_get(j, "block_size"));
    h->first_block = json_integer_value(json_object_get(j, "first_block"));
    h->n_blocks = json_integer_value(json_object_get(j, "n_blocks"));
    h->block_bytes = (uint64_t)json_integer_value(json_object_get(j, "block_bytes"));
    pdb_status s = PDB_OK;
    if (h->version != 1) s = pdb_err_set(PDB_PROTOCOL, "segment stream: version %d (want 1)", h->version);
    else if (!fp || strlen(fp) != 64) s = pdb_err_set(PDB_PROTOCOL, "segment stream: header needs a 64-hex fingerprint");
    else if (h->block_size <= 0 || h->first_block < 0 || h->n_blocks < 0 || h->first_block > h->n_blocks || !h->block_bytes)
        s = pdb_err_set(PDB_PROTOCOL, "segment stream: impossible header values");
    else if (h->block_bytes > p->max_block_bytes)
        s = pdb_err_set(PDB_TOO_LARGE, "segment stream: %llu-byte segments exceed the limit %llu",
                        (unsigned long long)h->block_bytes, (unsigned long long)p->max_block_bytes);
    if (!s) memcpy(h->fingerprint, fp, 65);
    json_decref(j);
    if (s) return s;
    p->got_header = 1;
    p->next_block = h->first_block;
    return p->cbs.on_header ? p->cbs.on_header(p->cbs.user, h) : PDB_OK;
}

static pdb_status dispatch(pdb_segment_parser *p) {
    if (p->type == PDB_SEG_HEADER) return parse_header(p);
    if (p->type == PDB_SEG_SEGMENT) {
        int64_t b = (int64_t)pdb_get_le64(p->payload);
        if (b != p->next_block || b >= p->hdr.n_blocks)
            return pdb_err_set(PDB_PROTOCOL, "segment stream: block %lld out of order (expected %lld of %lld)", (long long)b,
                               (long long)p->next_block, (long long)p->hdr.n_blocks);
        uint8_t sum[32];
        sha256(p->payload + 40, p->payload_len - 40, sum);
        if (memcmp(sum, p->payload + 8, 32))
            return pdb_err_set(PDB_CORRUPT, "segment stream: block %lld fails its checksum", (long long)b);
        p->next_block++;
        return p->cbs.on_segment ? p->cbs.on_segment(p->cbs.user, b, p->payload + 40, p->payload_len - 40) : PDB_OK;
    }
    int32_t st = (int32_t)pdb_get_le32(p->payload);
    uint32_t ml = pdb_get_le32(p->payload + 4);
    if (ml != p->payload_len - 8) return pdb_err_set(PDB_PROTOCOL, "segment stream: END message length mismatch");
    char msg[PDB_SEG_MAX_MESSAGE + 1];
    memcpy(msg, p->payload + 8, ml);
    msg[ml] = 0;
    p->done = 1;
    if (p->cbs.on_end) p->cbs.on_end(p->cbs.user, st, msg);
    return PDB_OK;
}

static pdb_status check_prefix(pdb_segment_parser *p) {
    if (pdb_get_le32(p->prefix) != PDB_SEG_MAGIC) return pdb_err_set(PDB_PROTOCOL, "segment stream: bad frame magic");
    if (p->done) return pdb_err_set(PDB_PROTOCOL, "segment stream: data after END");
    p->type = pdb_get_le32(p->prefix + 4);
    p->payload_len = pdb_get_le64(p->prefix + 8);
    uint64_t max;
    switch (p->type) {
    case PDB_SEG_HEADER:
        if (p->got_header) return pdb_err_set(PDB_PROTOCOL, "segment stream: second header");
        max = PDB_SEG_MAX_HEADER_JSON;
        break;
    case PDB_SEG_SEGMENT:
        if (!p->got_header) return pdb_err_set(PDB_PROTOCOL, "segment stream: segment before header");
        if (p->payload_len != 40 + p->hdr.block_bytes)
            return pdb_err_set(PDB_PROTOCOL, "segment stream: segment of %llu bytes, header says %llu",
                               (unsigned long long)p->payload_len, (unsigned long long)(40 + p->hdr.block_bytes));
        max = 40 + p->hdr.block_bytes;
        break;
    case PDB_SEG_END:
        max = 8 + PDB_SEG_MAX_MESSAGE;
        if (p->payload_len < 8) return pdb_err_set(PDB_PROTOCOL, "segment stream: short END frame");
        break;
    default:
        return pdb_err_set(PDB_PROTOCOL, "segment stream: unknown frame type %u", p->type);
    }
    if (p->payload_len > max) return pdb_err_set(PDB_TOO_LARGE, "segment stream: frame of %llu bytes", (unsigned long long)p->payload_len);
    if (p->payload_len > p->cap) {
        uint8_t *n = realloc(p->payload, (size_t)p->payload_len);
        if (!n) return pdb_err_set(PDB_NOMEM, "segment stream: frame buffer");
        p->payload = n;
        p->cap = p->payload_len;
    }
    p->have_payload = 0;
    return PDB_OK;
}

pdb_status pdb_segment_parser_feed(pdb_segment_parser *p, const void *data, size_t len) {
    if (p->failed) return pdb_err_set(PDB_PROTOCOL, "segment stream: parser already failed");
    const uint8_t *d = data;
    while (len > 0) {
        pdb_status s = PDB_OK;
        if (p->have_prefix < 16) {
            size_t take = 16 - p->have_prefix < len ? 16 - p->have_prefix : len;
            memcpy(p->prefix + p->have_prefix, d, take);
            p->have_prefix += take;
            d += take;
            len -= take;
            if (p->have_prefix == 16) s = check_prefix(p);
        }
        if (!s && p->have_prefix == 16) {
            uint64_t need = p->payload_len - p->have_payload;
            size_t take = need < len ? (size_t)need : len;
            if (take) memcpy(p->payload + p->have_payload, d, take); /* empty payloads have no buffer */
            p->have_payload += take;
            d += take;
            len -= take;
            if (p->have_payload == p->payload_len) {
                s = dispatch(p);
                p->have_prefix = 0;
            }
        }
        if (s) { p->failed = 1; return s; }
    }
    return PDB_OK;
}
