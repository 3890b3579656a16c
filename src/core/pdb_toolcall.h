/* pdb_toolcall: tool definitions, tool choices and tool calls as data, and their OpenAI JSON:
 * a request's `tools` / `tool_choice`, an assistant message's `tool_calls`, a tool message's
 * `tool_call_id` parsed into plain structs, and a response's `tool_calls` built back (whole, or
 * as stream deltas). Engine- and template-agnostic: how a conversation with tools becomes a
 * prompt is the tokenizer's pdb_tools / pdb_chat, how generated text becomes calls is
 * pdb_tools' parser. Invariants: every string is a valid UTF-8 copy owned by the struct; a
 * function's `parameters` is kept as its JSON re-serialized once (jansson, keys in the client's
 * order, ", " and ": " separators) so that every component renders the same bytes; a parse
 * either succeeds with every field checked or fails naming the field (param) at fault. */
#ifndef PDB_TOOLCALL_H
#define PDB_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

#include "pdb_status.h"

#define PDB_TOOLCALL_MAX_TOOLS 128
#define PDB_TOOLCALL_MAX_CALLS 128          /* per assistant message */
#define PDB_TOOLCALL_MAX_NAME 64            /* bytes of a function name (OpenAI's limit) */

struct pdb_openai_error;

typedef struct pdb_tool {
    char *name;          /* [a-zA-Z0-9_-]{1,64} */
    char *description;   /* NULL when absent */
    char *parameters;    /* the JSON Schema re-serialized, NULL when absent */
} pdb_tool;

typedef enum pdb_tool_choice {
    PDB_TOOL_CHOICE_AUTO = 0,   /* the model decides (default with tools) */
    PDB_TOOL_CHOICE_NONE,       /* no call: the tools are not rendered and the text is not parsed */
    PDB_TOOL_CHOICE_REQUIRED,   /* a call must be made (forced: the named tool, or a name masked among several) */
    PDB_TOOL_CHOICE_FUNCTION,   /* this function must be called (forced) */
} pdb_tool_choice;

typedef struct pdb_tool_call {
    char *id;            /* "" when the client sent none */
    char *name;
    char *arguments;     /* the arguments text as sent (a JSON object for well-behaved clients) */
} pdb_tool_call;

/* The tools part of a request. */
typedef struct pdb_tool_set {
    pdb_tool *tools;             /* [n_tools] */
    size_t n_tools;
    pdb_tool_choice choice;
    char *choice_name;           /* PDB_TOOL_CHOICE_FUNCTION: the function (one of tools) */
    int single_call;             /* parallel_tool_calls false: the answer ends after its first call */
} pdb_tool_set;

/* The function a forced request makes the model call (tool_choice naming it, or "required" with
 * one tool), NULL when the model chooses. */
const char *pdb_toolcall_forced_name(const pdb_tool_set *t);
/* A call is forced among several tools (tool_choice "required", Messages' "any"): the server
 * writes the call's opening up to the name, and the model writes a name of the tools (masked). */
int pdb_toolcall_forced_any(const pdb_tool_set *t);
/* A call is forced (named or among several). */
int pdb_toolcall_forced(const pdb_tool_set *t);
/* The rules a forced call adds (stop_param / max_param name the fields as the client sent them:
 * "stop" or "stop_sequences", "max_tokens" or "max_completion_tokens"): no stop strings (one
 * could cut the arguments short) and, when max_tokens is given (>= 0), room for the shortest
 * call the mask can close (the name part one byte a token, then "{}"); a 400 naming the field
 * otherwise. */
pdb_status pdb_toolcall_check_forced(const pdb_tool_set *t, int64_t max_tokens, const char *max_param, int n_stop,
                                     const char *stop_param, struct pdb_openai_error *err);
/* Tools are rendered into the prompt and the generated text is parsed for calls. */
int pdb_toolcall_active(const pdb_tool_set *t);

/* The tool fields of an OpenAI chat request, one function per field (each a row of
 * pdb_openai's field table, called with the field's non-null value): `tools` (an array),
 * `parallel_tool_calls` (a boolean), `tool_choice` (checked against the tools already parsed, so
 * it comes after `tools`). t starts zeroed (no tools, choice auto). */
pdb_status pdb_toolcall_parse_tools(json_t *tools, pdb_tool_set *t, struct pdb_openai_error *err);
pdb_status pdb_toolcall_parse_parallel(json_t *ptc, pdb_tool_set *t, struct pdb_openai_error *err);
pdb_status pdb_toolcall_parse_choice(json_t *choice, pdb_tool_set *t, struct pdb_openai_error *err);
/* An assistant message's `tool_calls` (param: "messages[i]"); absent or null leaves 0 calls. */
pdb_status pdb_toolcall_parse_calls(json_t *msg, const char *param, pdb_tool_call **calls, size_t *n, struct pdb_openai_error *err);
/* Check a tool definition's fields (name rule, description a string, parameters an object) and
 * copy it; param names the entry ("tools[2]"). Shared by the Anthropic conversion. */
pdb_status pdb_toolcall_add_tool(pdb_tool_set *t, json_t *name, json_t *description, json_t *parameters, const char *param,
                                 struct pdb_openai_error *err);
/* Resolve a forced choice against the tools (the named function exists; "required" has a tool
 * at least); param names the choice field. */
pdb_status pdb_toolcall_check_choice(const pdb_tool_set *t, const char *param, struct pdb_openai_error *err);

void pdb_toolcall_set_free(pdb_tool_set *t);
void pdb_toolcall_calls_free(pdb_tool_call *calls, size_t n);
/* A malloc'd copy of calls[n] (NULL on no memory; n == 0 gives a non-NULL empty array). */
pdb_tool_call *pdb_toolcall_calls_dup(const pdb_tool_call *calls, size_t n);

/* One call of a response: whole (non-stream) or a stream delta. In a delta, id and name are set
 * on the call's first delta only (NULL = omitted); arguments is the new text. */
typedef struct pdb_toolcall_out {
    int index;
    const char *id, *name;
    const char *arguments;
    size_t arguments_len;
} pdb_toolcall_out;

/* [{"index"?, "id", "type": "function", "function": {"name", "arguments"}}] (index only in
 * deltas, where id/type/name appear on a call's first delta). */
json_t *pdb_toolcall_json(const pdb_toolcall_out *calls, size_t n, int delta);

#endif
