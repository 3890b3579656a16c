/* pdb_chat: the DeepSeek V2/V3 chat template, written out by hand (no Jinja). Invariant: for
 * every conversation it accepts, the text equals what tokenizer_config.json's chat_template
 * renders (golden-tested against jinja2); what the template cannot express without tool calls
 * is refused with a status, never rendered approximately. Format: docs/tokenizer.md. */
#ifndef PDB_CHAT_H
#define PDB_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "pdb_status.h"

/* Longest prompt text pdb_chat_render_prompt builds (PDB_TOO_LARGE beyond). */
#define PDB_CHAT_MAX_BYTES ((size_t)1 << 30)

typedef struct pdb_chat_message {
    const char *role;    /* "system" | "user" | "assistant" ("tool" is PDB_UNSUPPORTED) */
    const char *content; /* NUL-terminated UTF-8; NULL only means "assistant with tool calls" */
} pdb_chat_message;

/* Render the conversation as
 *   BOS + system contents joined by "\n\n"
 *   + per message: user -> "<｜User｜>" + content,
 *                  assistant -> "<｜Assistant｜>" + content + "<｜end▁of▁sentence｜>"
 *   + "<｜Assistant｜>" when add_generation_prompt.
 * System messages may appear anywhere (they are all hoisted to the front, as the template
 * does). *text is malloc'd and NUL-terminated; *len excludes the NUL. Errors name the message
 * index: unknown role or NULL content is PDB_INVALID, tool messages and assistant tool calls
 * (content NULL) are PDB_UNSUPPORTED. */
pdb_status pdb_chat_render_prompt(const pdb_chat_message *msgs, size_t n_msgs, bool add_generation_prompt,
                                  char **text, size_t *len);

#endif
