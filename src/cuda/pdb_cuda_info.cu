/* pdb_cuda_info: device discovery and the small device utilities every CUDA backend shares
 * (device selection, growable buffers, checked copies). Invariant: never aborts; a machine with
 * no driver or no GPU reports 0 devices, and selecting a device there is a PDB_CUDA error. */
#include <cuda_runtime.h>
#include <string.h>

#include "pdb_cuda_util.h"

pdb_status pdb_cuda_use_device(int device, const char *who) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device present";
        cudaGetLastError();
        return pdb_err_set(PDB_CUDA, "%s: no usable GPU (%s)", who, why);
    }
    if (device < 0 || device >= ndev) return pdb_err_set(PDB_CUDA, "%s: device %d requested, %d present", who, device, ndev);
    PDB_CU(cudaSetDevice(device));
    return PDB_OK;
}

pdb_status pdb_cuda_reserve(void **p, size_t *cap, size_t need) {
    if (*cap >= need) return PDB_OK;
    if (*p) cudaFree(*p);
    *p = NULL;
    *cap = 0;
    PDB_CU(cudaMalloc(p, need));
    *cap = need;
    return PDB_OK;
}

pdb_status pdb_cuda_to_device(void *dst, const void *src, size_t bytes, const char *what) {
    /* cudaMemcpy from pageable memory may return before its DMA lands, and the engines' streams
     * are non-blocking (they do not wait for the legacy stream): wait for the copy itself, so a
     * kernel launched on any stream afterwards reads the uploaded bytes. */
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) return PDB_OK;
    cudaGetLastError();
    return pdb_err_set(PDB_CUDA, "cudaMemcpy(%s, %zu bytes): %s", what, bytes, cudaGetErrorString(e));
}

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

void pdb_cuda_memory_used(long long *used, long long *total) {
    size_t fr = 0, tot = 0;
    *used = *total = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { cudaGetLastError(); return; }
    *used = (long long)(tot - fr);
    *total = (long long)tot;
}
}
