/* pdb_cuda_stub: the CUDA probe for builds without nvcc: no devices. */
#include "pdb_cuda.h"
#ifndef PDB_HAVE_CUDA
int pdb_cuda_built(void) { return 0; }
int pdb_cuda_device_count(char *name, int name_len) { if (name && name_len > 0) name[0] = 0; return 0; }
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_prefill_backend.h"
pdb_status pdb_prefill_backend_cuda_v2_create(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out) {
    (void)o;
    (void)out;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_prefill.h"
/* Builds without nvcc (-DPDB_NO_CUDA=ON or no toolkit) still link tests/cuda, which asks for a
 * GPU before it calls this. */
pdb_status pdb_cuda_prefill_create(const pdb_prefill_backend_opts *o, const pdb_cuda_prefill_opts *co,
                                   pdb_prefill_backend **out) {
    (void)o;
    (void)co;
    (void)out;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
#endif

#ifndef PDB_HAVE_CUDA
#include "pdb_cuda_v4.h"
pdb_status pdb_cuda_v4_mm_create(int device, pdb_v4_mm_provider **out) {
    (void)device;
    *out = NULL;
    return pdb_err_set(PDB_UNSUPPORTED, "this build has no CUDA backend (nvcc was not found at configure time)");
}
void pdb_cuda_v4_mm_free(pdb_v4_mm_provider *p) { (void)p; }
#endif
