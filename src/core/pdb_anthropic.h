/* pdb_anthropic: the Anthropic Messages API (/v1/messages) as data: a request body converted
 * into the internal chat request (pdb_openai_request, kind CHAT, with tools) that every other
 * component already serves, and the response message, stream events and errors built back.
 * Engine-agnostic; the decoder serves it, the front converts a request the same way to compute
 * its prompt ids. Invariants: the conversion is a pure function of the body (same body, same
 * request, hence the same prompt ids on the front and the decoder); every field is either
 * honoured or refused with a 400 naming it (unknown fields included); all strings are UTF-8
 * copies; builders emit valid JSON (invalid UTF-8 in generated text becomes U+FFFD). */
#ifndef PDB_ANTHROPIC_H
#define PDB_ANTHROPIC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "pdb_buf.h"
#include "pdb_openai.h"
#include "pdb_status.h"

/* Parse a /v1/messages body into *req (kind CHAT). system -> system messages; a user message's
 * tool_result blocks -> role "tool" messages (in block order, text blocks between them ->
 * user messages); an assistant's tool_use blocks -> its tool_calls (input re-serialized with
 * jansson's default separators); tools/tool_choice -> req->tools. On failure *err (400 with
 * param naming the field, e.g. "messages[1].content[0].type") and *req freed. */
pdb_status pdb_anthropic_parse_request(const char *body, size_t len, const pdb_openai_limits *lim, pdb_openai_request *req,
                                       pdb_openai_error *err);

/* {"type": "error", "error": {"type", "message"}} (malloc'd); the type follows the status
 * (invalid_request_error, authentication_error, not_found_error, request_too_large, api_error,
 * overloaded_error); the message names the field when err->param is set. */
char *pdb_anthropic_error_json(const pdb_openai_error *err);

typedef struct pdb_anthropic_usage {
    int64_t prompt_tokens, output_tokens, cached_tokens; /* input_tokens = prompt - cached */
} pdb_anthropic_usage;

/* One content block of a response: text, or a tool_use whose input is the call's arguments
 * text (pdb_anthropic_tool_input says how it becomes an object). */
typedef struct pdb_anthropic_block {
    int tool_use;
    const char *text;            /* text block */
    size_t text_len;
    const char *id, *name;       /* tool_use */
    const char *arguments;
    size_t arguments_len;
} pdb_anthropic_block;

/* The tool_use input for generated arguments: the arguments when they are a JSON object, {} when
 * empty, else {"pdbridge_unparsed_arguments": text} (a model cut short, or random weights:
 * docs/api.md). New reference. */
json_t *pdb_anthropic_tool_input(const char *args, size_t len);

/* The non-stream body: {"id", "type": "message", "role": "assistant", "model", "content",
 * "stop_reason", "stop_sequence", "usage"}; each key of extra is merged into the top level. */
pdb_status pdb_anthropic_build_message(const char *id, const char *model, const pdb_anthropic_block *blocks, size_t n_blocks,
                                       const char *stop_reason, const char *stop_sequence, const pdb_anthropic_usage *u,
                                       const json_t *extra, char **out, size_t *out_len);

/* Stream events ("event: TYPE\ndata: {...}\n\n"), appended to a growing buffer. */
typedef pdb_buf pdb_anthropic_sse; /* the events' bytes (p, len; oom after a failed allocation) */
void pdb_anthropic_sse_message_start(pdb_anthropic_sse *b, const char *id, const char *model, const pdb_anthropic_usage *u);
void pdb_anthropic_sse_block_start(pdb_anthropic_sse *b, int index, const pdb_anthropic_block *blk); /* text "" or tool_use */
void pdb_anthropic_sse_text_delta(pdb_anthropic_sse *b, int index, const char *text, size_t len);
void pdb_anthropic_sse_json_delta(pdb_anthropic_sse *b, int index, const char *json, size_t len);
void pdb_anthropic_sse_block_stop(pdb_anthropic_sse *b, int index);
void pdb_anthropic_sse_message_delta(pdb_anthropic_sse *b, const char *stop_reason, const char *stop_sequence,
                                     const pdb_anthropic_usage *u);
void pdb_anthropic_sse_message_stop(pdb_anthropic_sse *b, const json_t *extra);
void pdb_anthropic_sse_error(pdb_anthropic_sse *b, const pdb_openai_error *err);
/* One event from its type and data (data is consumed). */
void pdb_anthropic_sse_event(pdb_anthropic_sse *b, const char *type, json_t *data);
void pdb_anthropic_sse_free(pdb_anthropic_sse *b);

#endif
