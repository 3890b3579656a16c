/* pdb_dec_reply: the answer composer (see pdb_dec_reply.h). State: the tool-call parser, the
 * answer as an ordered list of blocks (text runs and calls, as Anthropic orders them; OpenAI
 * joins the text runs into content), the stream's progress (first event sent, the open
 * Anthropic block) and the output bytes not yet taken. */
#include "pdb_dec_reply.h"

#include <string.h>

#include "pdb_anthropic.h"
#include "pdb_buf.h"
#include "pdb_tools.h"

typedef struct rp_block {
    int call;
    char *text;        /* text run, or the call's arguments */
    size_t len, cap;
    char id[96], name[80];
} rp_block;

struct pdb_dec_reply {
    pdb_dec_reply_opts o;
    char id[64], model[256];
    pdb_tools_parser parser;
    rp_block *blocks;
    size_t n_blocks, cap_blocks;
    int n_calls, done, oom;
    int started;             /* the first stream event went out */
    int open;                /* Anthropic stream: index of the open block, -1 none */
    const int32_t *ids;      /* OpenAI stream: ids of the current feed, not yet sent ... */
    const pdb_openai_logprob *lps; /* ... and their log-probabilities (NULL: none) */
    int64_t n_ids;
    const pdb_openai_usage *u;
    pdb_anthropic_sse out;   /* bytes to send */
    const char *reason;
    rp_block content;        /* OpenAI non-stream, after finish: the choice's content ... */
    pdb_toolcall_out *tc;    /* ... its calls ... */
    pdb_openai_result res;   /* ... and the choice itself */
};

static rp_block *rp_new_block(pdb_dec_reply *r, int call) {
    if (r->n_blocks == r->cap_blocks) {
        size_t nc = r->cap_blocks ? r->cap_blocks * 2 : 8;
        rp_block *nb = realloc(r->blocks, nc * sizeof *nb);
        if (!nb) return NULL;
        r->blocks = nb;
        r->cap_blocks = nc;
    }
    rp_block *b = &r->blocks[r->n_blocks++];
    memset(b, 0, sizeof *b);
    b->call = call;
    return b;
}

static int rp_append(rp_block *b, const char *s, size_t n) {
    if (!pdb_buf_grow(&b->text, &b->cap, b->len + n + 1, 0)) return 0;
    if (n) memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = 0;
    return 1;
}

pdb_status pdb_dec_reply_new(const pdb_dec_reply_opts *o, pdb_dec_reply **out) {
    pdb_dec_reply *r = calloc(1, sizeof *r);
    if (!r) return pdb_err_set(PDB_NOMEM, "reply: out of memory");
    r->o = *o;
    snprintf(r->id, sizeof r->id, "%s", o->meta.id ? o->meta.id : "");
    snprintf(r->model, sizeof r->model, "%s", o->meta.model ? o->meta.model : "");
    r->o.meta.id = r->id;
    r->o.meta.model = r->model;
    r->o.forced_name = NULL;
    r->open = -1;
    if (o->parse_tools && o->forced_any) pdb_tools_parser_init_head(&r->parser);
    else if (o->parse_tools) pdb_tools_parser_init(&r->parser, o->forced_name);
    *out = r;
    return PDB_OK;
}

void pdb_dec_reply_free(pdb_dec_reply *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_blocks; i++) free(r->blocks[i].text);
    free(r->blocks);
    pdb_tools_parser_free(&r->parser);
    pdb_anthropic_sse_free(&r->out);
    free(r->content.text);
    free(r->tc);
    free(r);
}

static pdb_anthropic_usage rp_an_usage(const pdb_openai_usage *u) {
    pdb_anthropic_usage a = {0, 0, 0};
    if (u) a = (pdb_anthropic_usage){u->prompt_tokens, u->completion_tokens, u->cached_tokens};
    return a;
}

/* ---- OpenAI stream chunks ------------------------------------------------------------------- */

static void rp_put_bytes(pdb_dec_reply *r, char *s, size_t n) {
    if (!s) { r->oom = 1; return; }
    if (!pdb_buf_put(&r->out, s, n)) r->oom = 1;
    free(s);
}

static void rp_chunk(pdb_dec_reply *r, const char *text, size_t len, const pdb_toolcall_out *tc, const char *finish,
                     const pdb_openai_usage *u) {
    static const int32_t none[1] = {0};
    pdb_openai_result res = {.index = r->o.index, .text = text, .text_len = len, .finish_reason = finish, .tool_calls = tc,
                             .n_tool_calls = tc ? 1 : 0};
    int lp = r->o.logprobs && r->lps && r->n_ids; /* a chunk carries the entries of the ids it carries */
    if ((r->o.return_token_ids && (r->n_ids || finish)) || lp) {
        if (r->o.return_token_ids) {
            res.token_ids = r->n_ids ? r->ids : none;
            res.n_token_ids = r->n_ids;
        }
        if (lp) {
            res.logprobs = r->lps;
            res.n_logprobs = r->n_ids;
        }
        r->n_ids = 0;
    }
    const pdb_openai_usage *cu = u ? u : r->o.continuous_usage ? r->u : NULL;
    char *chunk = NULL;
    size_t n = 0;
    if (pdb_openai_build_chunk(&r->o.meta, &res, !r->started, cu, NULL, &chunk, &n) != PDB_OK) { r->oom = 1; return; }
    r->started = 1;
    rp_put_bytes(r, chunk, n);
}

/* ---- Anthropic stream ----------------------------------------------------------------------- */

static void rp_an_close(pdb_dec_reply *r) {
    if (r->open < 0) return;
    pdb_anthropic_sse_block_stop(&r->out, r->open);
    r->open = -1;
}

static void rp_an_start(pdb_dec_reply *r) {
    if (r->started) return;
    pdb_anthropic_usage au = rp_an_usage(r->u);
    au.output_tokens = 0;
    pdb_anthropic_sse_message_start(&r->out, r->id, r->model, &au);
    r->started = 1;
}

/* ---- events --------------------------------------------------------------------------------- */

static void rp_text(pdb_dec_reply *r, const char *s, size_t n) {
    if (!n) return;
    rp_block *b = r->n_blocks && !r->blocks[r->n_blocks - 1].call ? &r->blocks[r->n_blocks - 1] : rp_new_block(r, 0);
    int new_block = b && b->len == 0;
    if (!b || !rp_append(b, s, n)) { r->oom = 1; return; }
    if (!r->o.stream) return;
    if (r->o.api == PDB_DEC_REPLY_OPENAI) {
        rp_chunk(r, s, n, NULL, NULL, NULL);
    } else {
        if (new_block) {
            pdb_anthropic_block sb = {0, "", 0, NULL, NULL, NULL, 0};
            pdb_anthropic_sse_block_start(&r->out, (int)(r->n_blocks - 1), &sb);
            r->open = (int)(r->n_blocks - 1);
        }
        pdb_anthropic_sse_text_delta(&r->out, (int)(r->n_blocks - 1), s, n);
    }
}

static void rp_call(pdb_dec_reply *r, const char *name, size_t n) {
    rp_block *b = rp_new_block(r, 1);
    if (!b || !rp_append(b, "", 0)) { r->oom = 1; return; }
    snprintf(b->name, sizeof b->name, "%.*s", (int)(n < 79 ? n : 79), name);
    const char *stem = r->id + strcspn(r->id, "-_"); /* "chatcmpl-6b0f..." -> "6b0f..." */
    stem = *stem ? stem + 1 : r->id;
    snprintf(b->id, sizeof b->id, "%s_%s_%d", r->o.api == PDB_DEC_REPLY_ANTHROPIC ? "toolu" : "call", stem, r->n_calls);
    int index = r->n_calls++;
    if (!r->o.stream) return;
    if (r->o.api == PDB_DEC_REPLY_OPENAI) {
        pdb_toolcall_out tc = {index, b->id, b->name, "", 0};
        rp_chunk(r, NULL, 0, &tc, NULL, NULL);
    } else {
        rp_an_close(r);
        pdb_anthropic_block sb = {1, NULL, 0, b->id, b->name, NULL, 0};
        pdb_anthropic_sse_block_start(&r->out, (int)(r->n_blocks - 1), &sb);
        r->open = (int)(r->n_blocks - 1);
    }
}

static void rp_args(pdb_dec_reply *r, const char *s, size_t n) {
    rp_block *b = r->n_blocks ? &r->blocks[r->n_blocks - 1] : NULL;
    if (!b || !b->call) return; /* cannot happen: ARGS follow CALL */
    if (!rp_append(b, s, n)) { r->oom = 1; return; }
    if (r->o.stream && r->o.api == PDB_DEC_REPLY_OPENAI) {
        pdb_toolcall_out tc = {r->n_calls - 1, NULL, NULL, s, n};
        rp_chunk(r, NULL, 0, &tc, NULL, NULL);
    } /* Anthropic: sent whole at the call's end, once it is known whether they are an object */
}

static void rp_call_end(pdb_dec_reply *r) {
    rp_block *b = r->n_blocks ? &r->blocks[r->n_blocks - 1] : NULL;
    if (!b || !b->call) return;
    if (r->o.stream && r->o.api == PDB_DEC_REPLY_ANTHROPIC) {
        json_t *in = pdb_anthropic_tool_input(b->text, b->len);
        char *js = in ? json_dumps(in, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(in);
        if (!js) { r->oom = 1; return; }
        if (strcmp(js, "{}")) pdb_anthropic_sse_json_delta(&r->out, (int)(r->n_blocks - 1), js, strlen(js));
        free(js);
        rp_an_close(r);
    }
    if (r->o.single_call) r->done = 1;
}

static int rp_on_event(void *user, pdb_tools_event ev, int call, const char *s, size_t n) {
    pdb_dec_reply *r = user;
    (void)call;
    switch (ev) {
    case PDB_TOOLS_EV_TEXT: rp_text(r, s, n); break;
    case PDB_TOOLS_EV_CALL: rp_call(r, s, n); break;
    case PDB_TOOLS_EV_ARGS: rp_args(r, s, n); break;
    default: rp_call_end(r); break;
    }
    return r->oom ? -1 : r->done ? 1 : 0;
}

int pdb_dec_reply_feed(pdb_dec_reply *r, const char *text, size_t len, const int32_t *ids, const pdb_openai_logprob *lps,
                       int64_t n_ids, const pdb_openai_usage *u) {
    if (r->done) return 1;
    r->u = u;
    r->ids = ids;
    r->lps = lps;
    r->n_ids = n_ids;
    if (r->o.stream && !r->started) {
        if (r->o.api == PDB_DEC_REPLY_ANTHROPIC) rp_an_start(r);
        else rp_chunk(r, "", 0, NULL, NULL, NULL); /* the role chunk, with the usage the front reads */
    }
    int rc = 0;
    if (r->o.parse_tools) {
        rc = pdb_tools_parser_feed(&r->parser, text, len, rp_on_event, r);
        if (!rc && pdb_tools_parser_done(&r->parser)) r->done = 1;
    } else {
        rp_text(r, text, len);
    }
    if (r->o.stream && r->o.api == PDB_DEC_REPLY_OPENAI && (r->o.return_token_ids || (r->o.logprobs && r->lps)) && r->n_ids)
        rp_chunk(r, "", 0, NULL, NULL, NULL);
    r->ids = NULL;
    r->lps = NULL;
    r->n_ids = 0;
    if (r->oom || rc < 0) return -1;
    return r->done ? 1 : 0;
}

pdb_status pdb_dec_reply_finish(pdb_dec_reply *r, const pdb_dec_reply_end *e) {
    r->u = &e->usage;
    if (r->o.stream && !r->started) pdb_dec_reply_feed(r, "", 0, NULL, NULL, 0, &e->usage);
    if (r->o.parse_tools && !r->done) pdb_tools_parser_finish(&r->parser, rp_on_event, r);
    int anth = r->o.api == PDB_DEC_REPLY_ANTHROPIC;
    int called = r->n_calls > 0 && (!e->length || e->bound);
    if (called) r->reason = anth ? "tool_use" : "tool_calls";
    else if (e->length) r->reason = anth ? "max_tokens" : "length";
    else if (e->stop_sequence) r->reason = anth ? "stop_sequence" : "stop";
    else r->reason = anth ? "end_turn" : "stop";
    const char *stop_seq = !called && !e->length ? e->stop_sequence : NULL;
    if (r->o.stream) {
        if (anth) {
            rp_an_close(r);
            pdb_anthropic_usage au = rp_an_usage(&e->usage);
            pdb_anthropic_sse_message_delta(&r->out, r->reason, stop_seq, &au);
            pdb_anthropic_sse_message_stop(&r->out, NULL);
        } else {
            rp_chunk(r, "", 0, NULL, r->reason, !e->not_last && (r->o.include_usage || r->o.continuous_usage) ? &e->usage : NULL);
            if (!e->not_last) {
                char *done = strdup(PDB_OPENAI_SSE_DONE);
                rp_put_bytes(r, done, strlen(PDB_OPENAI_SSE_DONE));
            }
        }
        return r->oom || r->out.oom ? pdb_err_set(PDB_NOMEM, "reply: out of memory") : PDB_OK;
    }
    /* the body */
    char *body = NULL;
    size_t n = 0;
    pdb_status st;
    if (anth) {
        pdb_anthropic_block *bl = calloc(r->n_blocks + 1, sizeof *bl);
        if (!bl) return pdb_err_set(PDB_NOMEM, "reply: out of memory");
        for (size_t i = 0; i < r->n_blocks; i++) {
            const rp_block *b = &r->blocks[i];
            bl[i] = b->call ? (pdb_anthropic_block){1, NULL, 0, b->id, b->name, b->text, b->len}
                            : (pdb_anthropic_block){0, b->text, b->len, NULL, NULL, NULL, 0};
        }
        pdb_anthropic_usage au = rp_an_usage(&e->usage);
        st = pdb_anthropic_build_message(r->id, r->model, bl, r->n_blocks, r->reason, stop_seq, &au, NULL, &body, &n);
        free(bl);
    } else {
        r->tc = calloc((size_t)r->n_calls + 1, sizeof *r->tc);
        int k = 0, ok = r->tc != NULL && rp_append(&r->content, "", 0);
        for (size_t i = 0; ok && i < r->n_blocks; i++) {
            const rp_block *b = &r->blocks[i];
            if (b->call) r->tc[k] = (pdb_toolcall_out){k, b->id, b->name, b->text, b->len}, k++;
            else ok = rp_append(&r->content, b->text, b->len);
        }
        static const int32_t none[1] = {0};
        static const pdb_openai_logprob no_lp[1];
        r->res = (pdb_openai_result){.index = r->o.index, .text = r->content.text, .text_len = r->content.len, .finish_reason = r->reason,
                                     .tool_calls = r->tc, .n_tool_calls = (size_t)k};
        pdb_openai_result *res = &r->res;
        if (r->o.return_token_ids) { res->token_ids = e->all_ids ? e->all_ids : none; res->n_token_ids = e->n_all_ids; }
        if (r->o.logprobs) { res->logprobs = e->all_logprobs ? e->all_logprobs : no_lp; res->n_logprobs = e->all_logprobs ? e->n_all_ids : 0; }
        if (!ok) return pdb_err_set(PDB_NOMEM, "reply: out of memory");
        if (e->no_body) return PDB_OK;
        st = pdb_openai_build_response(&r->o.meta, res, 1, &e->usage, NULL, &body, &n);
    }
    if (st != PDB_OK) return st;
    rp_put_bytes(r, body, n);
    return r->oom ? pdb_err_set(PDB_NOMEM, "reply: out of memory") : PDB_OK;
}

char *pdb_dec_reply_take(pdb_dec_reply *r, size_t *len) {
    *len = 0;
    if (!r->out.len) return NULL;
    char *p = r->out.p;
    *len = r->out.len;
    memset(&r->out, 0, sizeof r->out);
    return p;
}

const char *pdb_dec_reply_reason(const pdb_dec_reply *r) { return r->reason ? r->reason : "none"; }

const pdb_openai_result *pdb_dec_reply_result(const pdb_dec_reply *r) { return &r->res; }
