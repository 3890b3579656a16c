/* pdb_cuda_v4_attn_probe: runs one of the V4 attention kernels (pdb_cuda_v4_kernels.h) alone on
 * a pdb_v4_attn_desc of HOST pointers (the CPU contract's struct, src/model/deepseek_v4/pdb_v4.h):
 * uploads q, keys, comp (tc 2, 3: as bf16), sel, nsel (int64 -> int32) and sinks, runs the kernel
 * once untimed and once timed with CUDA events, and copies o back into d->o. For the kernels'
 * test and benches.
 * Invariants: the desc is read-only but d->o; every device buffer is freed on every path;
 * nothing here exits. Builds without CUDA: PDB_UNSUPPORTED (pdb_cuda_stub.c). */
#ifndef PDB_CUDA_V4_ATTN_PROBE_H
#define PDB_CUDA_V4_ATTN_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include "pdb_status.h"
#include "pdb_v4.h"

/* tc = 0: pdb_cuda_v4_attention (f32), 1: pdb_cuda_v4_attention_tc (bf16 tensor cores), 2:
 * pdb_cuda_v4_attention_tc16 (the same on bf16 key rows: keys and comp rounded to bf16 here), 3:
 * pdb_cuda_v4_attention_wg (tc16's math on Hopper's warpgroup MMA, the same bf16 inputs).
 * gpu_ms (optional): the timed run's kernel time in milliseconds. */
pdb_status pdb_cuda_v4_attn_probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms);

/* tc16's (tc 2) or wg's (tc 3) fused store (O's rope dims rotated back by cs rows p0 .. p0 + T - 1 of cs [p0 + T, rd],
 * host), bf16 and f32, against the engine's former unfused path on the same launch inputs: f32 O,
 * then pdb_cuda_v4_heads_norm_rope (mode 0, sign -1), then pdb_cuda_convert. *differ_bf16 /
 * *differ_f32: the values whose bits differ (0 when the fused store is the same arithmetic). */
pdb_status pdb_cuda_v4_attn_probe_rope_out(const pdb_v4_attn_desc *d, int tc, const float *cs, int64_t rd,
                                           int64_t *differ_bf16, int64_t *differ_f32);

#ifdef __cplusplus
}
#endif

#endif
