/* pdb_cuda_v4: DeepSeek-V4 matrix products on a GPU, as a pdb_v4_mm_provider: every product in
 * the V4 reference order (pdb_v4_mm_ref), so a V4 engine using it is bit-identical to the CPU.
 * Weights are uploaded to the device on first use and kept (keyed by their host pointer, which
 * the provider contract keeps valid and constant); activations travel per product. */
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
