/* pdb_prompt: the prompt ids of an OpenAI request (see pdb_prompt.h). Moved unchanged from the
 * decoder's HTTP server (pdb_dec_server) so that the front computes them without depending on the
 * decoder's server. */
#include "pdb_prompt.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_chat.h"
#include "pdb_tools.h"

/* The chat prompt text of q: its messages (an assistant's calls and tool outputs included), the
 * tools section as one more system message when tools are active, and the forced-call prefix
 * after the generation prompt when a call is forced (pdb_tools: up to and including the name when
 * it is named, up to the name's separator when the model chooses it among several tools). */
static pdb_status pdb_prompt_render_chat(const pdb_openai_request *q, char **text, size_t *len) {
    int tools_on = pdb_toolcall_active(&q->tools);
    size_t n = q->n_messages + (tools_on ? 1 : 0), n_calls = 0;
    for (size_t i = 0; i < q->n_messages; i++) n_calls += q->messages[i].n_tool_calls;
    pdb_chat_message *m = calloc(n + 1, sizeof *m);
    pdb_chat_tool_call *calls = calloc(n_calls + 1, sizeof *calls);
    pdb_tools_def *defs = calloc(q->tools.n_tools + 1, sizeof *defs);
    char *section = NULL, *prefix = NULL, *out = NULL;
    size_t section_len = 0, prefix_len = 0, out_len = 0;
    pdb_status st = m && calls && defs ? PDB_OK : pdb_err_set(PDB_NOMEM, "out of memory");
    for (size_t i = 0, c = 0; st == PDB_OK && i < q->n_messages; i++) {
        const pdb_openai_message *qm = &q->messages[i];
        m[i] = (pdb_chat_message){qm->role, qm->content, calls + c, qm->n_tool_calls};
        if (qm->n_tool_calls && qm->content_null) m[i].content = NULL;
        for (size_t k = 0; k < qm->n_tool_calls; k++, c++) calls[c] = (pdb_chat_tool_call){qm->tool_calls[k].name, qm->tool_calls[k].arguments};
    }
    if (st == PDB_OK && tools_on) {
        for (size_t i = 0; i < q->tools.n_tools; i++)
            defs[i] = (pdb_tools_def){q->tools.tools[i].name, q->tools.tools[i].description, q->tools.tools[i].parameters};
        st = pdb_tools_render_section(defs, q->tools.n_tools, &section, &section_len);
        if (st == PDB_OK) m[q->n_messages] = (pdb_chat_message){"system", section, NULL, 0};
    }
    if (st == PDB_OK) st = pdb_chat_render_prompt(m, n, true, &out, &out_len);
    const char *forced = tools_on ? pdb_toolcall_forced_name(&q->tools) : NULL;
    if (st == PDB_OK && tools_on && pdb_toolcall_forced(&q->tools)) /* among several: up to the name (NULL) */
        st = pdb_tools_forced_prefix(forced, &prefix, &prefix_len);
    if (st == PDB_OK && prefix) {
        char *grown = realloc(out, out_len + prefix_len + 1);
        if (!grown) st = pdb_err_set(PDB_NOMEM, "out of memory");
        else {
            memcpy(grown + out_len, prefix, prefix_len + 1);
            out = grown;
            out_len += prefix_len;
        }
    }
    free(m);
    free(calls);
    free(defs);
    free(section);
    free(prefix);
    if (st != PDB_OK) { free(out); return st; }
    *text = out;
    *len = out_len;
    return PDB_OK;
}

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
        pdb_status st = pdb_prompt_render_chat(q, &text, &len);
        if (st == PDB_NOMEM) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
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
