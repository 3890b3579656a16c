/* pdb_prefill_cuda: the prefill's "cuda" backend for DeepSeek-V2, the CUDA engine of
 * src/cuda/pdb_cuda_prefill behind the pdb_prefill_backend interface. The interface is the
 * prefill's and the engine the cuda component's (below it), so the adapter lives here.
 * Invariant: every call is the engine's call of the same name, nothing added. */
#ifndef PDB_PREFILL_CUDA_H
#define PDB_PREFILL_CUDA_H

#include "pdb_cuda_prefill.h"
#include "pdb_prefill_backend.h"

/* pdb_prefill_backend_cuda_v2_create with the engine's own options (precision, sub-chunk, page
 * size, GEMM rows; co NULL = o->precision and the defaults). */
pdb_status pdb_prefill_cuda_create(const pdb_prefill_backend_opts *o, const pdb_cuda_prefill_opts *co,
                                   pdb_prefill_backend **out);

/* The engine's stage profile (pdb_cuda_prefill_profile_take) of a backend made by
 * pdb_prefill_cuda_create. */
void pdb_prefill_cuda_profile_take(pdb_prefill_backend *be, char *buf, size_t n);

#endif
