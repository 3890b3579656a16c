/* pdb_chat: the DeepSeek V2/V3 chat template, written out by hand (no Jinja). Invariant: for
 * every conversation it accepts, the text equals what tokenizer_config.json's chat_template
 * renders (golden-tested against jinja2, tool calls and tool outputs included); what the
 * template cannot render (it would fail, or drop part of a message) is refused with a status,
 * never rendered approximately. Format: docs/tokenizer.md. */
#ifndef PDB_CHAT_H
#define PDB_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "pdb_status.h"

/* Longest prompt text pdb_chat_render_prompt builds (PDB_TOO_LARGE beyond). */
#define PDB_CHAT_MAX_BYTES ((size_t)1 << 30)

typedef struct pdb_chat_tool_call {
    const char *name;      /* the template writes type "function" */
    const char *arguments; /* written as is between the fences */
} pdb_chat_tool_call;

typedef struct pdb_chat_message {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content; /* NUL-terminated UTF-8; NULL only for an assistant message that calls tools */
    const pdb_chat_tool_call *tool_calls; /* assistant with content NULL: [n_tool_calls], n >= 1 */
    size_t n_tool_calls;
} pdb_chat_message;

/* Render the conversation as the template does:
 *   BOS + system contents joined by "\n\n"
 *   + per message: user -> "<｜User｜>" + content,
 *                  assistant -> "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>"
 *                               (after tool outputs: "<｜tool▁outputs▁end｜>" + content + EOS),
 *                  assistant calling tools -> the template's call blocks (docs/tokenizer.md),
 *                  tool -> its output block
 *   + "<｜tool▁outputs▁end｜>" when the conversation ends with tool outputs, else
 *   + "<｜Assistant｜>" when add_generation_prompt.
 * System messages may appear anywhere (they are all hoisted to the front, as the template
 * does). *text is malloc'd and NUL-terminated; *len excludes the NUL. Errors name the message
 * index: unknown role or NULL content (other than an assistant's calls) is PDB_INVALID, an
 * assistant message with both content and tool calls is PDB_UNSUPPORTED (the template would
 * drop the calls). */
pdb_status pdb_chat_render_prompt(const pdb_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                                  char **text, size_t *len);
/* The conversation ends with tool outputs (the template then writes no generation prompt). */
bool pdb_chat_ends_with_tool(const pdb_chat_message *msgs, size_t n_msgs);

#endif
