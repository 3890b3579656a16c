/* pdb_toolcall: tools and tool calls as data, OpenAI JSON in and out (see pdb_toolcall.h).
 * Invariants: on failure *err names the field and whatever was parsed so far stays owned by the
 * caller's struct (freed by pdb_toolcall_set_free / pdb_toolcall_calls_free); no reference into
 * the jansson tree is kept. */
#include "pdb_toolcall.h"

#include <string.h>

#include "pdb_openai.h"

static pdb_status tc_oom(struct pdb_openai_error *err) { return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory"); }

static int tc_name_ok(const char *s, size_t n) {
    if (n == 0 || n > PDB_TOOLCALL_MAX_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return 0;
    }
    return 1;
}

const char *pdb_toolcall_forced_name(const pdb_tool_set *t) {
    if (!t || !t->n_tools) return NULL;
    if (t->choice == PDB_TOOL_CHOICE_FUNCTION) return t->choice_name;
    if (t->choice == PDB_TOOL_CHOICE_REQUIRED && t->n_tools == 1) return t->tools[0].name;
    return NULL;
}

int pdb_toolcall_forced_any(const pdb_tool_set *t) {
    return t && t->choice == PDB_TOOL_CHOICE_REQUIRED && t->n_tools > 1;
}

int pdb_toolcall_forced(const pdb_tool_set *t) { return pdb_toolcall_forced_name(t) || pdb_toolcall_forced_any(t); }

pdb_status pdb_toolcall_check_forced(const pdb_tool_set *t, int64_t max_tokens, const char *max_param, int n_stop,
                                     const char *stop_param, struct pdb_openai_error *err) {
    if (!pdb_toolcall_forced(t)) return PDB_OK;
    if (n_stop)
        return pdb_openai_set_error(err, 400, stop_param, "unsupported_value",
                                    "'%s' with a forced tool call could cut its arguments short: send one or the other", stop_param);
    /* the name part (NAME and pdb_tools' ARGS_OPEN, 9 bytes; one byte a token at worst), then "{}" */
    size_t head = 0;
    if (pdb_toolcall_forced_any(t))
        for (size_t i = 0; i < t->n_tools; i++) {
            size_t l = strlen(t->tools[i].name) + 9;
            if (!head || l < head) head = l;
        }
    int64_t need = (int64_t)head + 2;
    if (max_tokens >= 0 && max_tokens < need)
        return pdb_openai_set_error(err, 400, max_param, "invalid_value",
                                    "%s is %lld; a forced tool call needs %lld (%sthe arguments' {}, one byte a token at worst)",
                                    max_param, (long long)max_tokens, (long long)need, head ? "the shortest name and its fence, then " : "");
    return PDB_OK;
}

int pdb_toolcall_active(const pdb_tool_set *t) { return t && t->n_tools > 0 && t->choice != PDB_TOOL_CHOICE_NONE; }

pdb_status pdb_toolcall_add_tool(pdb_tool_set *t, json_t *name, json_t *description, json_t *parameters, const char *param,
                                 struct pdb_openai_error *err) {
    char p[96];
    snprintf(p, sizeof p, "%s.name", param);
    if (!json_is_string(name) || !tc_name_ok(json_string_value(name), json_string_length(name)))
        return pdb_openai_set_error(err, 400, p, "invalid_value", "'%s' must be 1 to %d characters of a-z, A-Z, 0-9, _ and -", p,
                                    PDB_TOOLCALL_MAX_NAME);
    for (size_t i = 0; i < t->n_tools; i++)
        if (!strcmp(t->tools[i].name, json_string_value(name)))
            return pdb_openai_set_error(err, 400, p, "invalid_value", "'%s': the tool '%s' is defined twice", p, json_string_value(name));
    if (description && !json_is_null(description) && !json_is_string(description)) {
        snprintf(p, sizeof p, "%s.description", param);
        return pdb_openai_set_error(err, 400, p, "invalid_type", "'%s' must be a string", p);
    }
    if (parameters && !json_is_null(parameters) && !json_is_object(parameters)) {
        snprintf(p, sizeof p, "%s.parameters", param);
        return pdb_openai_set_error(err, 400, p, "invalid_type", "'%s' must be a JSON Schema object", p);
    }
    if (t->n_tools >= PDB_TOOLCALL_MAX_TOOLS)
        return pdb_openai_set_error(err, 400, "tools", "invalid_value", "more than %d tools", PDB_TOOLCALL_MAX_TOOLS);
    if (!t->tools) {
        t->tools = calloc(PDB_TOOLCALL_MAX_TOOLS, sizeof *t->tools);
        if (!t->tools) return tc_oom(err);
    }
    pdb_tool *d = &t->tools[t->n_tools++];
    d->name = pdb_openai_dup(json_string_value(name), json_string_length(name));
    if (json_is_string(description)) d->description = pdb_openai_dup(json_string_value(description), json_string_length(description));
    if (json_is_object(parameters)) d->parameters = json_dumps(parameters, JSON_PRESERVE_ORDER);
    if (!d->name || (json_is_string(description) && !d->description) || (json_is_object(parameters) && !d->parameters))
        return tc_oom(err);
    return PDB_OK;
}

/* Refuse every key of o outside allowed (NULL-terminated); param prefixes the name. */
static pdb_status tc_known_keys(json_t *o, const char *const *allowed, const char *param, struct pdb_openai_error *err) {
    const char *k = pdb_openai_unknown_key(o, allowed);
    if (!k) return PDB_OK;
    char p[224];
    snprintf(p, sizeof p, "%s.%.60s", param, k);
    return pdb_openai_set_error(err, 400, p, "unknown_parameter", "unknown field '%s'", p);
}

static pdb_status tc_parse_tools(json_t *tools, pdb_tool_set *t, struct pdb_openai_error *err) {
    if (!json_is_array(tools)) return pdb_openai_set_error(err, 400, "tools", "invalid_type", "'tools' must be an array");
    size_t i;
    json_t *e;
    static const char *const tool_keys[] = {"type", "function", NULL};
    static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
    json_array_foreach(tools, i, e) {
        char p[48], pf[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        snprintf(pf, sizeof pf, "tools[%zu].function", i);
        if (!json_is_object(e)) return pdb_openai_set_error(err, 400, p, "invalid_type", "'%s' must be an object", p);
        PDB_TRY(tc_known_keys(e, tool_keys, p, err));
        json_t *type = json_object_get(e, "type"), *fn = json_object_get(e, "function");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return pdb_openai_set_error(err, 400, p, "invalid_value", "'%s.type' must be \"function\" (the only tool type served)", p);
        if (!json_is_object(fn)) return pdb_openai_set_error(err, 400, pf, "invalid_type", "'%s' must be an object", pf);
        PDB_TRY(tc_known_keys(fn, fn_keys, pf, err));
        json_t *strict = json_object_get(fn, "strict");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return pdb_openai_set_error(err, 400, pf, "invalid_type", "'%s.strict' must be a boolean", pf);
        if (json_is_true(strict))
            return pdb_openai_set_error(err, 400, pf, "unsupported_value",
                                        "'%s.strict': true is not supported (arguments are not constrained to the schema)", pf);
        PDB_TRY(pdb_toolcall_add_tool(t, json_object_get(fn, "name"), json_object_get(fn, "description"),
                                      json_object_get(fn, "parameters"), pf, err));
    }
    return PDB_OK;
}

pdb_status pdb_toolcall_check_choice(const pdb_tool_set *t, const char *param, struct pdb_openai_error *err) {
    if (t->choice == PDB_TOOL_CHOICE_FUNCTION) {
        for (size_t i = 0; i < t->n_tools; i++)
            if (!strcmp(t->tools[i].name, t->choice_name)) return PDB_OK;
        return pdb_openai_set_error(err, 400, param, "invalid_value", "'%s' names the function '%s', which is not in 'tools'", param,
                                    t->choice_name);
    }
    if (t->choice == PDB_TOOL_CHOICE_REQUIRED && t->n_tools == 0)
        return pdb_openai_set_error(err, 400, param, "invalid_value", "'%s' requires a tool call, but no tools are given", param);
    return PDB_OK;
}

pdb_status pdb_toolcall_parse_tools(json_t *tools, pdb_tool_set *t, struct pdb_openai_error *err) {
    return tc_parse_tools(tools, t, err);
}

pdb_status pdb_toolcall_parse_parallel(json_t *ptc, pdb_tool_set *t, struct pdb_openai_error *err) {
    if (!json_is_boolean(ptc))
        return pdb_openai_set_error(err, 400, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be a boolean");
    t->single_call = json_is_false(ptc);
    return PDB_OK;
}

pdb_status pdb_toolcall_parse_choice(json_t *c, pdb_tool_set *t, struct pdb_openai_error *err) {
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        if (!strcmp(s, "auto")) t->choice = PDB_TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "none")) t->choice = PDB_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) t->choice = PDB_TOOL_CHOICE_REQUIRED;
        else
            return pdb_openai_set_error(err, 400, "tool_choice", "invalid_value",
                                        "'tool_choice' is '%.40s'; use \"auto\", \"none\", \"required\" or "
                                        "{\"type\": \"function\", \"function\": {\"name\": ...}}", s);
    } else if (json_is_object(c)) {
        static const char *const keys[] = {"type", "function", NULL};
        PDB_TRY(tc_known_keys(c, keys, "tool_choice", err));
        json_t *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn) || !json_is_string(name))
            return pdb_openai_set_error(err, 400, "tool_choice", "invalid_value",
                                        "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        t->choice = PDB_TOOL_CHOICE_FUNCTION;
        t->choice_name = pdb_openai_dup(json_string_value(name), json_string_length(name));
        if (!t->choice_name) return tc_oom(err);
    } else {
        return pdb_openai_set_error(err, 400, "tool_choice", "invalid_type", "'tool_choice' must be a string or an object");
    }
    return pdb_toolcall_check_choice(t, "tool_choice", err);
}

pdb_status pdb_toolcall_parse_calls(json_t *msg, const char *param, pdb_tool_call **calls, size_t *n,
                                    struct pdb_openai_error *err) {
    *calls = NULL;
    *n = 0;
    json_t *a = json_object_get(msg, "tool_calls");
    if (!a || json_is_null(a)) return PDB_OK;
    char p[96];
    snprintf(p, sizeof p, "%s.tool_calls", param);
    if (!json_is_array(a)) return pdb_openai_set_error(err, 400, p, "invalid_type", "'%s' must be an array", p);
    size_t k = json_array_size(a);
    if (k > PDB_TOOLCALL_MAX_CALLS) return pdb_openai_set_error(err, 400, p, "invalid_value", "'%s' has more than %d calls", p, PDB_TOOLCALL_MAX_CALLS);
    *calls = calloc(k ? k : 1, sizeof **calls);
    if (!*calls) return tc_oom(err);
    for (size_t i = 0; i < k; i++) {
        json_t *c = json_array_get(a, i);
        char pc[128];
        snprintf(pc, sizeof pc, "%s[%zu]", p, i);
        json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_object(c)) return pdb_openai_set_error(err, 400, pc, "invalid_type", "'%s' must be an object", pc);
        static const char *const call_keys[] = {"id", "type", "function", NULL}, *const fn_keys[] = {"name", "arguments", NULL};
        PDB_TRY(tc_known_keys(c, call_keys, pc, err));
        if (json_is_object(fn)) {
            char pf[144];
            snprintf(pf, sizeof pf, "%s.function", pc);
            PDB_TRY(tc_known_keys(fn, fn_keys, pf, err));
        }
        if (id && !json_is_null(id) && !json_is_string(id))
            return pdb_openai_set_error(err, 400, pc, "invalid_type", "'%s.id' must be a string", pc);
        if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
            return pdb_openai_set_error(err, 400, pc, "invalid_value", "'%s.type' must be \"function\"", pc);
        if (!json_is_object(fn) || !json_is_string(name) || !json_is_string(args))
            return pdb_openai_set_error(err, 400, pc, "invalid_value",
                                        "'%s' must have function.name and function.arguments as strings", pc);
        pdb_tool_call *d = &(*calls)[i];
        *n = i + 1;
        d->id = json_is_string(id) ? pdb_openai_dup(json_string_value(id), json_string_length(id)) : pdb_openai_dup("", 0);
        d->name = pdb_openai_dup(json_string_value(name), json_string_length(name));
        d->arguments = pdb_openai_dup(json_string_value(args), json_string_length(args));
        if (!d->id || !d->name || !d->arguments) return tc_oom(err);
    }
    return PDB_OK;
}

void pdb_toolcall_calls_free(pdb_tool_call *calls, size_t n) {
    for (size_t i = 0; calls && i < n; i++) {
        free(calls[i].id);
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

pdb_tool_call *pdb_toolcall_calls_dup(const pdb_tool_call *calls, size_t n) {
    pdb_tool_call *d = calloc(n ? n : 1, sizeof *d);
    if (!d) return NULL;
    for (size_t i = 0; i < n; i++) {
        d[i].id = pdb_openai_dup(calls[i].id, strlen(calls[i].id));
        d[i].name = pdb_openai_dup(calls[i].name, strlen(calls[i].name));
        d[i].arguments = pdb_openai_dup(calls[i].arguments, strlen(calls[i].arguments));
        if (!d[i].id || !d[i].name || !d[i].arguments) { pdb_toolcall_calls_free(d, i + 1); return NULL; }
    }
    return d;
}

void pdb_toolcall_set_free(pdb_tool_set *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_tools; i++) {
        free(t->tools[i].name);
        free(t->tools[i].description);
        free(t->tools[i].parameters);
    }
    free(t->tools);
    free(t->choice_name);
    memset(t, 0, sizeof *t);
}

json_t *pdb_toolcall_json(const pdb_toolcall_out *calls, size_t n, int delta) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const pdb_toolcall_out *c = &calls[i];
        json_t *o = json_object(), *fn = json_object();
        if (delta) json_object_set_new(o, "index", json_integer(c->index));
        if (!delta || c->id) {
            json_object_set_new(o, "id", json_string(c->id ? c->id : ""));
            json_object_set_new(o, "type", json_string("function"));
        }
        if (!delta || c->name) json_object_set_new(fn, "name", json_string(c->name ? c->name : ""));
        json_t *args = pdb_openai_json_text(c->arguments, c->arguments_len);
        json_object_set_new(fn, "arguments", args ? args : json_string(""));
        json_object_set_new(o, "function", fn);
        json_array_append_new(a, o);
    }
    return a;
}
