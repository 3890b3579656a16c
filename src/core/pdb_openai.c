/* pdb_openai: OpenAI request parsing and response building with jansson (see pdb_openai.h).
 * Invariants: parse functions never keep a reference into the jansson tree (every string is
 * copied), fill *err on every failure path and leave *req fully freed then; unknown fields are
 * ignored as the OpenAI API does, but fields that would change the meaning of the answer and are
 * not supported (n > 1, echo, best_of > 1, suffix) are refused rather than silently dropped. */
#include "pdb_openai.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define PDB_OPENAI_DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER)

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
    memset(r, 0, sizeof *r);
}

static char *pdb_openai_dup(const char *s, size_t n) {
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
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return pdb_openai_set_error(err, 400, param, "unsupported_value",
                                        "'%s' part %zu must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)", param, i);
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

static pdb_status pdb_openai_parse_fields(json_t *root, const pdb_openai_limits *lim, pdb_openai_request *r,
                                          pdb_openai_error *err) {
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return pdb_openai_set_error(err, 400, "model", "invalid_type", "'model' must be a string, not %s", pdb_openai_type_name(model));
        r->model = pdb_openai_dup(json_string_value(model), json_string_length(model));
        if (!r->model) return pdb_openai_set_error(err, 500, NULL, NULL, "out of memory");
    }
    if (r->kind == PDB_OPENAI_COMPLETION) PDB_TRY(pdb_openai_parse_prompt(root, r, err));
    else PDB_TRY(pdb_openai_parse_messages(root, r, err));
    if (r->kind == PDB_OPENAI_CHAT) PDB_TRY(pdb_toolcall_parse_openai(root, &r->tools, err));

    const char *mt_key = "max_tokens";
    int64_t mt = -1;
    int has_mt = 0;
    PDB_TRY(pdb_openai_get_int(root, "max_tokens", &mt, &has_mt, err));
    if (r->kind == PDB_OPENAI_CHAT) {
        int has_mct = 0;
        int64_t mct = -1;
        PDB_TRY(pdb_openai_get_int(root, "max_completion_tokens", &mct, &has_mct, err));
        if (has_mct) { mt = mct; has_mt = 1; mt_key = "max_completion_tokens"; }
    }
    if (has_mt) {
        if (mt < 0) return pdb_openai_set_error(err, 400, mt_key, "invalid_value", "'%s' must be >= 0, got %lld", mt_key, (long long)mt);
        if (lim && lim->max_context > 0 && mt > lim->max_context)
            return pdb_openai_set_error(err, 400, mt_key, "invalid_value", "'%s' is %lld, more than the model's context length (%lld)",
                                        mt_key, (long long)mt, (long long)lim->max_context);
        r->max_tokens = mt;
    }
    PDB_TRY(pdb_openai_get_number(root, "temperature", &r->temperature, err));
    if (r->temperature < 0)
        return pdb_openai_set_error(err, 400, "temperature", "invalid_value", "'temperature' must be >= 0, got %g", r->temperature);
    if (r->temperature > 100)
        return pdb_openai_set_error(err, 400, "temperature", "invalid_value", "'temperature' must be <= 100, got %g", r->temperature);
    PDB_TRY(pdb_openai_get_number(root, "top_p", &r->top_p, err));
    if (!(r->top_p > 0 && r->top_p <= 1))
        return pdb_openai_set_error(err, 400, "top_p", "invalid_value", "'top_p' must be in (0, 1], got %g", r->top_p);
    int64_t tk = 0;
    PDB_TRY(pdb_openai_get_int(root, "top_k", &tk, NULL, err));
    if (tk < -1 || tk > INT32_MAX)
        return pdb_openai_set_error(err, 400, "top_k", "invalid_value", "'top_k' must be -1, 0 (off) or a positive count, got %lld",
                                    (long long)tk);
    r->top_k = tk < 0 ? 0 : (int32_t)tk;
    int64_t seed = 0;
    PDB_TRY(pdb_openai_get_int(root, "seed", &seed, &r->has_seed, err));
    r->seed = (uint64_t)seed;
    PDB_TRY(pdb_openai_parse_stop(root, r, err));
    PDB_TRY(pdb_openai_get_bool(root, "stream", &r->stream, err));
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return pdb_openai_set_error(err, 400, "stream_options", "invalid_type", "'stream_options' must be an object, not %s",
                                        pdb_openai_type_name(so));
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return pdb_openai_set_error(err, 400, "stream_options.include_usage", "invalid_type", "'stream_options.include_usage' must be a boolean");
        r->include_usage = json_is_true(iu);
        json_t *cu = json_object_get(so, "continuous_usage_stats");
        if (cu && !json_is_null(cu) && !json_is_boolean(cu))
            return pdb_openai_set_error(err, 400, "stream_options.continuous_usage_stats", "invalid_type",
                                        "'stream_options.continuous_usage_stats' must be a boolean");
        r->continuous_usage = json_is_true(cu);
    }
    PDB_TRY(pdb_openai_get_bool(root, "return_token_ids", &r->return_token_ids, err));
    PDB_TRY(pdb_openai_get_bool(root, "ignore_eos", &r->ignore_eos, err));
    int64_t n = 1;
    PDB_TRY(pdb_openai_get_int(root, "n", &n, NULL, err));
    if (n != 1) return pdb_openai_set_error(err, 400, "n", "unsupported_value", "only n = 1 is supported, got %lld", (long long)n);
    int64_t best_of = 1;
    PDB_TRY(pdb_openai_get_int(root, "best_of", &best_of, NULL, err));
    if (best_of != 1) return pdb_openai_set_error(err, 400, "best_of", "unsupported_value", "only best_of = 1 is supported");
    int echo = 0;
    PDB_TRY(pdb_openai_get_bool(root, "echo", &echo, err));
    if (echo) return pdb_openai_set_error(err, 400, "echo", "unsupported_value", "'echo' is not supported");
    json_t *suffix = json_object_get(root, "suffix");
    if (suffix && !json_is_null(suffix) && !(json_is_string(suffix) && json_string_length(suffix) == 0))
        return pdb_openai_set_error(err, 400, "suffix", "unsupported_value", "'suffix' is not supported");
    return PDB_OK;
}

pdb_status pdb_openai_parse_request(pdb_openai_kind kind, const char *body, size_t len, const pdb_openai_limits *lim,
                                    pdb_openai_request *req, pdb_openai_error *err) {
    memset(req, 0, sizeof *req);
    memset(err, 0, sizeof *err);
    req->kind = kind;
    req->max_tokens = -1;
    req->temperature = 1.0;
    req->top_p = 1.0;
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return pdb_openai_set_error(err, 400, NULL, "invalid_json", "request body is not valid JSON: %s at line %d column %d",
                                    je.text, je.line, je.column);
    pdb_status st;
    if (!json_is_object(root))
        st = pdb_openai_set_error(err, 400, NULL, "invalid_type", "request body must be a JSON object, not %s", pdb_openai_type_name(root));
    else
        st = pdb_openai_parse_fields(root, lim, req, err);
    json_decref(root);
    if (st != PDB_OK) {
        pdb_openai_request_free(req);
        req->kind = kind;
    }
    return st;
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

/* The fields every choice carries (logprobs, finish_reason, token_ids when asked), as the only
 * element of root's "choices"; takes ownership of choice. */
static void pdb_openai_add_choice(json_t *root, json_t *choice, const pdb_openai_result *res) {
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", res->finish_reason ? json_string(res->finish_reason) : json_null());
    if (res->token_ids) json_object_set_new(choice, "token_ids", pdb_openai_ids_json(res->token_ids, res->n_token_ids));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    if (root) json_object_set_new(root, "choices", choices); else json_decref(choices);
}

pdb_status pdb_openai_build_response(const pdb_openai_meta *m, const pdb_openai_result *res, const pdb_openai_usage *u,
                                     const json_t *extra, char **out, size_t *out_len) {
    int chat = m->kind == PDB_OPENAI_CHAT;
    json_t *root = pdb_openai_head(m, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_pack("{s:i}", "index", 0);
    json_t *text = pdb_openai_json_text(res->text, res->text_len);
    if (chat && res->n_tool_calls) {
        if (!res->text_len) { json_decref(text); text = json_null(); }
        json_object_set_new(choice, "message", json_pack("{s:s, s:o, s:o}", "role", "assistant", "content", text ? text : json_null(),
                                                         "tool_calls", pdb_toolcall_json(res->tool_calls, res->n_tool_calls, 0)));
    } else if (chat)
        json_object_set_new(choice, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", text ? text : json_string("")));
    else
        json_object_set_new(choice, "text", text ? text : json_string(""));
    pdb_openai_add_choice(root, choice, res);
    static const pdb_openai_usage zero = {0, 0, 0};
    return pdb_openai_finish(root, u ? u : &zero, extra, 0, out, out_len);
}

pdb_status pdb_openai_build_chunk(const pdb_openai_meta *m, const pdb_openai_result *res, int first, const pdb_openai_usage *u,
                                  const json_t *extra, char **out, size_t *out_len) {
    int chat = m->kind == PDB_OPENAI_CHAT;
    json_t *root = pdb_openai_head(m, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i}", "index", 0);
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
    pdb_openai_add_choice(root, choice, res);
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
