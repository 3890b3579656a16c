/* pdb_cuda: what the CUDA side of this build can see. Built from pdb_cuda_info.cu when nvcc
 * exists, else from pdb_cuda_stub.c; both answer without a GPU (count 0, never an abort). */
#ifndef PDB_CUDA_H
#define PDB_CUDA_H

/* 1 when this binary was built with CUDA code. */
int pdb_cuda_built(void);
/* Number of usable CUDA devices (0 when none or no driver); name of device 0 into buf. */
int pdb_cuda_device_count(char *name, int name_len);
/* Bytes in use and in all on the current device as the driver reports them (total - free: this
 * process's allocations and context, and any other process's); 0 and 0 when none. */
void pdb_cuda_memory_used(long long *used, long long *total);

#endif
