/* pdb_json_ids: the token-id array of a JSON request body read straight into int32s, without a
 * JSON tree (a jansson tree of N integers costs ~48 bytes per id: 50 MB for a 1M-token prompt).
 * Invariants: only the fast path of well-formed input is taken -- a body whose top level is one
 * object holding KEY exactly once (unescaped), as a non-empty array of plain JSON integers (digits,
 * no sign, no leading zero, at most 10 digits), is scanned; in every other case `found` is 0 and
 * the caller parses the whole body as before, so errors and odd inputs behave exactly as they did.
 * The scan never reads past len and never allocates more than the ids and one copy of the body
 * without the array. */
#ifndef PDB_JSON_IDS_H
#define PDB_JSON_IDS_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

typedef struct pdb_json_ids {
    int found;         /* 1: the fast path applied, the fields below are set; 0: parse the whole body */
    int32_t *ids;      /* n ids (free it); an id >= max_id is stored as -1 and named by bad_index */
    int64_t n;
    int64_t bad_index; /* the first element outside 0..max_id-1, or -1 */
    char *rest;        /* the body with the array replaced by 0 (free it), NUL-terminated */
    size_t rest_len;
} pdb_json_ids;

/* Scan body[0..len) for the top-level member KEY (see the invariants). PDB_NOMEM only when the
 * allocations fail; anything the fast path does not take is PDB_OK with out->found = 0. */
pdb_status pdb_json_ids_scan(const char *body, size_t len, const char *key, int64_t max_id, pdb_json_ids *out);

void pdb_json_ids_free(pdb_json_ids *x);

#endif
