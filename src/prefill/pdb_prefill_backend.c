/* pdb_prefill_backend: the table of engines, one row per (architecture, device) pair, and the
 * choice of one by name for a model (the one place that knows which engine runs which
 * architecture on which device). Invariant: "cuda" never falls back; "auto" falls back to the
 * CPU with an info line naming why; an unknown name is PDB_INVALID naming it. */
#include <string.h>

#include "pdb_arch.h"
#include "pdb_prefill_backend.h"

typedef struct engine_row {
    const char *arch;   /* pdb_arch_def.name */
    const char *device; /* "cpu", "cuda" */
    pdb_status (*create)(const pdb_prefill_backend_opts *o, pdb_prefill_backend **out);
} engine_row;

static const engine_row ENGINES[] = {
    {"deepseek_v2", "cpu", pdb_prefill_backend_cpu_v2_create},
    {"deepseek_v2", "cuda", pdb_prefill_backend_cuda_v2_create},
    {"deepseek_v4", "cpu", pdb_prefill_backend_cpu_v4_create},
    {"deepseek_v4", "cuda", pdb_prefill_backend_cuda_v4_create},
};

static const engine_row *find(const char *arch, const char *device) {
    for (size_t i = 0; i < sizeof ENGINES / sizeof ENGINES[0]; i++)
        if (!strcmp(ENGINES[i].arch, arch) && !strcmp(ENGINES[i].device, device)) return &ENGINES[i];
    return NULL;
}

pdb_status pdb_prefill_backend_create(const pdb_prefill_backend_opts *o, const char *want, pdb_prefill_backend **out) {
    *out = NULL;
    if (!want) want = "auto";
    if (strcmp(want, "auto") && strcmp(want, "cuda") && strcmp(want, "cpu"))
        return pdb_err_set(PDB_INVALID, "prefill backend '%s' is not one of auto, cuda, cpu", want);
    const pdb_arch_def *a;
    PDB_TRY(pdb_arch_of(o->cfg, &a));
    if (strcmp(want, "cpu")) {
        const engine_row *r = find(a->name, "cuda");
        pdb_status s = r ? r->create(o, out) : pdb_err_set(PDB_UNSUPPORTED, "no CUDA prefill engine for %s", a->name);
        if (!s || !strcmp(want, "cuda")) return s;
        PDB_INFO("prefill: no CUDA backend (%s); using the CPU", pdb_err_msg());
    }
    const engine_row *r = find(a->name, "cpu");
    if (!r) return pdb_err_set(PDB_UNSUPPORTED, "no CPU prefill engine for %s", a->name);
    return r->create(o, out);
}
