/* pdb_prompt: the prompt token ids of a parsed OpenAI request, computed one way for every
 * component that needs them (the decoder serves the ids, the front hashes them into the store's
 * chain, `pdbridge diff-state` replays them), so that their chain hashes match. It lives below
 * both the decoder and the front: it needs only the tokenizer, the chat template (pdb_chat) and
 * core's request type (pdb_openai). Invariant: same request and tokenizer, same ids. */
#ifndef PDB_PROMPT_H
#define PDB_PROMPT_H

#include <stdint.h>

#include "pdb_openai.h"
#include "pdb_status.h"
#include "pdb_tokenizer.h"

/* The prompt token ids of q: completions with a text prompt are BOS (when the tokenizer has one)
 * + encode(text); token-id prompts are taken as they are (the vocabulary is checked by the
 * caller); chat is encode(render(messages, add_generation_prompt)), the BOS being part of the
 * rendered text. tok may be NULL (token-id mode: text and chat are 400). *ids is malloc'd. On
 * failure *err holds the 4xx answer. */
pdb_status pdb_prompt_encode_request(const pdb_tokenizer *tok, const pdb_openai_request *q, int32_t **ids, int64_t *n_ids,
                                     pdb_openai_error *err);

#endif
