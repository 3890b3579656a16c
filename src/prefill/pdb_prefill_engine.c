/* pdb_prefill_engine: the chunk loop. State: pos (tokens run); chunks are clipped at block ends,
 * and right after the chunk that ends block b (b >= first_block) the backend copies the block
 * out into seg, which goes to the callback. */
#include "pdb_prefill_engine.h"

#include "pdb_arch.h"
#include "pdb_clock.h"

#include <stdlib.h>

pdb_status pdb_prefill_run(pdb_prefill_backend *be, const pdb_config *cfg, const int32_t *ids, int64_t n_ids,
                           int64_t bs, int64_t first_block, int64_t chunk, pdb_prefill_segment_fn fn, void *user,
                           pdb_prefill_stats *stats) {
    pdb_prefill_stats st = {0};
    if (stats) *stats = st;
    if (chunk <= 0) chunk = 512;
    PDB_TRY(pdb_arch_check_block_size(cfg, bs));
    int64_t nb = n_ids / bs, T = nb * bs;
    if (first_block < 0 || first_block > nb)
        return pdb_err_set(PDB_INVALID, "prefill: first_block %lld outside 0..%lld", (long long)first_block, (long long)nb);
    if (first_block == nb) return PDB_OK;
    pdb_arch_layout lay;
    PDB_TRY(pdb_arch_layout_of(cfg, be->semantics, &lay));
    uint64_t bytes = pdb_store_layout_block_bytes(&lay.layout, bs);
    void *seg = malloc(bytes);
    if (!seg) return pdb_err_set(PDB_NOMEM, "prefill: segment buffer of %llu bytes", (unsigned long long)bytes);
    st.capture_bytes_peak = bytes;
    pdb_status s = be->begin(be, T, bs);
    for (int64_t pos = 0; !s && pos < T;) {
        int64_t b = pos / bs, n = T - pos < chunk ? T - pos : chunk;
        if (pos + n > (b + 1) * bs) n = (b + 1) * bs - pos;
        double t0 = pdb_clock_now();
        s = be->forward_chunk(be, ids + pos, pos, n, b >= first_block, NULL);
        pos += n;
        int done = !s && pos % bs == 0 && b >= first_block; /* block b complete and asked for */
        if (done) s = be->get_block(be, b, seg);
        st.engine_s += pdb_clock_now() - t0;
        st.tokens_run += n;
        if (s || !done) continue;
        double t1 = pdb_clock_now();
        s = fn(user, b, seg, bytes);
        st.callback_s += pdb_clock_now() - t1;
        if (!s) st.blocks_sent++;
    }
    be->end(be);
    free(seg);
    if (stats) *stats = st;
    return s;
}
