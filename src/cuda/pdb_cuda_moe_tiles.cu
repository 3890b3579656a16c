/* pdb_cuda_moe_tiles: the routed experts as cuBLAS products of one PDB_CUDA_MOE_TILE-row tile each,
 * over pdb_cuda_moe_layout's row layout, shared by the V2 and V4 device engines.
 * Invariants: every call is PDB_CUDA_MOE_GROUP tiles of the same shape (the last group padded with
 * dummy tiles on expert 0 whose rows nobody reads), so a row's result depends on its tile's rows and
 * expert alone, never on the routing of the rows beside it or the pass it is in (chunked = one
 * shot); the buffers hold ntpad tiles (ntpad = the pass's most tiles rounded up to a group), since a
 * dummy tile's products are written like any other. The tile count comes back to the host once per
 * MoE layer (one synchronisation), so only the used groups are launched. */
#include "pdb_cuda_kernels.h"

/* The operand pointers of every row tile i < ntpad (tile_e[i] < 0 or i >= nt, this pass's tile bound:
 * a dummy tile on expert 0): P[k * ntpad + i] for k = 0 A (xe, [T, H] tiles), 1 w1[e], 2 w3[e], 3 g,
 * 4 u, 5 A of w2 (xe again, [T, I] tiles), 6 w2[e], 7 ye (sizes in bytes a value: esz operands, gsz g
 * and u, ysz ye). */
__global__ void k_moe_tile_ptrs(const int32_t *tile_e, int64_t nt, int64_t ntpad, int64_t E, const char *xe, const char *w1,
                                const char *w3, const char *w2, char *g, char *u, int64_t gsz, char *ye, int64_t ysz, int64_t I,
                                int64_t H, int64_t esz, const void **P) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, T = PDB_CUDA_MOE_TILE;
    if (i >= ntpad) return;
    int64_t x = i < nt ? tile_e[i] : -1; /* tile_e past this pass's nt tiles is stale or never written */
    if (x < 0 || x >= E) x = 0;
    P[0 * ntpad + i] = xe + i * T * H * esz;
    P[1 * ntpad + i] = w1 + x * I * H * esz;
    P[2 * ntpad + i] = w3 + x * I * H * esz;
    P[3 * ntpad + i] = g + i * T * I * gsz;
    P[4 * ntpad + i] = u + i * T * I * gsz;
    P[5 * ntpad + i] = xe + i * T * I * esz;
    P[6 * ntpad + i] = w2 + x * H * I * esz;
    P[7 * ntpad + i] = ye + i * T * H * ysz;
}

int64_t pdb_cuda_moe_tiles_pad(int64_t ntmax) {
    return (ntmax + PDB_CUDA_MOE_GROUP - 1) / PDB_CUDA_MOE_GROUP * PDB_CUDA_MOE_GROUP;
}

pdb_status pdb_cuda_moe_tiles_up(const pdb_cuda_moe_tiles *m, const int32_t *tile_e, int64_t nt, const void *w1,
                                 const void *w3, const void *w2, int64_t *used) {
    const int64_t H = m->H, I = m->I, T = PDB_CUDA_MOE_TILE, np = m->ntpad;
    *used = 0;
    if (nt <= 0) return PDB_OK;
    if (nt > np) return pdb_err_set(PDB_INVALID, "moe tiles: %lld tiles beyond the %lld the buffers hold", (long long)nt, (long long)np);
    const cudaStream_t s = m->blas->s;
    const int64_t esz = (int64_t)pdb_cuda_dt_size(m->dt);
    k_moe_tile_ptrs<<<(unsigned)((np + 127) / 128), 128, 0, s>>>(tile_e, nt, np, m->E, (const char *)m->xe, (const char *)w1,
                                                                (const char *)w3, (const char *)w2, (char *)m->g, (char *)m->u,
                                                                (int64_t)pdb_cuda_dt_size(m->gdt), (char *)m->ye,
                                                                (int64_t)pdb_cuda_dt_size(m->ydt), I, H, esz, m->ptrs);
    PDB_CU_LAUNCH("moe tile pointers");
    PDB_CU(cudaMemcpyAsync(m->h_tiles, tile_e, sizeof(int32_t) * (size_t)nt, cudaMemcpyDeviceToHost, s));
    PDB_CU(cudaStreamSynchronize(s));
    int64_t n = 0;
    while (n < nt && m->h_tiles[n] >= 0) n++;
    const void *const *P = m->ptrs;
    for (int64_t g0 = 0; g0 < n; g0 += PDB_CUDA_MOE_GROUP) {
        PDB_TRY(pdb_cuda_gemm_ptrs_ct(m->blas, m->dt, m->gdt, T, I, H, P + g0, H, P + np + g0, H, (void *const *)(P + 3 * np + g0), I,
                                      PDB_CUDA_MOE_GROUP));
        PDB_TRY(pdb_cuda_gemm_ptrs_ct(m->blas, m->dt, m->gdt, T, I, H, P + g0, H, P + 2 * np + g0, H, (void *const *)(P + 4 * np + g0),
                                      I, PDB_CUDA_MOE_GROUP));
    }
    *used = n;
    return PDB_OK;
}

pdb_status pdb_cuda_moe_tiles_down(const pdb_cuda_moe_tiles *m, int64_t used) {
    const int64_t H = m->H, I = m->I, T = PDB_CUDA_MOE_TILE, np = m->ntpad;
    const void *const *P = m->ptrs;
    for (int64_t g0 = 0; g0 < used; g0 += PDB_CUDA_MOE_GROUP)
        PDB_TRY(pdb_cuda_gemm_ptrs_ct(m->blas, m->dt, m->ydt, T, H, I, P + 5 * np + g0, I, P + 6 * np + g0, I,
                                      (void *const *)(P + 7 * np + g0), H, PDB_CUDA_MOE_GROUP));
    return PDB_OK;
}
