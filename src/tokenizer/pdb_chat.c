/* pdb_chat: DeepSeek V2/V3 chat template by hand. Invariants: one validation pass decides
 * accept/refuse before any byte is written, a sizing pass computes the exact length, and the
 * writing pass emits exactly that many bytes (asserted), so the output is never truncated. The
 * template's state (is_first: a call was written; is_tool: the last message was a tool output;
 * is_output_first: no output written yet) lives for the whole conversation, as in the Jinja
 * namespace: a second assistant message with calls is written as a continuation, quirks kept. */
#include "pdb_chat.h"

#include <string.h>

#include "pdb_tools.h"

#define PDB_CHAT_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define PDB_CHAT_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define PDB_CHAT_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define PDB_CHAT_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define PDB_CHAT_SYS_SEP "\n\n"

typedef enum { PDB_CHAT_SYSTEM, PDB_CHAT_USER_ROLE, PDB_CHAT_ASSISTANT_ROLE, PDB_CHAT_TOOL_ROLE } pdb_chat_role;

static pdb_status pdb_chat_check_message(const pdb_chat_message *m, size_t i, pdb_chat_role *role) {
    if (!m->role) return pdb_err_set(PDB_INVALID, "messages[%zu]: missing role", i);
    if (!strcmp(m->role, "system")) *role = PDB_CHAT_SYSTEM;
    else if (!strcmp(m->role, "user")) *role = PDB_CHAT_USER_ROLE;
    else if (!strcmp(m->role, "assistant")) *role = PDB_CHAT_ASSISTANT_ROLE;
    else if (!strcmp(m->role, "tool")) *role = PDB_CHAT_TOOL_ROLE;
    else
        return pdb_err_set(PDB_INVALID, "messages[%zu]: unknown role \"%s\" (system, user, assistant, tool)", i, m->role);
    if (m->n_tool_calls && *role != PDB_CHAT_ASSISTANT_ROLE)
        return pdb_err_set(PDB_INVALID, "messages[%zu]: only assistant messages carry tool calls", i);
    if (m->n_tool_calls && m->content)
        return pdb_err_set(PDB_UNSUPPORTED, "messages[%zu]: an assistant message with both content and tool calls cannot be "
                                            "rendered by the DeepSeek template (it writes the content and drops the calls); send "
                                            "the calls with content null", i);
    for (size_t k = 0; k < m->n_tool_calls; k++)
        if (!m->tool_calls[k].name || !m->tool_calls[k].arguments)
            return pdb_err_set(PDB_INVALID, "messages[%zu].tool_calls[%zu]: missing name or arguments", i, k);
    if (!m->content && !m->n_tool_calls) {
        if (*role == PDB_CHAT_ASSISTANT_ROLE)
            return pdb_err_set(PDB_INVALID, "messages[%zu]: assistant message with neither content nor tool calls", i);
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

/* One call as the template writes it: type SEP name, the fenced arguments, CALL_END. */
static void pdb_chat_put_call(char *out, size_t *o, const pdb_chat_tool_call *c) {
    pdb_chat_put(out, o, "function" PDB_TOOLS_SEP);
    pdb_chat_put(out, o, c->name);
    pdb_chat_put(out, o, PDB_TOOLS_ARGS_OPEN);
    pdb_chat_put(out, o, c->arguments);
    pdb_chat_put(out, o, PDB_TOOLS_ARGS_CLOSE PDB_TOOLS_CALL_END);
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
    bool is_first = false, is_tool = false, is_output_first = true; /* the template's namespace */
    for (size_t i = 0; i < n; i++) {
        const pdb_chat_message *m = &msgs[i];
        if (!strcmp(m->role, "user")) {
            is_tool = false;
            pdb_chat_put(out, o, PDB_CHAT_USER);
            pdb_chat_put(out, o, m->content);
        } else if (!strcmp(m->role, "assistant") && !m->content) {
            is_tool = false;
            for (size_t k = 0; k < m->n_tool_calls; k++) {
                if (!is_first) {
                    /* the first call of the conversation opens the block (and nothing closes it
                     * when it is the only one: the template's quirk, kept) */
                    pdb_chat_put(out, o, PDB_CHAT_ASSISTANT PDB_TOOLS_CALLS_BEGIN PDB_TOOLS_CALL_BEGIN);
                    pdb_chat_put_call(out, o, &m->tool_calls[k]);
                    is_first = true;
                } else {
                    pdb_chat_put(out, o, "\n" PDB_TOOLS_CALL_BEGIN);
                    pdb_chat_put_call(out, o, &m->tool_calls[k]);
                    pdb_chat_put(out, o, PDB_TOOLS_CALLS_END PDB_CHAT_EOS);
                }
            }
        } else if (!strcmp(m->role, "assistant")) {
            pdb_chat_put(out, o, is_tool ? PDB_TOOLS_OUTPUTS_END : PDB_CHAT_ASSISTANT);
            pdb_chat_put(out, o, m->content);
            pdb_chat_put(out, o, PDB_CHAT_EOS);
            is_tool = false;
        } else if (!strcmp(m->role, "tool")) {
            is_tool = true;
            pdb_chat_put(out, o, is_output_first ? PDB_TOOLS_OUTPUTS_BEGIN PDB_TOOLS_OUTPUT_BEGIN : "\n" PDB_TOOLS_OUTPUT_BEGIN);
            pdb_chat_put(out, o, m->content);
            pdb_chat_put(out, o, PDB_TOOLS_OUTPUT_END);
            is_output_first = false;
        }
    }
    if (is_tool) pdb_chat_put(out, o, PDB_TOOLS_OUTPUTS_END);
    if (gen && !is_tool) pdb_chat_put(out, o, PDB_CHAT_ASSISTANT);
}

bool pdb_chat_ends_with_tool(const pdb_chat_message *msgs, size_t n) {
    bool is_tool = false;
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !strcmp(msgs[i].role, "system")) continue;
        is_tool = !strcmp(msgs[i].role, "tool");
    }
    return is_tool;
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
        total += (msgs[i].content ? strlen(msgs[i].content) : 0) + 128; /* bound: content + markers, checked below */
        for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
            total += strlen(msgs[i].tool_calls[k].name) + strlen(msgs[i].tool_calls[k].arguments) + 160;
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
