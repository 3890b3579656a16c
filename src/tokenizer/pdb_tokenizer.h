/* pdb_tokenizer: byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json; the one
 * tokenizer every component (front, decoder, tools) calls. Invariants: after
 * pdb_tokenizer_load() returns the object is immutable, so every function here may be called
 * from any number of threads at once; encode produces the ids HF `tokenizers` produces with
 * add_special_tokens=false for any valid UTF-8 input (golden-tested), and for any byte string
 * decode(encode(s)) == s byte for byte. See docs/tokenizer.md for the supported subset. */
#ifndef PDB_TOKENIZER_H
#define PDB_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pdb_status.h"

/* Longest text encode accepts, and most ids decode accepts (PDB_TOO_LARGE beyond). */
#define PDB_TOKENIZER_MAX_TEXT ((size_t)1 << 30)
#define PDB_TOKENIZER_MAX_IDS ((int64_t)1 << 30)

typedef struct pdb_tokenizer pdb_tokenizer;

/* Load PATH: a tokenizer.json file, or a directory holding one. bos/eos come from a
 * tokenizer_config.json beside it when present, else from the DeepSeek names
 * "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>". On failure *out is NULL and the error
 * message names the file and the JSON field at fault. */
pdb_status pdb_tokenizer_load(const char *path, pdb_tokenizer **out);
void pdb_tokenizer_free(pdb_tokenizer *tok);

/* Encode len bytes of text (need not be NUL-terminated, may hold NULs and invalid UTF-8) into
 * a malloc'd array *ids of *n_ids ids (free() it; *ids may be NULL when *n_ids is 0). Added
 * tokens (special or not) found in the text are emitted as their ids; no BOS is added. */
pdb_status pdb_tokenizer_encode(const pdb_tokenizer *tok, const char *text, size_t len,
                                int32_t **ids, int64_t *n_ids);

/* Decode ids into malloc'd bytes *text (NUL-terminated, *len excludes the NUL; free() it).
 * Added/special tokens decode to their content. The bytes are returned as-is: ids that split a
 * UTF-8 character give an incomplete character (HF would print U+FFFD). An id with no token is
 * PDB_INVALID. */
pdb_status pdb_tokenizer_decode(const pdb_tokenizer *tok, const int32_t *ids, int64_t n_ids,
                                char **text, size_t *len);

/* The bytes one id decodes to (not NUL-terminated), or NULL when id has no token. For
 * streaming: concatenating these for a sequence of ids equals pdb_tokenizer_decode. */
const char *pdb_tokenizer_token_bytes(const pdb_tokenizer *tok, int32_t id, size_t *len);

/* Token string as written in tokenizer.json (byte-level alphabet, e.g. "Ġthe") -> id, or -1.
 * Added tokens take precedence, as in HF. */
int32_t pdb_tokenizer_token_to_id(const pdb_tokenizer *tok, const char *token, size_t len);
/* id -> token string as written in tokenizer.json (NUL-terminated, owned by tok), or NULL. */
const char *pdb_tokenizer_id_to_token(const pdb_tokenizer *tok, int32_t id);

/* Max id + 1 over model.vocab and added_tokens (ids in between may have no token). */
int32_t pdb_tokenizer_vocab_size(const pdb_tokenizer *tok);
/* 1 when id is an added token marked "special": true. */
int pdb_tokenizer_is_special(const pdb_tokenizer *tok, int32_t id);
int32_t pdb_tokenizer_bos_id(const pdb_tokenizer *tok); /* -1 when unknown */
int32_t pdb_tokenizer_eos_id(const pdb_tokenizer *tok); /* -1 when unknown */
/* The tokenizer.json path it was loaded from. */
const char *pdb_tokenizer_path(const pdb_tokenizer *tok);

#endif
