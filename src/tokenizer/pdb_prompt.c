/* pdb_prompt: the prompt ids of an OpenAI request (see pdb_prompt.h). Moved unchanged from the
 * decoder's HTTP server (pdb_dec_server) so that the front computes them without depending on the
 * decoder's server. */
#include "pdb_prompt.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_chat.h"

pdb_status pdb_prompt_encode_request(const pdb_tokenizer *tok, const pdb_openai_request *q, int32_t **ids, int64_t *n_ids,
                                     pdb_openai_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (q->kind == PDB_OPENAI_COMPLETION && q->prompt_is_ids) {
        *ids = malloc(sizeof(int32_t) * (size_t)(q->n_prompt_ids ? q->n_prompt_ids : 1));
        if (!*ids) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
        memcpy(*ids, q->prompt_ids, sizeof(int32_t) * (size_t)q->n_prompt_ids);
        *n_ids = q->n_prompt_ids;
        return PDB_OK;
    }
    const char *param = q->kind == PDB_OPENAI_CHAT ? "messages" : "prompt";
    if (!tok)
        return pdb_openai_set_error(err, 400, param, "no_tokenizer",
                                    "this model has no tokenizer.json, so it is served in token-id mode: send the prompt as an "
                                    "array of token ids to /v1/completions");
    char *text = NULL;
    size_t len = 0;
    int add_bos = 0;
    if (q->kind == PDB_OPENAI_CHAT) {
        pdb_chat_message *m = calloc(q->n_messages, sizeof *m);
        if (!m) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
        for (size_t i = 0; i < q->n_messages; i++) m[i] = (pdb_chat_message){q->messages[i].role, q->messages[i].content};
        pdb_status st = pdb_chat_render_prompt(m, q->n_messages, true, &text, &len);
        free(m);
        if (st != PDB_OK) return pdb_openai_set_error(err, 400, "messages", "invalid_value", "%s", pdb_err_msg());
    } else {
        text = q->prompt_text;
        len = q->prompt_len;
        add_bos = pdb_tokenizer_bos_id(tok) >= 0;
    }
    int32_t *enc = NULL;
    int64_t n = 0;
    pdb_status st = pdb_tokenizer_encode(tok, text, len, &enc, &n);
    if (q->kind == PDB_OPENAI_CHAT) free(text);
    if (st != PDB_OK) return pdb_openai_set_error(err, st == PDB_TOO_LARGE ? 400 : 500, param, NULL, "%s", pdb_err_msg());
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!out) { free(enc); return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory"); }
    int64_t k = 0;
    if (add_bos) out[k++] = pdb_tokenizer_bos_id(tok);
    if (n) memcpy(out + k, enc, sizeof(int32_t) * (size_t)n);
    free(enc);
    *ids = out;
    *n_ids = k + n;
    return PDB_OK;
}
