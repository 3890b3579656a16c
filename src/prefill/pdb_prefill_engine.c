/* pdb_prefill_engine: the chunk loop. State: pos (tokens run), seg (rows of the block being
 * assembled), cap (this chunk's captured rows [L, n, row]). */
#include "pdb_prefill_engine.h"

#include "pdb_dec_model.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double eng_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Block hooks: chunks clipped at block ends, each finished block copied out of the hook. */
static pdb_status run_blocks(pdb_prefill_backend *be, const pdb_config *cfg, const int32_t *ids, int64_t bs, int64_t nb,
                             int64_t first_block, int64_t chunk, pdb_prefill_segment_fn fn, void *user,
                             pdb_prefill_stats *stats) {
    pdb_prefill_stats st = {0};
    pdb_dec_layout lay;
    PDB_TRY(pdb_dec_layout_of(cfg, &lay));
    PDB_TRY(pdb_dec_check_block_size(cfg, bs));
    uint64_t bytes = pdb_store_layout_block_bytes(&lay.layout, bs);
    void *seg = malloc(bytes);
    if (!seg) return pdb_err_set(PDB_NOMEM, "prefill: segment buffer");
    st.capture_bytes_peak = bytes;
    int64_t T = nb * bs;
    pdb_status s = be->begin(be, T);
    for (int64_t pos = 0; !s && pos < T;) {
        int64_t n = T - pos < chunk ? T - pos : chunk, end = (pos / bs + 1) * bs;
        if (pos + n > end) n = end - pos;
        double t0 = eng_now();
        s = be->forward_chunk(be, ids + pos, pos, n, seg, NULL);
        pos += n;
        if (!s && pos % bs == 0 && pos / bs - 1 >= first_block) s = be->get_block(be, pos / bs - 1, bs, seg);
        st.engine_s += eng_now() - t0;
        st.tokens_run += n;
        if (s || pos % bs || pos / bs - 1 < first_block) continue;
        double t1 = eng_now();
        s = fn(user, pos / bs - 1, seg, bytes);
        st.callback_s += eng_now() - t1;
        if (!s) st.blocks_sent++;
    }
    be->end(be);
    free(seg);
    if (stats) *stats = st;
    return s;
}

pdb_status pdb_prefill_run(pdb_prefill_backend *be, const pdb_config *cfg, const int32_t *ids, int64_t n_ids,
                           int64_t bs, int64_t first_block, int64_t chunk, pdb_prefill_segment_fn fn, void *user,
                           pdb_prefill_stats *stats) {
    pdb_prefill_stats st = {0};
    if (chunk <= 0) chunk = 512;
    if (bs <= 0 || bs % 128) return pdb_err_set(PDB_INVALID, "prefill: block size %lld is not a multiple of 128", (long long)bs);
    int64_t nb = n_ids / bs, T = nb * bs, L = cfg->num_layers, row = cfg->kv_lora_rank + cfg->qk_rope_head_dim;
    if (first_block < 0 || first_block > nb)
        return pdb_err_set(PDB_INVALID, "prefill: first_block %lld outside 0..%lld", (long long)first_block, (long long)nb);
    if (stats) *stats = st;
    if (first_block == nb) return PDB_OK;
    if (chunk > T) chunk = T;
    if (be->get_block) return run_blocks(be, cfg, ids, bs, nb, first_block, chunk, fn, user, stats);
    float *cap = malloc(sizeof(float) * (size_t)(L * chunk * row)), *seg = malloc(sizeof(float) * (size_t)(L * bs * row));
    if (!cap || !seg) { free(cap); free(seg); return pdb_err_set(PDB_NOMEM, "prefill: capture buffers"); }
    st.capture_bytes_peak = sizeof(float) * (uint64_t)(L * (chunk + bs) * row);
    pdb_status s = be->begin(be, T);
    for (int64_t pos = 0; !s && pos < T; pos += chunk) {
        int64_t n = T - pos < chunk ? T - pos : chunk;
        int need = pos + n > first_block * bs; /* blocks before first_block need no capture */
        double t0 = eng_now();
        s = be->forward_chunk(be, ids + pos, pos, n, need ? cap : NULL, NULL);
        st.engine_s += eng_now() - t0;
        st.tokens_run += n;
        if (s || !need) continue;
        for (int64_t i = 0; i < n && !s; i++) {
            int64_t p = pos + i, b = p / bs, off = p % bs;
            if (b < first_block) continue;
            for (int64_t l = 0; l < L; l++)
                memcpy(seg + (l * bs + off) * row, cap + (l * n + i) * row, sizeof(float) * (size_t)row);
            if (off == bs - 1) { /* block b complete */
                double t1 = eng_now();
                s = fn(user, b, seg, sizeof(float) * (uint64_t)(L * bs * row));
                st.callback_s += eng_now() - t1;
                if (!s) st.blocks_sent++;
            }
        }
    }
    be->end(be);
    free(cap);
    free(seg);
    if (stats) *stats = st;
    return s;
}
