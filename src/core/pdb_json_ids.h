/* pdb_json_ids: the token-id array of a JSON request body read straight into int32s, without a
 * JSON tree (a jansson tree of N integers costs ~48 bytes per id: 50 MB for a 1M-token prompt),
 * from the whole body or incrementally from the pieces it arrives in (the reader: the body itself
 * is then never held, only the ids at 4 B each and the other members as text).
 * Invariants: only the fast path of well-formed input is taken -- a body whose top level is one
 * object holding KEY exactly once (unescaped), as a non-empty array of plain JSON integers (digits,
 * no sign, no leading zero, at most 10 digits), is read; in every other case `found` is 0 and the
 * caller parses the whole body as before, so errors and odd inputs behave exactly as they did.
 * The reader's decision and results do not depend on where the pieces are split. When it declines
 * after it has read (part of) the array, it hands back a stand-in for the body: the array re-written
 * from the ids (an id past the vocabulary as max_id), padded with whitespace so that every later
 * byte sits at the same line and column; jansson parses it to the same values (up to those ids,
 * still past the vocabulary) or fails with the same line, column and message. The scan never reads
 * past len; nothing grows with the body but the ids, and, on a declined body, its stand-in. */
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
    char *rest;        /* found: the body with the array replaced by 0 (free it), NUL-terminated;
                        * not found: NULL from pdb_json_ids_scan (parse the body), the body's stand-in
                        * from pdb_json_ids_reader_finish (parse it whole, as the body) */
    size_t rest_len;
    /* found: where the array was (rest[array_at] is its "0") and where it ended: after array_nl
     * newlines, array_col bytes (counted from its '[' when array_nl is 0) */
    size_t array_at;
    int64_t array_nl, array_col;
} pdb_json_ids;

/* Scan body[0..len) for the top-level member KEY (see the invariants). PDB_NOMEM only when the
 * allocations fail; anything the fast path does not take is PDB_OK with out->found = 0. */
pdb_status pdb_json_ids_scan(const char *body, size_t len, const char *key, int64_t max_id, pdb_json_ids *out);

void pdb_json_ids_free(pdb_json_ids *x);

/* A found body's stand-in (see the invariants) into *text (free it), for the error of a rest that
 * jansson refuses: parsed whole, it fails at the body's own line and column. PDB_NOMEM. */
pdb_status pdb_json_ids_stand_in(const pdb_json_ids *x, int64_t max_id, char **text, size_t *len);

/* ---- incremental: the body in pieces ---- */
typedef struct pdb_json_ids_reader pdb_json_ids_reader;

/* A reader for the top-level member KEY (at most 63 bytes). PDB_NOMEM / PDB_INVALID. */
pdb_status pdb_json_ids_reader_new(const char *key, int64_t max_id, pdb_json_ids_reader **out);
/* The next piece of the body (any length, 0 included). PDB_NOMEM when an allocation failed (then
 * and later: the reader keeps the failure and finish returns it). */
pdb_status pdb_json_ids_reader_feed(pdb_json_ids_reader *rd, const char *data, size_t len);
/* The end of the body: *out as pdb_json_ids_scan would give for the concatenated pieces, except
 * that a declined body comes with its stand-in in out->rest. Call once. */
pdb_status pdb_json_ids_reader_finish(pdb_json_ids_reader *rd, pdb_json_ids *out);
/* Bytes fed so far. */
uint64_t pdb_json_ids_reader_bytes(const pdb_json_ids_reader *rd);
void pdb_json_ids_reader_free(pdb_json_ids_reader *rd);

#endif
