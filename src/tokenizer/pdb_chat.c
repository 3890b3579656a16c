/* pdb_chat: DeepSeek V2/V3 chat template by hand. Invariants: one validation pass decides
 * accept/refuse before any byte is written, a sizing pass computes the exact length, and the
 * writing pass emits exactly that many bytes (asserted), so the output is never truncated. */
#include "pdb_chat.h"

#include <string.h>

#define PDB_CHAT_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define PDB_CHAT_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define PDB_CHAT_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define PDB_CHAT_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define PDB_CHAT_SYS_SEP "\n\n"

typedef enum { PDB_CHAT_SYSTEM, PDB_CHAT_USER_ROLE, PDB_CHAT_ASSISTANT_ROLE } pdb_chat_role;

static pdb_status pdb_chat_check_message(const pdb_chat_message *m, size_t i, pdb_chat_role *role) {
    if (!m->role) return pdb_err_set(PDB_INVALID, "messages[%zu]: missing role", i);
    if (!strcmp(m->role, "system")) *role = PDB_CHAT_SYSTEM;
    else if (!strcmp(m->role, "user")) *role = PDB_CHAT_USER_ROLE;
    else if (!strcmp(m->role, "assistant")) *role = PDB_CHAT_ASSISTANT_ROLE;
    else if (!strcmp(m->role, "tool"))
        return pdb_err_set(PDB_UNSUPPORTED, "messages[%zu]: role \"tool\" is not supported by the DeepSeek chat template in pdbridge", i);
    else
        return pdb_err_set(PDB_INVALID, "messages[%zu]: unknown role \"%s\" (system, user, assistant)", i, m->role);
    if (!m->content) {
        if (*role == PDB_CHAT_ASSISTANT_ROLE)
            return pdb_err_set(PDB_UNSUPPORTED, "messages[%zu]: assistant tool calls (null content) are not supported", i);
        return pdb_err_set(PDB_INVALID, "messages[%zu]: %s message without content", i, m->role);
    }
    return PDB_OK;
}

/* Append s to out at *o when out is non-NULL; always advance *o (the sizing pass passes NULL). */
static void pdb_chat_put(char *out, size_t *o, const char *s) {
    size_t l = strlen(s);
    if (out) memcpy(out + *o, s, l);
    *o += l;
}

static void pdb_chat_write(const pdb_chat_message *msgs, size_t n, bool gen, char *out, size_t *o) {
    pdb_chat_put(out, o, PDB_CHAT_BOS);
    bool first_sys = true;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(msgs[i].role, "system")) continue;
        if (!first_sys) pdb_chat_put(out, o, PDB_CHAT_SYS_SEP);
        pdb_chat_put(out, o, msgs[i].content);
        first_sys = false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "user")) {
            pdb_chat_put(out, o, PDB_CHAT_USER);
            pdb_chat_put(out, o, msgs[i].content);
        } else if (!strcmp(msgs[i].role, "assistant")) {
            pdb_chat_put(out, o, PDB_CHAT_ASSISTANT);
            pdb_chat_put(out, o, msgs[i].content);
            pdb_chat_put(out, o, PDB_CHAT_EOS);
        }
    }
    if (gen) pdb_chat_put(out, o, PDB_CHAT_ASSISTANT);
}

pdb_status pdb_chat_render_prompt(const pdb_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                                  char **text, size_t *len) {
    PDB_ASSERT(text && len && (msgs || n_msgs == 0), "pdb_chat_render_prompt: NULL argument");
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_msgs; i++) {
        pdb_chat_role role;
        PDB_TRY(pdb_chat_check_message(&msgs[i], i, &role));
        total += strlen(msgs[i].content) + 64; /* bound: content + markers, checked below */
        if (total > PDB_CHAT_MAX_BYTES)
            return pdb_err_set(PDB_TOO_LARGE, "messages: the prompt exceeds %zu bytes at messages[%zu]", PDB_CHAT_MAX_BYTES, i);
    }
    size_t need = 0;
    pdb_chat_write(msgs, n_msgs, add_generation_prompt, NULL, &need);
    char *out = malloc(need + 1);
    if (!out) return pdb_err_set(PDB_NOMEM, "chat template: out of memory for %zu bytes", need);
    size_t o = 0;
    pdb_chat_write(msgs, n_msgs, add_generation_prompt, out, &o);
    PDB_ASSERT(o == need, "pdb_chat_render_prompt: sizing and writing passes disagree");
    out[o] = 0;
    *text = out;
    *len = o;
    return PDB_OK;
}
