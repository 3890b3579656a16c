/* pdb_names: the shape of a model's tensor-name table and the two things done with it, formatting
 * a role's name for (layer, expert) and finding a role's tensor in an opened checkpoint. One table
 * per model (pdb_v2_names.h, pdb_v4_names.h) holds every name its loaders and make-model use; no
 * loader spells a tensor name itself.
 * A name is prefix + suffix: the table's prefix for the row's scope (formatted with the layer, a
 * "%lld" taking long long) followed by one of the row's suffixes (formatted with the expert, a
 * "%lld", for PDB_NAMES_EXPERT rows). Spellings are tried in lookup order, suffix-major: suffix 0
 * under every prefix in order, then suffix 1 under every prefix, ...; suffix 0 is DeepSeek's
 * spelling, later ones are what transformers writes where it differs.
 * Invariants: rows[i].role == i; every row has at least one suffix; a formatted name fits in
 * PDB_NAMES_MAX_LEN (the tables' patterns are far shorter); spelling 0 is the name a failed lookup
 * reports. */
#ifndef PDB_NAMES_H
#define PDB_NAMES_H

#include <stdint.h>

#include "pdb_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PDB_NAMES_MAX_LEN 256   /* a formatted name's buffer, NUL included */
#define PDB_NAMES_MAX_SUFFIX 4  /* suffixes per row, the unused ones NULL */
#define PDB_NAMES_MAX_PREFIX 2  /* prefixes per scope, the unused ones NULL */

typedef enum pdb_names_scope {
    PDB_NAMES_GLOBAL = 0, /* one tensor per model (embeddings, final norm, head) */
    PDB_NAMES_LAYER,      /* one per layer */
    PDB_NAMES_EXPERT      /* one per (layer, routed expert) */
} pdb_names_scope;

/* Row flags. OPTIONAL: a valid checkpoint may lack it whatever the config says (the head under
 * tie_word_embeddings, a layout alternative such as fused experts). Which rows a config needs at
 * which layer is the arch's pdb_<arch>_names_required. */
enum { PDB_NAMES_OPTIONAL = 1u << 0 };

typedef struct pdb_names_row {
    int role;                                 /* the arch's role enum value, == the row's index */
    const char *what;                         /* the role in words, for messages and tests */
    pdb_names_scope scope;
    unsigned flags;                           /* PDB_NAMES_* */
    const char *suffix[PDB_NAMES_MAX_SUFFIX]; /* lookup order, DeepSeek's first */
    int saved;                                /* the spelling (lookup-order index) that transformers'
                                                 save_pretrained writes and make-model writes */
} pdb_names_row;

typedef struct pdb_names_table {
    const char *arch;                               /* model_type: "deepseek_v2", ... */
    int n_roles;
    const pdb_names_row *rows;
    const char *global_prefix[PDB_NAMES_MAX_PREFIX]; /* tried in order */
    const char *layer_prefix[PDB_NAMES_MAX_PREFIX];  /* for LAYER and EXPERT rows, one "%lld" (layer) */
} pdb_names_table;

/* How many spellings `role` has (suffixes x prefixes of its scope). */
int pdb_names_spellings(const pdb_names_table *t, int role);

/* Spelling `spelling` (lookup order) of `role` for (layer, expert) into buf[PDB_NAMES_MAX_LEN];
 * returns buf. layer / expert are ignored where the scope has none. A bad role or spelling is a
 * programmer error (PDB_ASSERT). */
const char *pdb_names_format(const pdb_names_table *t, int role, int spelling, int64_t layer, int64_t expert, char *buf);

/* The spelling make-model writes (row.saved) into buf; returns buf. */
const char *pdb_names_format_saved(const pdb_names_table *t, int role, int64_t layer, int64_t expert, char *buf);

/* The first spelling of `role` present in st, in lookup order: its view, with its name in
 * buf[PDB_NAMES_MAX_LEN]; NULL when none is, with spelling 0 in buf (the name to report). */
const pdb_tensor_view *pdb_names_find(const pdb_names_table *t, const pdb_st *st, int role, int64_t layer,
                                      int64_t expert, char *buf);

#ifdef __cplusplus
}
#endif

#endif
