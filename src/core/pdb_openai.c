/* pdb_openai: OpenAI request parsing and response building with jansson (see pdb_openai.h).
 * Invariants: parse functions never keep a reference into the jansson tree (every string is
 * copied), fill *err on every failure path and leave *req fully freed then; every field is one
 * row of PDB_OPENAI_FIELDS (honoured, refused or accepted; docs/api.md's table is the same list)
 * and a field not in it is refused with a 400 naming it, so nothing a client sends is dropped
 * without a word. */
#include "pdb_openai.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define PDB_OPENAI_DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER)

const char *pdb_openai_unknown_key(json_t *o, const char *const *allowed) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k)) i++;
        if (!allowed[i]) return k;
    }
    return NULL;
}

pdb_status pdb_openai_set_error(pdb_openai_error *err, int status, const char *param, const char *code,
                                const char *fmt, ...) {
    err->status = status;
    err->type = status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    /* The message may have been cut inside a UTF-8 character: trim to a complete prefix. */
    size_t n = strlen(err->message);
    err->message[pdb_openai_utf8_complete_prefix(err->message, n)] = 0;
    return status == 404 ? PDB_NOT_FOUND : PDB_INVALID;
}

/* ---- UTF-8 ---------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[i..len), 0 when invalid, -k when the bytes so far are
 * a valid but incomplete start (k bytes available). */
static int pdb_openai_utf8_seq(const unsigned char *s, size_t len, size_t i) {
    unsigned c = s[i];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) { need = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) need = 3;
    else if (c == 0xED) { need = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 3;
    else if (c == 0xF0) { need = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else if (c == 0xF4) { need = 4; hi = 0x8F; }
    else return 0;
    for (int k = 1; k < need; k++) {
        if (i + (size_t)k >= len) return -k;
        unsigned b = s[i + (size_t)k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return need;
}

size_t pdb_openai_utf8_complete_prefix(const char *s, size_t len) {
    /* Only the last three bytes can start an incomplete sequence. */
    size_t start = len > 3 ? len - 3 : 0;
    for (size_t i = start; i < len; i++) {
        unsigned c = (unsigned char)s[i];
        if (c >= 0x80 && c < 0xC0) continue;
        int n = pdb_openai_utf8_seq((const unsigned char *)s, len, i);
        if (n < 0) return i;
    }
    return len;
}

json_t *pdb_openai_json_text(const char *s, size_t len) {
    if (!s) return json_string("");
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) { /* fast path: already valid */
        int n = pdb_openai_utf8_seq(u, len, i);
        if (n <= 0) break;
        i += (size_t)n;
    }
    if (i == len) return json_stringn(s, len);
    if (len > ((size_t)1 << 30)) return NULL;
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    memcpy(buf, s, i);
    size_t o = i;
    while (i < len) {
        int n = pdb_openai_utf8_seq(u, len, i);
        if (n > 0) { memcpy(buf + o, s + i, (size_t)n); o += (size_t)n; i += (size_t)n; continue; }
        memcpy(buf + o, "\xEF\xBF\xBD", 3); /* U+FFFD for one bad byte */
        o += 3;
        i++;
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}

/* ---- request parsing ------------------------------------------------------------------------ */

void pdb_openai_request_free(pdb_openai_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
        pdb_toolcall_calls_free(r->messages[i].tool_calls, r->messages[i].n_tool_calls);
        free(r->messages[i].tool_call_id);
    }
    pdb_toolcall_set_free(&r->tools);
    free(r->messages);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->bias_ids);
    free(r->bias_vals);
    free(r->user);
    memset(r, 0, sizeof *r);
}

char *pdb_openai_dup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static const char *pdb_openai_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Optional field getters: absent or null leave *out untouched and return PDB_OK. */
static pdb_status pdb_openai_get_number(json_t *root, const char *key, double *out, pdb_openai_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return PDB_OK;
    if (!json_is_number(v))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'%s' must be a number, not %s", key, pdb_openai_type_name(v));
    *out = json_number_value(v);
    if (!isfinite(*out)) return pdb_openai_set_error(err, 400, key, "invalid_value", "'%s' must be finite", key);
    return PDB_OK;
}

static pdb_status pdb_openai_get_int(json_t *root, const char *key, int64_t *out, int *present, pdb_openai_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return PDB_OK;
    if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
        *out = (int64_t)json_real_value(v); /* 16.0 is an integer to JavaScript clients */
    } else if (!json_is_integer(v)) {
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'%s' must be an integer, not %s", key, pdb_openai_type_name(v));
    } else {
        *out = (int64_t)json_integer_value(v);
    }
    if (present) *present = 1;
    return PDB_OK;
}

static pdb_status pdb_openai_get_bool(json_t *root, const char *key, int *out, pdb_openai_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return PDB_OK;
    if (!json_is_boolean(v))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'%s' must be a boolean, not %s", key, pdb_openai_type_name(v));
    *out = json_is_true(v);
    return PDB_OK;
}

static pdb_status pdb_openai_parse_ids(json_t *arr, const char *param, pdb_openai_request *r, pdb_openai_error *err) {
    size_t n = json_array_size(arr);
    if ((int64_t)n > PDB_OPENAI_MAX_PROMPT_IDS)
        return pdb_openai_set_error(err, 400, param, "prompt_too_long", "prompt has %zu token ids (limit %lld)", n,
                                    (long long)PDB_OPENAI_MAX_PROMPT_IDS);
    r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v))
            return pdb_openai_set_error(err, 400, param, "invalid_type", "prompt token at index %zu must be an integer token id, not %s",
                                        i, pdb_openai_type_name(v));
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX)
            return pdb_openai_set_error(err, 400, param, "invalid_token_id", "prompt token id %lld at index %zu is out of range",
                                        (long long)id, i);
        r->prompt_ids[i] = (int32_t)id;
    }
    r->n_prompt_ids = (int64_t)n;
    r->prompt_is_ids = 1;
    return PDB_OK;
}

static pdb_status pdb_openai_parse_prompt(json_t *root, pdb_openai_request *r, pdb_openai_error *err) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return pdb_openai_set_error(err, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        r->prompt_text = pdb_openai_dup(json_string_value(p), r->prompt_len);
        return r->prompt_text ? PDB_OK : pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    }
    if (!json_is_array(p))
        return pdb_openai_set_error(err, 400, "prompt", "invalid_type",
                                    "'prompt' must be a string, an array of token ids, or an array with one string, not %s",
                                    pdb_openai_type_name(p));
    size_t n = json_array_size(p);
    if (n == 0) return pdb_openai_set_error(err, 400, "prompt", "invalid_value", "'prompt' is an empty array");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) return pdb_openai_parse_ids(p, "prompt", r, err);
    if (n > 1)
        return pdb_openai_set_error(err, 400, "prompt", "unsupported_value",
                                    "batched prompts are not supported: send one prompt per request");
    if (json_is_string(first)) {
        r->prompt_len = json_string_length(first);
        r->prompt_text = pdb_openai_dup(json_string_value(first), r->prompt_len);
        return r->prompt_text ? PDB_OK : pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    }
    if (json_is_array(first) && json_array_size(first) > 0) return pdb_openai_parse_ids(first, "prompt", r, err);
    return pdb_openai_set_error(err, 400, "prompt", "invalid_type",
                                "'prompt' array must hold token ids (integers) or one string, not %s", pdb_openai_type_name(first));
}

static pdb_status pdb_openai_parse_content(json_t *c, size_t idx, char **out, pdb_openai_error *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", idx);
    if (!c || json_is_null(c)) { *out = pdb_openai_dup("", 0); return *out ? PDB_OK : pdb_openai_set_error(err, 500, NULL, NULL, "out of memory"); }
    if (json_is_string(c)) {
        *out = pdb_openai_dup(json_string_value(c), json_string_length(c));
        return *out ? PDB_OK : pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    }
    if (!json_is_array(c))
        return pdb_openai_set_error(err, 400, param, "invalid_type", "'%s' must be a string or an array of text parts, not %s", param,
                                    pdb_openai_type_name(c));
    size_t total = 0, i;
    json_t *part;
    static const char *const part_keys[] = {"type", "text", NULL};
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return pdb_openai_set_error(err, 400, param, "unsupported_value",
                                        "'%s' part %zu must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)", param, i);
        const char *k = pdb_openai_unknown_key(part, part_keys);
        if (k) {
            char pk[112];
            snprintf(pk, sizeof pk, "%s[%zu].%.20s", param, i, k);
            return pdb_openai_set_error(err, 400, pk, "unknown_parameter",
                                        "'%s' is not a field of a text part (a text part is {\"type\": \"text\", \"text\"})", pk);
        }
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total + 1), *o = s;
    if (!s) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        if (i) *o++ = '\n';
        memcpy(o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    *o = 0;
    *out = s;
    return PDB_OK;
}

/* The fields of a chat message, one row each (docs/api.md's message table lists the same names,
 * roles and rules; tests/core/test_openai checks it). roles: the roles the field belongs to
 * (PDB_OPENAI_ROLE_*; developer is system); on another role a non-null value is a 400 naming it.
 * why: a refused field's reason. The rule follows the shipped chat template: it renders a
 * message's role and content, an assistant's tool_calls (type, name, arguments) and nothing
 * else. */
typedef struct pdb_openai_msg_field {
    pdb_openai_message_field_info info;
    const char *why;
} pdb_openai_msg_field;
enum { R_S = PDB_OPENAI_ROLE_SYSTEM, R_U = PDB_OPENAI_ROLE_USER, R_A = PDB_OPENAI_ROLE_ASSISTANT, R_T = PDB_OPENAI_ROLE_TOOL };
static const pdb_openai_msg_field PDB_OPENAI_MESSAGE_FIELDS[] = {
    {{"role", R_S | R_U | R_A | R_T, "honoured"}, NULL},
    {{"content", R_S | R_U | R_A | R_T, "honoured"}, NULL},
    {{"tool_calls", R_A, "honoured"}, NULL},
    {{"tool_call_id", R_T, "accepted"}, NULL},
    {{"name", R_S | R_U | R_A, "refused"}, "the chat template renders no participant names (a name would be dropped); put it in the content"},
    {{"refusal", R_A, "refused"}, "the chat template has no refusal; send the refusal's text as content"},
    {{"audio", R_A, "refused"}, "audio is not served, and the template renders no audio"},
    {{"function_call", R_A, "refused"}, "the deprecated form of tool_calls; send tool_calls"},
};
#define PDB_OPENAI_N_MESSAGE_FIELDS (sizeof PDB_OPENAI_MESSAGE_FIELDS / sizeof PDB_OPENAI_MESSAGE_FIELDS[0])

const pdb_openai_message_field_info *pdb_openai_message_field_at(size_t i) {
    return i < PDB_OPENAI_N_MESSAGE_FIELDS ? &PDB_OPENAI_MESSAGE_FIELDS[i].info : NULL;
}

static const char *pdb_openai_role_word(int role) {
    return role == R_S ? "system" : role == R_U ? "user" : role == R_A ? "assistant" : "tool";
}

/* Every key of messages[i] (role bit `role`) is a field of its role, and no refused field has a
 * value (null is the same as absent). */
static pdb_status pdb_openai_check_message_keys(json_t *msg, size_t i, int role, pdb_openai_error *err) {
    const char *k;
    json_t *v;
    json_object_foreach(msg, k, v) {
        char p[64];
        snprintf(p, sizeof p, "messages[%zu].%.40s", i, k);
        size_t f = 0;
        while (f < PDB_OPENAI_N_MESSAGE_FIELDS && strcmp(PDB_OPENAI_MESSAGE_FIELDS[f].info.name, k)) f++;
        if (f == PDB_OPENAI_N_MESSAGE_FIELDS)
            return pdb_openai_set_error(err, 400, p, "unknown_parameter", "'%s' is not a field of a chat message (docs/api.md lists them)", p);
        if (json_is_null(v)) continue;
        const pdb_openai_msg_field *mf = &PDB_OPENAI_MESSAGE_FIELDS[f];
        if (!(mf->info.roles & role))
            return pdb_openai_set_error(err, 400, p, "unknown_parameter", "'%s' is not a field of a %s message", p, pdb_openai_role_word(role));
        if (mf->why) return pdb_openai_set_error(err, 400, p, "unsupported_parameter", "'%s' is refused: %s", p, mf->why);
    }
    return PDB_OK;
}

/* The tool fields of messages[i]: an assistant's tool_calls, a tool message's tool_call_id
 * (the rest of the rules, e.g. which contents the template can render, are pdb_chat's). */
static pdb_status pdb_openai_parse_tool_fields(json_t *msg, size_t i, pdb_openai_message *m, pdb_openai_error *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!strcmp(m->role, "assistant")) PDB_TRY(pdb_toolcall_parse_calls(msg, param, &m->tool_calls, &m->n_tool_calls, err));
    if (!strcmp(m->role, "assistant") && m->n_tool_calls && !m->content[0]) m->content_null = 1; /* "" + calls = calls only */
    json_t *id = json_object_get(msg, "tool_call_id");
    if (id && !json_is_null(id)) {
        if (!json_is_string(id)) return pdb_openai_set_error(err, 400, param, "invalid_type", "'%s.tool_call_id' must be a string", param);
        m->tool_call_id = pdb_openai_dup(json_string_value(id), json_string_length(id));
        if (!m->tool_call_id) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    }
    return PDB_OK;
}

static pdb_status pdb_openai_parse_messages(json_t *root, pdb_openai_request *r, pdb_openai_error *err) {
    json_t *m = json_object_get(root, "messages");
    if (!m || json_is_null(m)) return pdb_openai_set_error(err, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!json_is_array(m))
        return pdb_openai_set_error(err, 400, "messages", "invalid_type", "'messages' must be an array, not %s", pdb_openai_type_name(m));
    size_t n = json_array_size(m);
    if (n == 0) return pdb_openai_set_error(err, 400, "messages", "invalid_value", "'messages' is empty");
    if (n > PDB_OPENAI_MAX_MESSAGES)
        return pdb_openai_set_error(err, 400, "messages", "invalid_value", "'messages' has %zu entries (limit %d)", n, PDB_OPENAI_MAX_MESSAGES);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg))
            return pdb_openai_set_error(err, 400, param, "invalid_type", "'%s' must be an object, not %s", param, pdb_openai_type_name(msg));
        json_t *role = json_object_get(msg, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role)) return pdb_openai_set_error(err, 400, param, "invalid_type", "'%s' must be a string", param);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer") && strcmp(rs, "tool"))
            return pdb_openai_set_error(err, 400, param, "invalid_value",
                                        "'%s' is '%.40s'; supported roles are system, developer, user, assistant, tool", param, rs);
        int rbit = !strcmp(rs, "user") ? R_U : !strcmp(rs, "assistant") ? R_A : !strcmp(rs, "tool") ? R_T : R_S;
        PDB_TRY(pdb_openai_check_message_keys(msg, i, rbit, err));
        r->messages[i].role = pdb_openai_dup(strcmp(rs, "developer") ? rs : "system", strlen(strcmp(rs, "developer") ? rs : "system"));
        r->n_messages = i + 1;
        if (!r->messages[i].role) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
        json_t *content = json_object_get(msg, "content");
        r->messages[i].content_null = !content || json_is_null(content);
        PDB_TRY(pdb_openai_parse_content(content, i, &r->messages[i].content, err));
        PDB_TRY(pdb_openai_parse_tool_fields(msg, i, &r->messages[i], err));
    }
    return PDB_OK;
}

static pdb_status pdb_openai_parse_stop(json_t *root, pdb_openai_request *r, pdb_openai_error *err) {
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return PDB_OK;
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > PDB_OPENAI_MAX_STOP)
            return pdb_openai_set_error(err, 400, "stop", "invalid_value", "'stop' has %zu strings (limit %d)", n, PDB_OPENAI_MAX_STOP);
    } else if (!json_is_string(s)) {
        return pdb_openai_set_error(err, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings, not %s",
                                    pdb_openai_type_name(s));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : s;
        if (!json_is_string(v)) return pdb_openai_set_error(err, 400, "stop", "invalid_type", "'stop' entry %zu must be a string", i);
        size_t len = json_string_length(v);
        if (len == 0) continue;
        if (len > PDB_OPENAI_MAX_STOP_BYTES)
            return pdb_openai_set_error(err, 400, "stop", "invalid_value", "'stop' entry %zu is %zu bytes (limit %d)", i, len,
                                        PDB_OPENAI_MAX_STOP_BYTES);
        r->stop[r->n_stop] = pdb_openai_dup(json_string_value(v), len);
        if (!r->stop[r->n_stop]) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
        r->stop_len[r->n_stop++] = len;
    }
    return PDB_OK;
}

/* ---- the field table ------------------------------------------------------------------------ */

/* A field's parser: called with the field's value present and not null (required fields are
 * called always); fills r or *err. */
typedef pdb_status (*pdb_openai_field_fn)(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                          pdb_openai_error *err);

static pdb_status f_model(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    json_t *model = json_object_get(root, key);
    if (!json_is_string(model))
        return pdb_openai_set_error(err, 400, "model", "invalid_type", "'model' must be a string, not %s", pdb_openai_type_name(model));
    r->model = pdb_openai_dup(json_string_value(model), json_string_length(model));
    return r->model ? PDB_OK : pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
}

static pdb_status f_prompt(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)key, (void)lim;
    return pdb_openai_parse_prompt(root, r, err);
}

static pdb_status f_messages(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)key, (void)lim;
    return pdb_openai_parse_messages(root, r, err);
}

/* max_tokens, and chat's max_completion_tokens (which wins when both are given: it comes later
 * in the table). */
static pdb_status f_max_tokens(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    int64_t mt = -1;
    PDB_TRY(pdb_openai_get_int(root, key, &mt, NULL, err));
    if (mt < 0) return pdb_openai_set_error(err, 400, key, "invalid_value", "'%s' must be >= 0, got %lld", key, (long long)mt);
    if (lim && lim->max_context > 0 && mt > lim->max_context)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'%s' is %lld, more than the model's context length (%lld)", key,
                                    (long long)mt, (long long)lim->max_context);
    r->max_tokens = mt;
    return PDB_OK;
}

static pdb_status f_temperature(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    PDB_TRY(pdb_openai_get_number(root, key, &r->temperature, err));
    if (r->temperature < 0)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'temperature' must be >= 0, got %g", r->temperature);
    if (r->temperature > 100)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'temperature' must be <= 100, got %g", r->temperature);
    return PDB_OK;
}

static pdb_status f_top_p(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    PDB_TRY(pdb_openai_get_number(root, key, &r->top_p, err));
    if (!(r->top_p > 0 && r->top_p <= 1))
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'top_p' must be in (0, 1], got %g", r->top_p);
    return PDB_OK;
}

static pdb_status f_top_k(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    int64_t tk = 0;
    PDB_TRY(pdb_openai_get_int(root, key, &tk, NULL, err));
    if (tk < -1 || tk > INT32_MAX)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'top_k' must be -1, 0 (off) or a positive count, got %lld",
                                    (long long)tk);
    r->top_k = tk < 0 ? 0 : (int32_t)tk;
    return PDB_OK;
}

static pdb_status f_seed(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    int64_t seed = 0;
    PDB_TRY(pdb_openai_get_int(root, key, &seed, &r->has_seed, err));
    r->seed = (uint64_t)seed;
    return PDB_OK;
}

static pdb_status f_stop(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)key, (void)lim;
    return pdb_openai_parse_stop(root, r, err);
}

static pdb_status f_bool(json_t *root, const char *key, int *out, pdb_openai_error *err) { return pdb_openai_get_bool(root, key, out, err); }

static pdb_status f_stream(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    return f_bool(root, key, &r->stream, err);
}

static pdb_status f_stream_options(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                   pdb_openai_error *err) {
    (void)lim;
    json_t *so = json_object_get(root, key);
    if (!json_is_object(so))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'stream_options' must be an object, not %s", pdb_openai_type_name(so));
    const char *k;
    json_t *v;
    json_object_foreach(so, k, v) {
        char param[64];
        snprintf(param, sizeof param, "stream_options.%.40s", k);
        int *out = !strcmp(k, "include_usage") ? &r->include_usage : !strcmp(k, "continuous_usage_stats") ? &r->continuous_usage : NULL;
        int obf = 0;
        if (!strcmp(k, "include_obfuscation")) out = &obf;
        if (!out)
            return pdb_openai_set_error(err, 400, param, "unknown_parameter",
                                        "'%s' is not a stream option (include_usage, continuous_usage_stats, include_obfuscation)", param);
        if (!json_is_null(v) && !json_is_boolean(v))
            return pdb_openai_set_error(err, 400, param, "invalid_type", "'%s' must be a boolean", param);
        *out = json_is_true(v);
        if (obf)
            return pdb_openai_set_error(err, 400, param, "unsupported_value",
                                        "'%s': true is not supported (chunks carry no obfuscation padding; send false)", param);
    }
    return PDB_OK;
}

static pdb_status f_return_token_ids(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                     pdb_openai_error *err) {
    (void)lim;
    return f_bool(root, key, &r->return_token_ids, err);
}

static pdb_status f_ignore_eos(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    return f_bool(root, key, &r->ignore_eos, err);
}

static pdb_status f_n(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    int64_t n = 1;
    PDB_TRY(pdb_openai_get_int(root, key, &n, NULL, err));
    if (n < 1 || n > PDB_OPENAI_MAX_N)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'n' must be 1..%d, got %lld", PDB_OPENAI_MAX_N, (long long)n);
    r->n = (int)n;
    return PDB_OK;
}

/* best_of after n: generating more than n and returning the best is not done, so only best_of
 * == n (or 1 with n 1) is served. */
static pdb_status f_best_of(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    int64_t b = 1;
    PDB_TRY(pdb_openai_get_int(root, key, &b, NULL, err));
    if (b != r->n)
        return pdb_openai_set_error(err, 400, key, "unsupported_value",
                                    "'best_of' must equal n (%d): ranking more candidates than are returned is not supported, got %lld",
                                    r->n, (long long)b);
    return PDB_OK;
}

static pdb_status f_echo(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    return f_bool(root, key, &r->echo, err);
}

static pdb_status f_suffix(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)r, (void)lim;
    json_t *suffix = json_object_get(root, key);
    if (json_is_string(suffix) && json_string_length(suffix) == 0) return PDB_OK;
    return pdb_openai_set_error(err, 400, key, "unsupported_value", "'suffix' is not supported (no fill-in-the-middle template)");
}

static pdb_status f_logprobs(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    if (r->kind == PDB_OPENAI_CHAT) return f_bool(root, key, &r->logprobs, err);
    int64_t k = 0; /* completions: the number of alternatives, 0..20 */
    PDB_TRY(pdb_openai_get_int(root, key, &k, NULL, err));
    if (k < 0 || k > PDB_OPENAI_MAX_TOP_LOGPROBS)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'logprobs' must be 0..%d, got %lld", PDB_OPENAI_MAX_TOP_LOGPROBS,
                                    (long long)k);
    r->logprobs = 1;
    r->top_logprobs = (int)k;
    return PDB_OK;
}

static pdb_status f_top_logprobs(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                 pdb_openai_error *err) {
    (void)lim;
    int64_t k = 0;
    PDB_TRY(pdb_openai_get_int(root, key, &k, NULL, err));
    if (k < 0 || k > PDB_OPENAI_MAX_TOP_LOGPROBS)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'top_logprobs' must be 0..%d, got %lld", PDB_OPENAI_MAX_TOP_LOGPROBS,
                                    (long long)k);
    if (!r->logprobs && k > 0)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = (int)k;
    return PDB_OK;
}

static pdb_status f_penalty(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    double *out = !strcmp(key, "frequency_penalty") ? &r->frequency_penalty : &r->presence_penalty;
    PDB_TRY(pdb_openai_get_number(root, key, out, err));
    if (*out < -2 || *out > 2) return pdb_openai_set_error(err, 400, key, "invalid_value", "'%s' must be in [-2, 2], got %g", key, *out);
    return PDB_OK;
}

static pdb_status f_logit_bias(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    json_t *o = json_object_get(root, key);
    if (!json_is_object(o))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'logit_bias' must be an object of token id -> bias, not %s",
                                    pdb_openai_type_name(o));
    size_t n = json_object_size(o);
    if (n > PDB_OPENAI_MAX_LOGIT_BIAS)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'logit_bias' has %zu entries (limit %d)", n, PDB_OPENAI_MAX_LOGIT_BIAS);
    if (!n) return PDB_OK;
    r->bias_ids = malloc(n * sizeof *r->bias_ids);
    r->bias_vals = malloc(n * sizeof *r->bias_vals);
    if (!r->bias_ids || !r->bias_vals) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        char *end = NULL;
        long long id = strtoll(k, &end, 10);
        if (!*k || *end || id < 0 || id > INT32_MAX)
            return pdb_openai_set_error(err, 400, key, "invalid_value", "'logit_bias' key '%.40s' is not a token id", k);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return pdb_openai_set_error(err, 400, key, "invalid_value", "'logit_bias' value of token %lld must be a number in [-100, 100]", id);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_vals[r->n_bias++] = (float)json_number_value(v);
    }
    return PDB_OK;
}

static pdb_status f_response_format(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                    pdb_openai_error *err) {
    (void)lim;
    json_t *o = json_object_get(root, key), *t = json_object_get(o, "type");
    if (!json_is_object(o) || !json_is_string(t))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'response_format' must be {\"type\": \"text\" | \"json_object\"}");
    const char *ts = json_string_value(t);
    if (!strcmp(ts, "text")) return PDB_OK;
    if (!strcmp(ts, "json_object")) { r->json_object = 1; return PDB_OK; }
    if (!strcmp(ts, "json_schema"))
        return pdb_openai_set_error(err, 400, key, "unsupported_value",
                                    "'response_format' json_schema is not supported (json_object is: any JSON object)");
    return pdb_openai_set_error(err, 400, key, "invalid_value", "'response_format' type '%.40s' is not text, json_object or json_schema", ts);
}

static pdb_status f_user(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    json_t *v = json_object_get(root, key);
    if (!json_is_string(v))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'%s' must be a string, not %s", key, pdb_openai_type_name(v));
    if (json_string_length(v) > 256) return pdb_openai_set_error(err, 400, key, "invalid_value", "'%s' is over 256 bytes", key);
    if (!r->user) r->user = pdb_openai_dup(json_string_value(v), json_string_length(v));
    return PDB_OK;
}

/* Accepted and checked, no effect on the answer (docs/api.md says why per field). */
static pdb_status f_string(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)r, (void)lim;
    json_t *v = json_object_get(root, key);
    if (!json_is_string(v))
        return pdb_openai_set_error(err, 400, key, "invalid_type", "'%s' must be a string, not %s", key, pdb_openai_type_name(v));
    return PDB_OK;
}

static pdb_status f_metadata(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)r, (void)lim;
    json_t *o = json_object_get(root, key);
    if (!json_is_object(o) || json_object_size(o) > 16)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'metadata' must be an object of at most 16 string values");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) if (!json_is_string(v) || strlen(k) > 64 || json_string_length(v) > 512)
        return pdb_openai_set_error(err, 400, key, "invalid_value", "'metadata' key '%.64s': keys <= 64 bytes, string values <= 512", k);
    return PDB_OK;
}

static pdb_status f_store(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim, (void)r;
    int store = 0;
    PDB_TRY(f_bool(root, key, &store, err));
    if (store) return pdb_openai_set_error(err, 400, key, "unsupported_value", "'store': true is not supported (answers are not kept)");
    return PDB_OK;
}

static pdb_status f_service_tier(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim, (void)r;
    json_t *v = json_object_get(root, key);
    if (json_is_string(v) && (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "default"))) return PDB_OK;
    return pdb_openai_set_error(err, 400, key, "unsupported_value", "'service_tier' must be auto or default (one tier is served)");
}

static pdb_status f_modalities(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim, (void)r;
    json_t *a = json_object_get(root, key), *v;
    size_t i;
    if (!json_is_array(a)) return pdb_openai_set_error(err, 400, key, "invalid_type", "'modalities' must be an array");
    json_array_foreach(a, i, v) if (!json_is_string(v) || strcmp(json_string_value(v), "text"))
        return pdb_openai_set_error(err, 400, key, "unsupported_value", "'modalities' entry %zu: only \"text\" is served", i);
    return PDB_OK;
}

/* The tool fields (pdb_toolcall parses them; tool_choice after tools: it names one of them). */
static pdb_status f_tools(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)lim;
    return pdb_toolcall_parse_tools(json_object_get(root, key), &r->tools, err);
}

static pdb_status f_parallel_tool_calls(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                        pdb_openai_error *err) {
    (void)lim;
    return pdb_toolcall_parse_parallel(json_object_get(root, key), &r->tools, err);
}

static pdb_status f_tool_choice(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim,
                                pdb_openai_error *err) {
    (void)lim;
    return pdb_toolcall_parse_choice(json_object_get(root, key), &r->tools, err);
}

static pdb_status f_refused(json_t *root, const char *key, pdb_openai_request *r, const pdb_openai_limits *lim, pdb_openai_error *err) {
    (void)root, (void)r, (void)lim;
    static const struct { const char *k, *why; } why[] = {
        {"functions", "the deprecated form of tools, answered as message.function_call, a shape not composed here; send 'tools'"},
        {"function_call", "the deprecated form of tool_choice, answered as message.function_call, a shape not composed here; send 'tool_choice'"},
        {"audio", "audio output is not served"},
        {"prediction", "predicted outputs are not supported"}, {"reasoning_effort", "the served template has no reasoning mode"},
        {"verbosity", "the served template has no verbosity control"}, {"web_search_options", "web search is not available"},
        {"prompt_cache_retention", "retention is the prefix-cache store's policy (--cache-max-bytes), not a request's"},
    };
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++)
        if (!strcmp(why[i].k, key)) return pdb_openai_set_error(err, 400, key, "unsupported_parameter", "'%s' is refused: %s", key, why[i].why);
    return pdb_openai_set_error(err, 400, key, "unsupported_parameter", "'%s' is not supported", key);
}

enum { F_C = PDB_OPENAI_COMPLETION, F_H = PDB_OPENAI_CHAT, F_B = F_C | F_H };
typedef struct pdb_openai_field {
    pdb_openai_field_info info;
    pdb_openai_field_fn fn;
    int required;        /* parsed even when absent (the parser then names it as missing) */
} pdb_openai_field;

/* Parse order is table order: cross-field rules read fields above them (best_of reads n,
 * top_logprobs reads logprobs, max_completion_tokens overrides max_tokens). */
static const pdb_openai_field PDB_OPENAI_FIELDS[] = {
    {{"model", F_B, "honoured"}, f_model, 0},
    {{"prompt", F_C, "honoured"}, f_prompt, 1},
    {{"messages", F_H, "honoured"}, f_messages, 1},
    {{"max_tokens", F_B, "honoured"}, f_max_tokens, 0},
    {{"max_completion_tokens", F_H, "honoured"}, f_max_tokens, 0},
    {{"temperature", F_B, "honoured"}, f_temperature, 0},
    {{"top_p", F_B, "honoured"}, f_top_p, 0},
    {{"top_k", F_B, "honoured"}, f_top_k, 0},
    {{"seed", F_B, "honoured"}, f_seed, 0},
    {{"stop", F_B, "honoured"}, f_stop, 0},
    {{"stream", F_B, "honoured"}, f_stream, 0},
    {{"stream_options", F_B, "honoured"}, f_stream_options, 0},
    {{"return_token_ids", F_B, "honoured"}, f_return_token_ids, 0},
    {{"ignore_eos", F_B, "honoured"}, f_ignore_eos, 0},
    {{"n", F_B, "honoured"}, f_n, 0},
    {{"best_of", F_C, "honoured"}, f_best_of, 0},
    {{"echo", F_C, "honoured"}, f_echo, 0},
    {{"suffix", F_C, "refused"}, f_suffix, 0},
    {{"logprobs", F_B, "honoured"}, f_logprobs, 0},
    {{"top_logprobs", F_H, "honoured"}, f_top_logprobs, 0},
    {{"frequency_penalty", F_B, "honoured"}, f_penalty, 0},
    {{"presence_penalty", F_B, "honoured"}, f_penalty, 0},
    {{"logit_bias", F_B, "honoured"}, f_logit_bias, 0},
    {{"response_format", F_H, "honoured"}, f_response_format, 0},
    {{"user", F_B, "honoured"}, f_user, 0},
    {{"safety_identifier", F_H, "honoured"}, f_user, 0},
    {{"prompt_cache_key", F_H, "accepted"}, f_string, 0},
    {{"metadata", F_H, "accepted"}, f_metadata, 0},
    {{"store", F_H, "honoured"}, f_store, 0},
    {{"service_tier", F_H, "honoured"}, f_service_tier, 0},
    {{"modalities", F_H, "honoured"}, f_modalities, 0},
    {{"audio", F_H, "refused"}, f_refused, 0},
    {{"prediction", F_H, "refused"}, f_refused, 0},
    {{"reasoning_effort", F_H, "refused"}, f_refused, 0},
    {{"verbosity", F_H, "refused"}, f_refused, 0},
    {{"web_search_options", F_H, "refused"}, f_refused, 0},
    {{"prompt_cache_retention", F_H, "refused"}, f_refused, 0},
    {{"tools", F_H, "honoured"}, f_tools, 0},
    {{"parallel_tool_calls", F_H, "honoured"}, f_parallel_tool_calls, 0},
    {{"tool_choice", F_H, "honoured"}, f_tool_choice, 0},
    {{"functions", F_H, "refused"}, f_refused, 0},
    {{"function_call", F_H, "refused"}, f_refused, 0},
};
#define PDB_OPENAI_N_FIELDS (sizeof PDB_OPENAI_FIELDS / sizeof PDB_OPENAI_FIELDS[0])

const pdb_openai_field_info *pdb_openai_field_at(size_t i) { return i < PDB_OPENAI_N_FIELDS ? &PDB_OPENAI_FIELDS[i].info : NULL; }

static const char *pdb_openai_endpoint_name(int kind) { return kind == PDB_OPENAI_CHAT ? "/v1/chat/completions" : "/v1/completions"; }

static pdb_status pdb_openai_parse_fields(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *r,
                                          pdb_openai_error *err) {
    /* every key must be a field of this endpoint: OpenAI's API answers an unrecognized argument
     * with a 400 too, and a field dropped without a word changes an answer behind the client */
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        size_t i = 0;
        while (i < PDB_OPENAI_N_FIELDS && strcmp(PDB_OPENAI_FIELDS[i].info.name, key)) i++;
        if (i == PDB_OPENAI_N_FIELDS)
            return pdb_openai_set_error(err, 400, key, "unknown_parameter", "'%.48s' is not a parameter of %s (docs/api.md lists them)", key,
                                        pdb_openai_endpoint_name(r->kind));
        if (!(PDB_OPENAI_FIELDS[i].info.endpoints & (int)r->kind))
            return pdb_openai_set_error(err, 400, key, "unknown_parameter", "'%s' is a parameter of %s, not of %s", key,
                                        pdb_openai_endpoint_name(r->kind == PDB_OPENAI_CHAT ? PDB_OPENAI_COMPLETION : PDB_OPENAI_CHAT),
                                        pdb_openai_endpoint_name(r->kind));
    }
    for (size_t i = 0; i < PDB_OPENAI_N_FIELDS; i++) {
        const pdb_openai_field *f = &PDB_OPENAI_FIELDS[i];
        if (!(f->info.endpoints & (int)r->kind)) continue;
        json_t *val = json_object_get(root, f->info.name);
        if (!f->required && (!val || json_is_null(val))) continue;
        PDB_TRY(f->fn(root, f->info.name, r, lim, err));
    }
    /* rules between fields */
    if (r->echo && r->logprobs)
        return pdb_openai_set_error(err, 400, "echo", "unsupported_value",
                                    "'echo' with 'logprobs' is not supported (the prompt's log-probabilities are not computed)");
    if (pdb_toolcall_active(&r->tools) && r->json_object)
        return pdb_openai_set_error(err, 400, "response_format", "unsupported_value",
                                    "'response_format' json_object with 'tools' is not supported (the JSON mask would forbid the "
                                    "tool-call tokens); send one or the other, or tool_choice \"none\"");
    if (pdb_toolcall_active(&r->tools)) {
        json_t *mct = json_object_get(root, "max_completion_tokens"); /* it wins over max_tokens: name the one in force */
        PDB_TRY(pdb_toolcall_check_forced(&r->tools, r->max_tokens, mct && !json_is_null(mct) ? "max_completion_tokens" : "max_tokens",
                                          r->n_stop, "stop", err));
    }
    return PDB_OK;
}

pdb_status pdb_openai_parse_body(pdb_openai_kind kind, const char *body, size_t len, const pdb_openai_limits *lim,
                                 pdb_openai_fields_fn fields, pdb_openai_request *req, pdb_openai_error *err) {
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    req->kind = kind;
    req->max_tokens = -1;
    req->temperature = 1.0;
    req->top_p = 1.0;
    req->n = 1;
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return pdb_openai_set_error(err, 400, NULL, "invalid_json", "request body is not valid JSON: %s at line %d column %d",
                                    je.text, je.line, je.column);
    pdb_status st = fields(root, lim, req, err);
    json_decref(root);
    if (st != PDB_OK) {
        pdb_openai_request_free(req);
        req->kind = kind;
    }
    return st;
}

static pdb_status pdb_openai_parse_root(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *req, pdb_openai_error *err) {
    if (!json_is_object(root))
        return pdb_openai_set_error(err, 400, NULL, "invalid_type", "request body must be a JSON object, not %s", pdb_openai_type_name(root));
    return pdb_openai_parse_fields(root, lim, req, err);
}

pdb_status pdb_openai_parse_request(pdb_openai_kind kind, const char *body, size_t len, const pdb_openai_limits *lim,
                                    pdb_openai_request *req, pdb_openai_error *err) {
    return pdb_openai_parse_body(kind, body, len, lim, pdb_openai_parse_root, req, err);
}

pdb_status pdb_openai_check_context(const pdb_openai_request *req, pdb_openai_kind kind, int64_t n_prompt, int64_t context,
                                    pdb_openai_error *err) {
    if (n_prompt >= context) {
        pdb_openai_set_error(err, 400, kind == PDB_OPENAI_CHAT ? "messages" : "prompt", "context_length_exceeded",
                             "the prompt has %lld tokens; this model's maximum context length is %lld tokens", (long long)n_prompt,
                             (long long)context);
        return PDB_INVALID;
    }
    if (req->max_tokens >= 0 && n_prompt + req->max_tokens > context) {
        pdb_openai_set_error(err, 400, "max_tokens", "context_length_exceeded",
                             "this model's maximum context length is %lld tokens, but %lld were requested (%lld in the prompt, "
                             "%lld to generate)", (long long)context, (long long)(n_prompt + req->max_tokens), (long long)n_prompt,
                             (long long)req->max_tokens);
        return PDB_INVALID;
    }
    return PDB_OK;
}

pdb_status pdb_openai_check_model(const pdb_openai_request *req, const char *served_id, pdb_openai_error *err) {
    if (!req->model || !strcmp(req->model, served_id)) return PDB_OK;
    return pdb_openai_set_error(err, 404, "model", "model_not_found", "The model '%.200s' does not exist (this server serves '%.200s')",
                                req->model, served_id);
}

/* ---- building ------------------------------------------------------------------------------- */

char *pdb_openai_error_json(const pdb_openai_error *e) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_t *m = pdb_openai_json_text(e->message, strlen(e->message));
    json_object_set_new(o, "message", m ? m : json_string("error"));
    json_object_set_new(o, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(o, "param", e->param[0] ? pdb_openai_json_text(e->param, strlen(e->param)) : json_null());
    json_object_set_new(o, "code", e->code[0] ? pdb_openai_json_text(e->code, strlen(e->code)) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", o);
    char *s = json_dumps(root, PDB_OPENAI_DUMP_FLAGS);
    json_decref(root);
    return s;
}

static json_t *pdb_openai_usage_json(const pdb_openai_usage *u) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens", (json_int_t)(u->prompt_tokens + u->completion_tokens),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
}

static json_t *pdb_openai_ids_json(const int32_t *ids, int64_t n) {
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *pdb_openai_head(const pdb_openai_meta *m, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id ? m->id : "", "object", object, "created", (json_int_t)m->created,
                     "model", m->model ? m->model : "");
}

static pdb_status pdb_openai_finish(json_t *root, const pdb_openai_usage *u, const json_t *extra, int sse, char **out,
                                    size_t *out_len) {
    *out = NULL;
    if (root && u) json_object_set_new(root, "usage", pdb_openai_usage_json(u));
    if (root && extra && json_is_object(extra)) json_object_update(root, (json_t *)extra);
    char *s = root ? json_dumps(root, PDB_OPENAI_DUMP_FLAGS) : NULL;
    json_decref(root);
    if (!s) return pdb_err_set(PDB_NOMEM, "openai: cannot build the response JSON");
    if (!sse) {
        *out = s;
        *out_len = strlen(s);
        return PDB_OK;
    }
    size_t n = strlen(s);
    char *e = malloc(n + 9);
    if (!e) { free(s); return pdb_err_set(PDB_NOMEM, "openai: no memory for an SSE event"); }
    memcpy(e, "data: ", 6);
    memcpy(e + 6, s, n);
    memcpy(e + 6 + n, "\n\n", 3);
    free(s);
    *out = e;
    *out_len = n + 8;
    return PDB_OK;
}

/* The token's text (bytes repaired to UTF-8) and its bytes array; token-id mode: "token_id:N", []. */
static void pdb_openai_token_json(const pdb_openai_meta *m, int32_t id, json_t **text, json_t **bytes) {
    size_t len = 0;
    const char *b = m->token_bytes ? m->token_bytes(m->token_user, id, &len) : NULL;
    if (!m->token_bytes || !b) {
        char t[32];
        snprintf(t, sizeof t, "token_id:%d", id);
        *text = json_string(t);
        if (bytes) *bytes = json_array();
        return;
    }
    *text = pdb_openai_json_text(b, len);
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len; i++) json_array_append_new(*bytes, json_integer((unsigned char)b[i]));
    }
}

/* JSON has no -inf: a token of probability 0 (a -inf or NaN logit) is -9999.0, as OpenAI writes it. */
static double pdb_openai_lp(double x) { return isfinite(x) ? x : -9999.0; }

/* chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null} */
static json_t *pdb_openai_chat_logprobs(const pdb_openai_meta *m, const pdb_openai_result *res) {
    json_t *content = json_array();
    for (int64_t i = 0; i < res->n_logprobs; i++) {
        const pdb_openai_logprob *lp = &res->logprobs[i];
        json_t *t, *b, *top = json_array();
        for (int k = 0; k < lp->n_top; k++) {
            json_t *tt, *tb;
            pdb_openai_token_json(m, lp->top[k].id, &tt, &tb);
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", tt, "logprob", pdb_openai_lp(lp->top[k].logprob), "bytes", tb));
        }
        pdb_openai_token_json(m, lp->id, &t, &b);
        json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob", pdb_openai_lp(lp->logprob), "bytes", b, "top_logprobs", top));
    }
    return json_pack("{s:o, s:n}", "content", content, "refusal");
}

/* completions (legacy): {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"} */
static json_t *pdb_openai_legacy_logprobs(const pdb_openai_meta *m, const pdb_openai_result *res) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t off = res->text_offset;
    for (int64_t i = 0; i < res->n_logprobs; i++) {
        const pdb_openai_logprob *lp = &res->logprobs[i];
        json_t *t;
        pdb_openai_token_json(m, lp->id, &t, NULL);
        json_t *top = json_object();
        for (int k = 0; k < lp->n_top; k++) {
            json_t *tt;
            pdb_openai_token_json(m, lp->top[k].id, &tt, NULL);
            if (!json_object_get(top, json_string_value(tt))) /* two ids of one text: the likelier is kept */
                json_object_set_new(top, json_string_value(tt), json_real(pdb_openai_lp(lp->top[k].logprob)));
            json_decref(tt);
        }
        size_t len = 0;
        if (m->token_bytes) m->token_bytes(m->token_user, lp->id, &len);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += len;
        json_array_append_new(tokens, t);
        json_array_append_new(lps, json_real(pdb_openai_lp(lp->logprob)));
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

/* The fields every choice carries (index, logprobs, finish_reason, token_ids when asked). */
static json_t *pdb_openai_choice_tail(const pdb_openai_meta *m, json_t *choice, const pdb_openai_result *res) {
    json_t *lp = json_null();
    if (res->logprobs) lp = m->kind == PDB_OPENAI_CHAT ? pdb_openai_chat_logprobs(m, res) : pdb_openai_legacy_logprobs(m, res);
    json_object_set_new(choice, "logprobs", lp ? lp : json_null());
    json_object_set_new(choice, "finish_reason", res->finish_reason ? json_string(res->finish_reason) : json_null());
    if (res->token_ids) json_object_set_new(choice, "token_ids", pdb_openai_ids_json(res->token_ids, res->n_token_ids));
    return choice;
}

pdb_status pdb_openai_build_response(const pdb_openai_meta *m, const pdb_openai_result *res, int n_res, const pdb_openai_usage *u,
                                     const json_t *extra, char **out, size_t *out_len) {
    int chat = m->kind == PDB_OPENAI_CHAT;
    json_t *root = pdb_openai_head(m, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < n_res; i++) {
        json_t *choice = json_pack("{s:i}", "index", res[i].index);
        json_t *text = pdb_openai_json_text(res[i].text, res[i].text_len);
        if (chat && res[i].n_tool_calls) { /* content is null when the model wrote only calls */
            if (!res[i].text_len) { json_decref(text); text = json_null(); }
            json_object_set_new(choice, "message",
                                json_pack("{s:s, s:o, s:n, s:o}", "role", "assistant", "content", text ? text : json_null(), "refusal",
                                          "tool_calls", pdb_toolcall_json(res[i].tool_calls, res[i].n_tool_calls, 0)));
        } else if (chat)
            json_object_set_new(choice, "message",
                                json_pack("{s:s, s:o, s:n}", "role", "assistant", "content", text ? text : json_string(""), "refusal"));
        else
            json_object_set_new(choice, "text", text ? text : json_string(""));
        json_array_append_new(choices, pdb_openai_choice_tail(m, choice, &res[i]));
    }
    if (root) json_object_set_new(root, "choices", choices); else json_decref(choices);
    static const pdb_openai_usage zero = {0, 0, 0};
    return pdb_openai_finish(root, u ? u : &zero, extra, 0, out, out_len);
}

pdb_status pdb_openai_build_chunk(const pdb_openai_meta *m, const pdb_openai_result *res, int first, const pdb_openai_usage *u,
                                  const json_t *extra, char **out, size_t *out_len) {
    int chat = m->kind == PDB_OPENAI_CHAT;
    json_t *root = pdb_openai_head(m, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i}", "index", res->index);
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (res->text_len || (first && !res->n_tool_calls))
            json_object_set_new(delta, "content", pdb_openai_json_text(res->text, res->text_len));
        if (res->n_tool_calls) json_object_set_new(delta, "tool_calls", pdb_toolcall_json(res->tool_calls, res->n_tool_calls, 1));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", pdb_openai_json_text(res->text, res->text_len));
    }
    json_t *choices = json_array();
    json_array_append_new(choices, pdb_openai_choice_tail(m, choice, res));
    if (root) json_object_set_new(root, "choices", choices); else json_decref(choices);
    return pdb_openai_finish(root, u, extra, 1, out, out_len);
}

pdb_status pdb_openai_build_error_chunk(const pdb_openai_error *err, char **out, size_t *out_len) {
    char *s = pdb_openai_error_json(err);
    if (!s) return pdb_err_set(PDB_NOMEM, "openai: cannot build an error chunk");
    size_t n = strlen(s);
    *out = malloc(n + 9);
    if (!*out) { free(s); return pdb_err_set(PDB_NOMEM, "openai: cannot build an error chunk"); }
    memcpy(*out, "data: ", 6);
    memcpy(*out + 6, s, n);
    memcpy(*out + 6 + n, "\n\n", 3);
    *out_len = n + 8;
    free(s);
    return PDB_OK;
}
