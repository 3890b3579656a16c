/* pdb_prefill_backend: choosing a backend by name for a model (the one place that knows which
 * backend runs which architecture). Invariant: "cuda" never falls back; "auto" falls back to the
 * CPU with an info line naming why; an unknown name is PDB_INVALID naming it. */
#include <string.h>

#include "pdb_prefill_backend.h"

pdb_status pdb_prefill_backend_create(const pdb_prefill_backend_opts *o, const char *want, pdb_prefill_backend **out) {
    *out = NULL;
    if (!want) want = "auto";
    if (strcmp(want, "auto") && strcmp(want, "cuda") && strcmp(want, "cpu"))
        return pdb_err_set(PDB_INVALID, "prefill backend '%s' is not one of auto, cuda, cpu", want);
    if (strcmp(want, "cpu")) {
        int v4 = o->cfg && o->cfg->arch == PDB_ARCH_DEEPSEEK_V4;
        pdb_status s = v4 ? pdb_prefill_backend_cuda_v4_create(o, out) : pdb_prefill_backend_cuda_create(o, out);
        if (!s || !strcmp(want, "cuda")) return s;
        PDB_INFO("prefill: no CUDA backend (%s); using the CPU", pdb_err_msg());
    }
    return pdb_prefill_backend_cpu_create(o, out);
}
