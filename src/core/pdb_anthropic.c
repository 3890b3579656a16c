/* pdb_anthropic: Anthropic Messages <-> the internal chat request and response (see
 * pdb_anthropic.h). Invariants: the parse keeps no reference into the jansson tree, fills *err
 * on every failure path and frees *req then; every object it reads has its keys checked against
 * the ones it honours, so an unknown or unsupported field is a 400 naming it, never ignored. */
#include "pdb_anthropic.h"

#include <math.h>
#include <string.h>

#define AN_MAX_BLOCKS 4096 /* content blocks per message */

static pdb_status an_oom(pdb_openai_error *err) { return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory"); }

/* Every key of o is in allowed (NULL-terminated), else 400 naming param.key. */
static pdb_status an_keys(json_t *o, const char *const *allowed, const char *param, pdb_openai_error *err) {
    const char *k = pdb_openai_unknown_key(o, allowed);
    if (!k) return PDB_OK;
    char p[160];
    if (param[0]) snprintf(p, sizeof p, "%s.%.60s", param, k);
    else snprintf(p, sizeof p, "%.60s", k);
    return pdb_openai_set_error(err, 400, p, "unknown_parameter", "%s: unknown field (not part of the Messages API as served here, "
                                "see docs/api.md)", p);
}

/* cache_control is accepted: every prompt prefix is cached by the store anyway (docs/api.md). */
static pdb_status an_cache_control(json_t *o, const char *param, pdb_openai_error *err) {
    json_t *cc = json_object_get(o, "cache_control");
    if (!cc || json_is_null(cc)) return PDB_OK;
    json_t *type = json_object_get(cc, "type");
    if (!json_is_object(cc) || !json_is_string(type) || strcmp(json_string_value(type), "ephemeral"))
        return pdb_openai_set_error(err, 400, param, "invalid_value", "%s.cache_control must be {\"type\": \"ephemeral\"}", param);
    return PDB_OK;
}

/* ---- messages ------------------------------------------------------------------------------- */

typedef struct { pdb_openai_request *r; size_t cap; } an_msgs;

static pdb_openai_message *an_push(an_msgs *m, const char *role, pdb_openai_error *err) {
    if (m->r->n_messages >= PDB_OPENAI_MAX_MESSAGES) {
        pdb_openai_set_error(err, 400, "messages", "invalid_value", "the conversation has more than %d messages (tool results count "
                             "as one each)", PDB_OPENAI_MAX_MESSAGES);
        return NULL;
    }
    if (m->r->n_messages == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        pdb_openai_message *nm = realloc(m->r->messages, nc * sizeof *nm);
        if (!nm) { an_oom(err); return NULL; }
        m->r->messages = nm;
        m->cap = nc;
    }
    pdb_openai_message *d = &m->r->messages[m->r->n_messages];
    memset(d, 0, sizeof *d);
    d->role = pdb_openai_dup(role, strlen(role));
    if (!d->role) { an_oom(err); return NULL; }
    m->r->n_messages++;
    return d;
}

/* Append text to *s (joined with "\n" when both are non-empty). */
static int an_append(char **s, const char *t, size_t n) {
    size_t l = *s ? strlen(*s) : 0;
    char *ns = realloc(*s, l + n + 2);
    if (!ns) return 0;
    if (l && n) ns[l++] = '\n';
    memcpy(ns + l, t, n);
    ns[l + n] = 0;
    *s = ns;
    return 1;
}

static pdb_status an_text_block(json_t *b, const char *param, char **into, pdb_openai_error *err) {
    static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
    PDB_TRY(an_keys(b, keys, param, err));
    PDB_TRY(an_cache_control(b, param, err));
    json_t *text = json_object_get(b, "text"), *cit = json_object_get(b, "citations");
    if (!json_is_string(text)) return pdb_openai_set_error(err, 400, param, "invalid_type", "%s.text must be a string", param);
    if (cit && !json_is_null(cit) && !(json_is_array(cit) && json_array_size(cit) == 0))
        return pdb_openai_set_error(err, 400, param, "unsupported_value", "%s.citations are not supported", param);
    return an_append(into, json_string_value(text), json_string_length(text)) ? PDB_OK : an_oom(err);
}

/* A tool_result's content: a string or text blocks. */
static pdb_status an_result_content(json_t *c, const char *param, char **into, pdb_openai_error *err) {
    if (!c || json_is_null(c)) return an_append(into, "", 0) ? PDB_OK : an_oom(err);
    if (json_is_string(c)) return an_append(into, json_string_value(c), json_string_length(c)) ? PDB_OK : an_oom(err);
    if (!json_is_array(c)) return pdb_openai_set_error(err, 400, param, "invalid_type", "%s must be a string or an array of text blocks", param);
    if (!an_append(into, "", 0)) return an_oom(err);
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        char p[200];
        snprintf(p, sizeof p, "%.160s[%zu]", param, i);
        json_t *type = json_object_get(b, "type");
        if (!json_is_object(b) || !json_is_string(type) || strcmp(json_string_value(type), "text"))
            return pdb_openai_set_error(err, 400, p, "unsupported_value", "%s: only text blocks are supported in a tool result", p);
        PDB_TRY(an_text_block(b, p, into, err));
    }
    return PDB_OK;
}

/* Block i of param's content: its parameter name into p ("PARAM.content[i]") and its type, or
 * NULL with a 400 in *err when it is not an object with a string type. */
static const char *an_block_type(json_t *b, const char *param, size_t i, char *p, size_t np, pdb_openai_error *err) {
    snprintf(p, np, "%s.content[%zu]", param, i);
    json_t *type = json_object_get(b, "type");
    if (!json_is_object(b) || !json_is_string(type)) {
        pdb_openai_set_error(err, 400, p, "invalid_type", "%s must be a content block with a type", p);
        return NULL;
    }
    return json_string_value(type);
}

static pdb_status an_user_message(an_msgs *m, json_t *content, const char *param, pdb_openai_error *err) {
    pdb_openai_message *text_msg = NULL; /* the user message that consecutive text blocks go to */
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        char p[128];
        const char *t = an_block_type(b, param, i, p, sizeof p, err);
        if (!t) return PDB_INVALID;
        if (!strcmp(t, "text")) {
            if (!text_msg && !(text_msg = an_push(m, "user", err))) return PDB_INVALID;
            PDB_TRY(an_text_block(b, p, &text_msg->content, err));
        } else if (!strcmp(t, "tool_result")) {
            static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            PDB_TRY(an_keys(b, keys, p, err));
            PDB_TRY(an_cache_control(b, p, err));
            json_t *id = json_object_get(b, "tool_use_id"), *ie = json_object_get(b, "is_error");
            if (!json_is_string(id)) return pdb_openai_set_error(err, 400, p, "invalid_type", "%s.tool_use_id must be a string", p);
            if (ie && !json_is_null(ie) && !json_is_boolean(ie))
                return pdb_openai_set_error(err, 400, p, "invalid_type", "%s.is_error must be a boolean", p);
            pdb_openai_message *tm = an_push(m, "tool", err);
            if (!tm) return PDB_INVALID;
            text_msg = NULL;
            tm->tool_call_id = pdb_openai_dup(json_string_value(id), json_string_length(id));
            if (!tm->tool_call_id) return an_oom(err);
            /* the template has no error flag: an error result is its text after "Error: " */
            if (json_is_true(ie) && !an_append(&tm->content, "Error: ", 7)) return an_oom(err);
            char *rc = NULL;
            char pc[160];
            snprintf(pc, sizeof pc, "%s.content", p);
            pdb_status st = an_result_content(json_object_get(b, "content"), pc, &rc, err);
            if (st == PDB_OK) {
                size_t l = tm->content ? strlen(tm->content) : 0, rl = strlen(rc);
                char *nc = realloc(tm->content, l + rl + 1);
                if (!nc) st = an_oom(err);
                else { memcpy(nc + l, rc, rl + 1); tm->content = nc; }
            }
            free(rc);
            if (st != PDB_OK) return st;
        } else {
            return pdb_openai_set_error(err, 400, p, "unsupported_value",
                                        "%s.type is '%.40s'; a user message takes text and tool_result blocks here", p, t);
        }
    }
    return PDB_OK;
}

static pdb_status an_assistant_message(an_msgs *m, json_t *content, const char *param, pdb_openai_error *err) {
    pdb_openai_message *am = an_push(m, "assistant", err);
    if (!am) return PDB_INVALID;
    size_t n = json_array_size(content), i;
    am->tool_calls = calloc(n ? n : 1, sizeof *am->tool_calls);
    if (!am->tool_calls) return an_oom(err);
    json_t *b;
    json_array_foreach(content, i, b) {
        char p[128];
        const char *t = an_block_type(b, param, i, p, sizeof p, err);
        if (!t) return PDB_INVALID;
        if (!strcmp(t, "text")) {
            PDB_TRY(an_text_block(b, p, &am->content, err));
        } else if (!strcmp(t, "tool_use")) {
            static const char *const keys[] = {"type", "id", "name", "input", "cache_control", NULL};
            PDB_TRY(an_keys(b, keys, p, err));
            PDB_TRY(an_cache_control(b, p, err));
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input))
                return pdb_openai_set_error(err, 400, p, "invalid_value", "%s must have id and name strings and an input object", p);
            if (am->n_tool_calls >= PDB_TOOLCALL_MAX_CALLS)
                return pdb_openai_set_error(err, 400, p, "invalid_value", "more than %d tool_use blocks", PDB_TOOLCALL_MAX_CALLS);
            pdb_tool_call *c = &am->tool_calls[am->n_tool_calls++];
            c->id = pdb_openai_dup(json_string_value(id), json_string_length(id));
            c->name = pdb_openai_dup(json_string_value(name), json_string_length(name));
            c->arguments = json_dumps(input, JSON_PRESERVE_ORDER);
            if (!c->id || !c->name || !c->arguments) return an_oom(err);
        } else {
            return pdb_openai_set_error(err, 400, p, "unsupported_value",
                                        "%s.type is '%.40s'; an assistant message takes text and tool_use blocks here", p, t);
        }
    }
    if (!am->content) {
        am->content = pdb_openai_dup("", 0);
        if (!am->content) return an_oom(err);
        am->content_null = am->n_tool_calls > 0;
    } else if (am->n_tool_calls && !am->content[0]) {
        am->content_null = 1;
    }
    return PDB_OK;
}

static pdb_status an_messages(json_t *root, pdb_openai_request *r, pdb_openai_error *err) {
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return pdb_openai_set_error(err, 400, "messages", "invalid_value", "messages: a non-empty array is required");
    an_msgs m = {r, 0};
    /* system first: the template hoists system text anyway */
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        pdb_openai_message *sm = an_push(&m, "system", err);
        if (!sm) return PDB_INVALID;
        if (json_is_string(sys)) {
            if (!an_append(&sm->content, json_string_value(sys), json_string_length(sys))) return an_oom(err);
        } else if (json_is_array(sys)) {
            if (!an_append(&sm->content, "", 0)) return an_oom(err);
            size_t i;
            json_t *b;
            json_array_foreach(sys, i, b) {
                char p[64];
                snprintf(p, sizeof p, "system[%zu]", i);
                json_t *type = json_object_get(b, "type");
                if (!json_is_object(b) || !json_is_string(type) || strcmp(json_string_value(type), "text"))
                    return pdb_openai_set_error(err, 400, p, "unsupported_value", "%s: system takes text blocks", p);
                PDB_TRY(an_text_block(b, p, &sm->content, err));
            }
        } else {
            return pdb_openai_set_error(err, 400, "system", "invalid_type", "system must be a string or an array of text blocks");
        }
    }
    size_t i;
    json_t *msg;
    json_array_foreach(msgs, i, msg) {
        char p[48];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(msg)) return pdb_openai_set_error(err, 400, p, "invalid_type", "%s must be an object", p);
        static const char *const keys[] = {"role", "content", NULL};
        PDB_TRY(an_keys(msg, keys, p, err));
        json_t *role = json_object_get(msg, "role"), *content = json_object_get(msg, "content");
        const char *rs = json_string_value(role);
        if (!rs || (strcmp(rs, "user") && strcmp(rs, "assistant")))
            return pdb_openai_set_error(err, 400, p, "invalid_value", "%s.role must be \"user\" or \"assistant\"", p);
        if (json_is_string(content)) {
            pdb_openai_message *d = an_push(&m, rs, err);
            if (!d) return PDB_INVALID;
            if (!an_append(&d->content, json_string_value(content), json_string_length(content))) return an_oom(err);
            continue;
        }
        if (!json_is_array(content) || json_array_size(content) > AN_MAX_BLOCKS)
            return pdb_openai_set_error(err, 400, p, "invalid_type", "%s.content must be a string or an array of up to %d blocks", p,
                                        AN_MAX_BLOCKS);
        PDB_TRY(!strcmp(rs, "user") ? an_user_message(&m, content, p, err) : an_assistant_message(&m, content, p, err));
    }
    for (size_t k = 0; k < r->n_messages; k++) /* every content is a string, "" at least */
        if (!r->messages[k].content && !(r->messages[k].content = pdb_openai_dup("", 0))) return an_oom(err);
    return PDB_OK;
}

/* ---- tools ---------------------------------------------------------------------------------- */

static pdb_status an_tools(json_t *root, pdb_tool_set *t, pdb_openai_error *err) {
    memset(t, 0, sizeof *t);
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return pdb_openai_set_error(err, 400, "tools", "invalid_type", "tools must be an array");
        size_t i;
        json_t *e;
        json_array_foreach(tools, i, e) {
            char p[48];
            snprintf(p, sizeof p, "tools[%zu]", i);
            if (!json_is_object(e)) return pdb_openai_set_error(err, 400, p, "invalid_type", "%s must be an object", p);
            json_t *type = json_object_get(e, "type");
            if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "custom")))
                return pdb_openai_set_error(err, 400, p, "unsupported_value",
                                            "%s.type '%.40s': only client tools (type \"custom\" or absent) are served", p,
                                            json_is_string(type) ? json_string_value(type) : "?");
            static const char *const keys[] = {"type", "name", "description", "input_schema", "cache_control", NULL};
            PDB_TRY(an_keys(e, keys, p, err));
            PDB_TRY(an_cache_control(e, p, err));
            json_t *schema = json_object_get(e, "input_schema");
            if (!json_is_object(schema))
                return pdb_openai_set_error(err, 400, p, "invalid_value", "%s.input_schema must be a JSON Schema object", p);
            PDB_TRY(pdb_toolcall_add_tool(t, json_object_get(e, "name"), json_object_get(e, "description"), schema, p, err));
        }
    }
    json_t *c = json_object_get(root, "tool_choice");
    if (!c || json_is_null(c)) return PDB_OK;
    if (!json_is_object(c)) return pdb_openai_set_error(err, 400, "tool_choice", "invalid_type", "tool_choice must be an object");
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    PDB_TRY(an_keys(c, keys, "tool_choice", err));
    json_t *type = json_object_get(c, "type"), *name = json_object_get(c, "name"), *dp = json_object_get(c, "disable_parallel_tool_use");
    const char *ts = json_string_value(type);
    if (dp && !json_is_null(dp) && !json_is_boolean(dp))
        return pdb_openai_set_error(err, 400, "tool_choice.disable_parallel_tool_use", "invalid_type",
                                    "tool_choice.disable_parallel_tool_use must be a boolean");
    t->single_call = json_is_true(dp);
    if (ts && !strcmp(ts, "auto")) t->choice = PDB_TOOL_CHOICE_AUTO;
    else if (ts && !strcmp(ts, "none")) t->choice = PDB_TOOL_CHOICE_NONE;
    else if (ts && !strcmp(ts, "any")) t->choice = PDB_TOOL_CHOICE_REQUIRED;
    else if (ts && !strcmp(ts, "tool")) {
        if (!json_is_string(name)) return pdb_openai_set_error(err, 400, "tool_choice.name", "invalid_type", "tool_choice.name must be a string");
        t->choice = PDB_TOOL_CHOICE_FUNCTION;
        t->choice_name = pdb_openai_dup(json_string_value(name), json_string_length(name));
        if (!t->choice_name) return an_oom(err);
    } else {
        return pdb_openai_set_error(err, 400, "tool_choice.type", "invalid_value", "tool_choice.type must be auto, any, tool or none");
    }
    if (t->choice != PDB_TOOL_CHOICE_FUNCTION && name && !json_is_null(name))
        return pdb_openai_set_error(err, 400, "tool_choice.name", "invalid_value", "tool_choice.name is only for type \"tool\"");
    return pdb_toolcall_check_choice(t, "tool_choice", err);
}

/* ---- the request ---------------------------------------------------------------------------- */

static pdb_status an_number(json_t *root, const char *key, double lo, double hi, int lo_open, double *out, pdb_openai_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return PDB_OK;
    if (!json_is_number(v)) return pdb_openai_set_error(err, 400, key, "invalid_type", "%s must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
        return pdb_openai_set_error(err, 400, key, "invalid_value", "%s must be in %s%g, %g], got %g", key, lo_open ? "(" : "[", lo, hi, d);
    *out = d;
    return PDB_OK;
}

static pdb_status an_fields(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *r, pdb_openai_error *err) {
    static const char *const keys[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p",
                                       "top_k", "stream", "tools", "tool_choice", "metadata", NULL};
    PDB_TRY(an_keys(root, keys, "", err));
    json_t *model = json_object_get(root, "model");
    if (!json_is_string(model)) return pdb_openai_set_error(err, 400, "model", "invalid_type", "model: a string is required");
    r->model = pdb_openai_dup(json_string_value(model), json_string_length(model));
    if (!r->model) return an_oom(err);
    json_t *mt = json_object_get(root, "max_tokens");
    if (!json_is_integer(mt)) return pdb_openai_set_error(err, 400, "max_tokens", "invalid_type", "max_tokens: an integer is required");
    json_int_t m = json_integer_value(mt);
    if (m < 1) return pdb_openai_set_error(err, 400, "max_tokens", "invalid_value", "max_tokens must be >= 1, got %lld", (long long)m);
    if (lim && lim->max_context > 0 && m > lim->max_context)
        return pdb_openai_set_error(err, 400, "max_tokens", "invalid_value", "max_tokens is %lld, more than the model's context length (%lld)",
                                    (long long)m, (long long)lim->max_context);
    r->max_tokens = m;
    PDB_TRY(an_messages(root, r, err));
    PDB_TRY(an_tools(root, &r->tools, err));
    PDB_TRY(an_number(root, "temperature", 0, 1, 0, &r->temperature, err));
    PDB_TRY(an_number(root, "top_p", 0, 1, 1, &r->top_p, err));
    json_t *tk = json_object_get(root, "top_k");
    if (tk && !json_is_null(tk)) {
        if (!json_is_integer(tk) || json_integer_value(tk) < 0 || json_integer_value(tk) > INT32_MAX)
            return pdb_openai_set_error(err, 400, "top_k", "invalid_value", "top_k must be a non-negative integer");
        r->top_k = (int32_t)json_integer_value(tk);
    }
    json_t *st = json_object_get(root, "stream");
    if (st && !json_is_null(st)) {
        if (!json_is_boolean(st)) return pdb_openai_set_error(err, 400, "stream", "invalid_type", "stream must be a boolean");
        r->stream = json_is_true(st);
    }
    json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md)) {
        if (!json_is_object(md)) return pdb_openai_set_error(err, 400, "metadata", "invalid_type", "metadata must be an object");
        static const char *const mkeys[] = {"user_id", NULL};
        PDB_TRY(an_keys(md, mkeys, "metadata", err));
        json_t *uid = json_object_get(md, "user_id");
        if (uid && !json_is_null(uid) && !json_is_string(uid))
            return pdb_openai_set_error(err, 400, "metadata.user_id", "invalid_type", "metadata.user_id must be a string");
    }
    json_t *ss = json_object_get(root, "stop_sequences");
    if (ss && !json_is_null(ss)) {
        if (!json_is_array(ss)) return pdb_openai_set_error(err, 400, "stop_sequences", "invalid_type", "stop_sequences must be an array");
        if (json_array_size(ss) > PDB_OPENAI_MAX_STOP)
            return pdb_openai_set_error(err, 400, "stop_sequences", "invalid_value", "stop_sequences has %zu strings (limit %d)",
                                        json_array_size(ss), PDB_OPENAI_MAX_STOP);
        size_t i;
        json_t *v;
        json_array_foreach(ss, i, v) {
            if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > PDB_OPENAI_MAX_STOP_BYTES)
                return pdb_openai_set_error(err, 400, "stop_sequences", "invalid_value",
                                            "stop_sequences[%zu] must be a non-empty string of at most %d bytes", i, PDB_OPENAI_MAX_STOP_BYTES);
            r->stop[r->n_stop] = pdb_openai_dup(json_string_value(v), json_string_length(v));
            if (!r->stop[r->n_stop]) return an_oom(err);
            r->stop_len[r->n_stop++] = json_string_length(v);
        }
    }
    if (pdb_toolcall_active(&r->tools)) PDB_TRY(pdb_toolcall_check_forced(&r->tools, r->max_tokens, "max_tokens", r->n_stop, "stop_sequences", err));
    return PDB_OK;
}

static pdb_status an_root(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *req, pdb_openai_error *err) {
    if (!json_is_object(root)) return pdb_openai_set_error(err, 400, NULL, "invalid_type", "request body must be a JSON object");
    return an_fields(root, lim, req, err);
}

pdb_status pdb_anthropic_parse_request(const char *body, size_t len, const pdb_openai_limits *lim, pdb_openai_request *req,
                                       pdb_openai_error *err) {
    return pdb_openai_parse_body(PDB_OPENAI_CHAT, body, len, lim, an_root, req, err);
}

/* ---- building ------------------------------------------------------------------------------- */

char *pdb_anthropic_error_json(const pdb_openai_error *e) {
    const char *type = e->status == 401 ? "authentication_error" : e->status == 403 ? "permission_error"
                     : e->status == 404 ? "not_found_error" : e->status == 413 ? "request_too_large"
                     : e->status == 429 ? "rate_limit_error" : e->status == 503 || e->status == 529 ? "overloaded_error"
                     : e->status >= 500 ? "api_error" : "invalid_request_error";
    json_t *m = pdb_openai_json_text(e->message, strlen(e->message));
    json_t *root = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", type, "message", m ? m : json_string("error"));
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return s;
}

json_t *pdb_anthropic_tool_input(const char *args, size_t len) {
    size_t a = 0;
    while (a < len && (args[a] == ' ' || args[a] == '\n' || args[a] == '\r' || args[a] == '\t')) a++;
    if (a == len) return json_object();
    json_t *j = json_loadb(args, len, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(j)) return j;
    json_decref(j);
    json_t *raw = pdb_openai_json_text(args, len);
    return json_pack("{s:o}", "pdbridge_unparsed_arguments", raw ? raw : json_string(""));
}

static json_t *an_usage_json(const pdb_anthropic_usage *u) {
    return json_pack("{s:I, s:I, s:I}", "input_tokens", (json_int_t)(u->prompt_tokens - u->cached_tokens), "output_tokens",
                     (json_int_t)u->output_tokens, "cache_read_input_tokens", (json_int_t)u->cached_tokens);
}

static json_t *an_block_json(const pdb_anthropic_block *b, int start) {
    if (!b->tool_use) {
        json_t *t = start ? json_string("") : pdb_openai_json_text(b->text, b->text_len);
        return json_pack("{s:s, s:o}", "type", "text", "text", t ? t : json_string(""));
    }
    json_t *input = start ? json_object() : pdb_anthropic_tool_input(b->arguments, b->arguments_len);
    return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", b->id ? b->id : "", "name", b->name ? b->name : "", "input",
                     input ? input : json_object());
}

pdb_status pdb_anthropic_build_message(const char *id, const char *model, const pdb_anthropic_block *blocks, size_t n_blocks,
                                       const char *stop_reason, const char *stop_sequence, const pdb_anthropic_usage *u,
                                       const json_t *extra, char **out, size_t *out_len) {
    json_t *content = json_array();
    for (size_t i = 0; content && i < n_blocks; i++) json_array_append_new(content, an_block_json(&blocks[i], 0));
    json_t *root = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", id, "type", "message", "role", "assistant", "model",
                             model, "content", content ? content : json_array(), "stop_reason", stop_reason, "stop_sequence",
                             stop_sequence ? json_string(stop_sequence) : json_null(), "usage", an_usage_json(u));
    if (root && extra && json_is_object(extra)) json_object_update(root, (json_t *)extra);
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!s) return pdb_err_set(PDB_NOMEM, "anthropic: cannot build the response JSON");
    *out = s;
    *out_len = strlen(s);
    return PDB_OK;
}

void pdb_anthropic_sse_event(pdb_anthropic_sse *b, const char *type, json_t *data) {
    char *s = data ? json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(data);
    if (!s) { b->oom = 1; return; }
    pdb_buf_put(b, "event: ", 7);
    pdb_buf_put(b, type, strlen(type));
    pdb_buf_put(b, "\ndata: ", 7);
    pdb_buf_put(b, s, strlen(s));
    pdb_buf_put(b, "\n\n", 2);
    free(s);
}

void pdb_anthropic_sse_message_start(pdb_anthropic_sse *b, const char *id, const char *model, const pdb_anthropic_usage *u) {
    pdb_anthropic_sse_event(b, "message_start",
                            json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start", "message", "id",
                                      id, "type", "message", "role", "assistant", "model", model, "content", "stop_reason",
                                      "stop_sequence", "usage", an_usage_json(u)));
}

void pdb_anthropic_sse_block_start(pdb_anthropic_sse *b, int index, const pdb_anthropic_block *blk) {
    pdb_anthropic_sse_event(b, "content_block_start",
                            json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", index, "content_block",
                                      an_block_json(blk, 1)));
}

void pdb_anthropic_sse_text_delta(pdb_anthropic_sse *b, int index, const char *text, size_t len) {
    json_t *t = pdb_openai_json_text(text, len);
    pdb_anthropic_sse_event(b, "content_block_delta",
                            json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", index, "delta", "type",
                                      "text_delta", "text", t ? t : json_string("")));
}

void pdb_anthropic_sse_json_delta(pdb_anthropic_sse *b, int index, const char *json, size_t len) {
    json_t *t = pdb_openai_json_text(json, len);
    pdb_anthropic_sse_event(b, "content_block_delta",
                            json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", index, "delta", "type",
                                      "input_json_delta", "partial_json", t ? t : json_string("")));
}

void pdb_anthropic_sse_block_stop(pdb_anthropic_sse *b, int index) {
    pdb_anthropic_sse_event(b, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index", index));
}

void pdb_anthropic_sse_message_delta(pdb_anthropic_sse *b, const char *stop_reason, const char *stop_sequence,
                                     const pdb_anthropic_usage *u) {
    pdb_anthropic_sse_event(b, "message_delta",
                            json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason", stop_reason,
                                      "stop_sequence", stop_sequence ? json_string(stop_sequence) : json_null(), "usage",
                                      an_usage_json(u)));
}

void pdb_anthropic_sse_message_stop(pdb_anthropic_sse *b, const json_t *extra) {
    json_t *d = json_pack("{s:s}", "type", "message_stop");
    if (d && extra && json_is_object(extra)) json_object_update(d, (json_t *)extra);
    pdb_anthropic_sse_event(b, "message_stop", d);
}

void pdb_anthropic_sse_error(pdb_anthropic_sse *b, const pdb_openai_error *err) {
    char *s = pdb_anthropic_error_json(err);
    json_t *j = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    pdb_anthropic_sse_event(b, "error", j);
}

void pdb_anthropic_sse_free(pdb_anthropic_sse *b) { pdb_buf_free(b); }
