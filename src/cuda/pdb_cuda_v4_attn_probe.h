/* pdb_cuda_v4_attn_probe: runs one of the V4 attention kernels (pdb_cuda_v4_kernels.h) alone on
 * a pdb_v4_attn_desc of HOST pointers (the CPU contract's struct, src/model/deepseek_v4/pdb_v4.h):
 * uploads q, keys, comp (tc 2: as bf16), sel, nsel (int64 -> int32) and sinks, runs the kernel
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
 * pdb_cuda_v4_attention_tc16 (the same on bf16 key rows: keys and comp rounded to bf16 here).
 * gpu_ms (optional): the timed run's kernel time in milliseconds. */
pdb_status pdb_cuda_v4_attn_probe(const pdb_v4_attn_desc *d, int tc, double *gpu_ms);

#ifdef __cplusplus
}
#endif

#endif
