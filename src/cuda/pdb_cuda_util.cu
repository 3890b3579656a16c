/* pdb_cuda_util: the engines' shared bookkeeping: the list of device allocations an engine frees
 * at once (weights at destroy, a sequence's buffers at end) and the stage profiler (CUDA events
 * recorded on the engine's stream, each ending a named stage, summed after the pass's final
 * synchronisation), and whether the device runs warpgroup MMA. Invariant: a failed allocation leaves the list as it was and names what it
 * was for, the sizes and the device's free memory; a profiler that is off or full records nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cuda_util.h"

pdb_status pdb_cuda_dlist_alloc(pdb_cuda_dlist *l, void **p, size_t bytes, const char *what) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 256;
        void **np = (void **)realloc(l->p, sizeof(void *) * (size_t)nc);
        if (!np) return pdb_err_set(PDB_NOMEM, "device allocation list (%s)", what);
        l->p = np;
        l->cap = nc;
    }
    void *v = NULL;
    cudaError_t ce = cudaMalloc(&v, bytes ? bytes : 16);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return pdb_err_set(PDB_CUDA, "cudaMalloc of %s (%.3f GB; %.2f GB free of %.2f): %s", what, bytes / 1e9, fr / 1e9,
                           tot / 1e9, cudaGetErrorString(ce));
    }
    l->p[l->n++] = v;
    *p = v;
    return PDB_OK;
}

void pdb_cuda_dlist_free(pdb_cuda_dlist *l) {
    for (int i = 0; i < l->n; i++) cudaFree(l->p[i]);
    free(l->p);
    memset(l, 0, sizeof *l);
}

pdb_status pdb_cuda_prof_init(pdb_cuda_prof *p, int cap, const char *const *names, int nst) {
    memset(p, 0, sizeof *p);
    p->names = names;
    p->nst = nst < PDB_CUDA_PROF_STAGES ? nst : PDB_CUDA_PROF_STAGES;
    if (cap <= 0) return PDB_OK;
    p->ev = (cudaEvent_t *)calloc((size_t)cap, sizeof(cudaEvent_t));
    p->st = (int *)calloc((size_t)cap, sizeof(int));
    if (!p->ev || !p->st) return pdb_err_set(PDB_NOMEM, "profile events");
    for (; p->cap < cap; p->cap++) PDB_CU(cudaEventCreate(&p->ev[p->cap]));
    return PDB_OK;
}

pdb_status pdb_cuda_prof_mark(pdb_cuda_prof *p, cudaStream_t s, int st) {
    if (p->n >= p->cap) return PDB_OK;
    PDB_CU(cudaEventRecord(p->ev[p->n], s));
    p->st[p->n++] = st;
    return PDB_OK;
}

pdb_status pdb_cuda_prof_collect(pdb_cuda_prof *p) {
    for (int i = 1; i < p->n; i++) {
        float ms = 0;
        PDB_CU(cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]));
        if (p->st[i] >= 0 && p->st[i] < p->nst) p->ms[p->st[i]] += ms;
    }
    p->n = 0;
    return PDB_OK;
}

void pdb_cuda_prof_take(pdb_cuda_prof *p, char *buf, size_t n) {
    if (!buf || !n) return;
    buf[0] = 0;
    if (!p->cap) return;
    size_t o = 0;
    double tot = 0;
    for (int i = 0; i < p->nst; i++) tot += p->ms[i];
    for (int i = 0; i < p->nst && o < n; i++)
        if (p->ms[i] > 0) o += (size_t)snprintf(buf + o, n - o, "%s%s=%.1f", o ? " " : "", p->names[i], p->ms[i]);
    if (o < n) snprintf(buf + o, n - o, " total_ms=%.1f", tot);
    memset(p->ms, 0, sizeof p->ms);
}

void pdb_cuda_prof_free(pdb_cuda_prof *p) {
    for (int i = 0; i < p->cap; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->st);
    memset(p, 0, sizeof *p);
}

int pdb_cuda_wgmma_usable(void) {
#ifdef PDB_CUDA_WGMMA
    static int usable = -1;
    if (usable < 0) {
        int dev = 0, major = 0, minor = 0;
        usable = cudaGetDevice(&dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 &&
                 minor == 0;
        cudaGetLastError();
    }
    return usable;
#else
    return 0;
#endif
}
