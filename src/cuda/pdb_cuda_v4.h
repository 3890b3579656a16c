/* pdb_cuda_v4: DeepSeek-V4 matrix products on a GPU, as a pdb_v4_mm_provider: every product in
 * the V4 reference order (pdb_v4_mm_ref: pdb_qmat's 32-lane fused multiply-add order), so a V4
 * engine using it is bit-identical to the CPU. Weights (any pdb_qmat format) are dequantized
 * exactly on the host and uploaded as f32 on first use and kept (keyed by the qmat's data
 * pointer, format and shape, which the provider contract keeps valid and constant); activations
 * travel per product. */
#ifndef PDB_CUDA_V4_H
#define PDB_CUDA_V4_H

#ifdef __cplusplus
extern "C" {
#endif

#include "pdb_v4.h"

/* A provider on CUDA device `device`; PDB_CUDA (no GPU) or PDB_UNSUPPORTED (no CUDA build) with
 * the reason. Free with pdb_cuda_v4_mm_free (also what provider->destroy does). */
pdb_status pdb_cuda_v4_mm_create(int device, pdb_v4_mm_provider **out);
void pdb_cuda_v4_mm_free(pdb_v4_mm_provider *p);

#ifdef __cplusplus
}
#endif

#endif
