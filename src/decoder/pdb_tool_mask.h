/* pdb_tool_mask: constrained decoding of a forced tool call, a mask for the decode service's hook
 * (pdb_dec_request.mask): when the model must choose among several tools (tool_choice
 * "required", Messages' {"type": "any"}), first the call's name, as one of the tools' names
 * followed by the template's "\n```json\n" (each candidate token's bytes must extend the text
 * so far to a prefix of one of those strings), then the arguments as one JSON object
 * (pdb_json_mask); a call whose name the server wrote (a named choice) starts in the arguments.
 * Invariants: the text generated under the mask is always a prefix of NAME "\n```json\n" OBJECT
 * for a NAME of the list and a valid object (pdb_json_mask's grammar); with budget B (tokens
 * left after this one) a token is allowed only when the rest can still be written in B tokens of
 * one byte each (the name's remaining bytes, then "{}" at least), so a choice given at least
 * pdb_tool_mask_min_tokens tokens always ends with the object closed (byte-level BPE
 * vocabularies have a token for every ASCII byte). The mask is immutable after new (one per
 * request, shared by its choices); states are small values. */
#ifndef PDB_TOOL_MASK_H
#define PDB_TOOL_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_json_mask.h"
#include "pdb_status.h"

#define PDB_TOOL_MASK_MAX_HEAD 80 /* a name (<= 64 bytes) and "\n```json\n" */
#define PDB_TOOL_MASK_MAX_NAMES 128 /* the tools of a request (PDB_TOOLCALL_MAX_TOOLS) */

typedef struct pdb_tool_mask_state {
    uint8_t args;                      /* 0: in the name part; 1: in the arguments */
    uint8_t n;                         /* bytes of the name part written */
    char w[PDB_TOOL_MASK_MAX_HEAD];    /* those bytes */
    pdb_json_state js;                 /* the arguments */
} pdb_tool_mask_state;

typedef struct pdb_tool_mask pdb_tool_mask;

/* names[n_names]: the tools to choose among (at most PDB_TOOL_MASK_MAX_NAMES, each 1..64 bytes
 * without '\n'); n_names 0: the
 * name is written already, the mask constrains the arguments only. v is borrowed (it must
 * outlive the mask). */
pdb_status pdb_tool_mask_new(const pdb_json_vocab *v, const char *const *names, size_t n_names, pdb_tool_mask **out);
void pdb_tool_mask_free(pdb_tool_mask *m);
void pdb_tool_mask_state_init(const pdb_tool_mask *m, pdb_tool_mask_state *st);
/* The fewest tokens a choice needs for the mask to close the call: the shortest name part in
 * single bytes, then "{" and "}". */
int64_t pdb_tool_mask_min_tokens(const pdb_tool_mask *m);
/* Set the logits [n_vocab] of every token that may not come next to -inf; returns how many
 * remain allowed (0 once the arguments are complete: the choice ends). */
int64_t pdb_tool_mask_apply(const pdb_tool_mask *m, const pdb_tool_mask_state *st, float *logits, int64_t n_vocab, int64_t budget);
/* Advance st by token tok (one the mask allowed): 1, or 0 when it is not a valid continuation. */
int pdb_tool_mask_advance(const pdb_tool_mask *m, pdb_tool_mask_state *st, int32_t tok);
/* The call is complete (the arguments' object closed). */
int pdb_tool_mask_done(const pdb_tool_mask_state *st);

#endif
