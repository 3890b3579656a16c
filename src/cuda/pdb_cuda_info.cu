/* pdb_cuda_info: device discovery for CUDA builds. Invariant: never aborts; a machine with
 * no driver or no GPU reports 0 devices. */
#include <cuda_runtime.h>
#include <string.h>

extern "C" {
#include "pdb_cuda.h"

int pdb_cuda_built(void) { return 1; }

int pdb_cuda_device_count(char *name, int name_len) {
    int n = 0;
    if (name && name_len > 0) name[0] = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    if (n > 0 && name && name_len > 0) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
            strncpy(name, p.name, (size_t)name_len - 1);
            name[name_len - 1] = 0;
        }
    }
    return n;
}
}
