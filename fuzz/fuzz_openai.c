/* fuzz_openai: OpenAI request bodies (pdb_openai_parse_request) and Messages API bodies
 * (pdb_anthropic_parse_request) as the decode-server and the front receive them. The first byte
 * picks completions (even) or chat (odd), bit 1 a context limit, bit 2 the Messages API; the
 * rest is the body. Properties: no crash/UB/leak; a refusal carries a 4xx status and a message;
 * a parsed request is internally consistent (completions: exactly one prompt form, ids >= 0;
 * chat: >= 1 message with role and content, tool calls complete, a forced tool among the tools;
 * at most 4 stop strings; n, top_logprobs and logit_bias in range, n 1 and no JSON mode when
 * tools are active; Messages: max_tokens >= 1). */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "pdb_anthropic.h"
#include "pdb_openai.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    pdb_log_set_level((pdb_log_level)(PDB_LOG_ERROR + 1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    int messages_api = (data[0] & 4) != 0;
    pdb_openai_kind kind = (data[0] & 1) || messages_api ? PDB_OPENAI_CHAT : PDB_OPENAI_COMPLETION;
    /* the HTTP layer hands a NUL-terminated copy; keep that contract */
    char *body = malloc(size);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    pdb_openai_limits lim = {.max_context = (data[0] & 2) ? 4096 : 0};
    pdb_openai_request q;
    pdb_openai_error e;
    memset(&e, 0, sizeof e);
    pdb_status st = messages_api ? pdb_anthropic_parse_request(body, size - 1, &lim, &q, &e)
                                 : pdb_openai_parse_request(kind, body, size - 1, &lim, &q, &e);
    if (st == PDB_OK) {
        FUZZ_CHECK(q.kind == kind, "kind changed");
        FUZZ_CHECK(q.n_stop >= 0 && q.n_stop <= PDB_OPENAI_MAX_STOP, "n_stop %d", q.n_stop);
        for (int i = 0; i < q.n_stop; i++) FUZZ_CHECK(q.stop[i] != NULL, "stop[%d] NULL", i);
        if (kind == PDB_OPENAI_COMPLETION) {
            if (q.prompt_is_ids) {
                FUZZ_CHECK(q.n_prompt_ids >= 1 && q.prompt_ids, "empty id prompt accepted");
                for (int64_t i = 0; i < q.n_prompt_ids; i++) FUZZ_CHECK(q.prompt_ids[i] >= 0, "negative id accepted");
            } else {
                FUZZ_CHECK(q.prompt_text && strlen(q.prompt_text) == q.prompt_len, "prompt text/len disagree");
            }
        } else {
            FUZZ_CHECK(q.n_messages >= 1 && q.messages, "chat without messages accepted");
            for (size_t i = 0; i < q.n_messages; i++) {
                FUZZ_CHECK(q.messages[i].role && q.messages[i].content, "message %zu incomplete", i);
                for (size_t k = 0; k < q.messages[i].n_tool_calls; k++)
                    FUZZ_CHECK(q.messages[i].tool_calls[k].id && q.messages[i].tool_calls[k].name && q.messages[i].tool_calls[k].arguments,
                               "message %zu call %zu incomplete", i, k);
            }
            const char *forced = pdb_toolcall_forced_name(&q.tools);
            int found = !forced;
            for (size_t i = 0; forced && i < q.tools.n_tools; i++) found |= !strcmp(q.tools.tools[i].name, forced);
            FUZZ_CHECK(found, "forced tool %s not among the tools", forced);
            if (messages_api) FUZZ_CHECK(q.max_tokens >= 1, "Messages request without max_tokens accepted");
        }
        FUZZ_CHECK(q.top_p > 0 && q.top_p <= 1, "top_p %g accepted", q.top_p);
        FUZZ_CHECK(q.temperature >= 0, "temperature %g accepted", q.temperature);
        FUZZ_CHECK(q.n >= 1 && q.n <= PDB_OPENAI_MAX_N, "n %d accepted", q.n);
        FUZZ_CHECK(q.top_logprobs >= 0 && q.top_logprobs <= PDB_OPENAI_MAX_TOP_LOGPROBS, "top_logprobs %d accepted", q.top_logprobs);
        FUZZ_CHECK(q.n_bias >= 0 && q.n_bias <= PDB_OPENAI_MAX_LOGIT_BIAS && (!q.n_bias || (q.bias_ids && q.bias_vals)), "logit_bias");
        for (int i = 0; i < q.n_bias; i++) FUZZ_CHECK(q.bias_ids[i] >= 0 && q.bias_vals[i] >= -100 && q.bias_vals[i] <= 100, "bias %d", i);
        FUZZ_CHECK(!(q.echo && q.logprobs), "echo with logprobs accepted");
        if (pdb_toolcall_active(&q.tools)) FUZZ_CHECK(!q.json_object, "json_object with tools accepted");
        if (pdb_toolcall_active(&q.tools) && pdb_toolcall_forced(&q.tools)) /* the mask needs room to close the call, and no stop */
            FUZZ_CHECK(q.n_stop == 0 && (q.max_tokens < 0 || q.max_tokens >= 2), "forced call with stop %d / max_tokens %lld accepted",
                       q.n_stop, (long long)q.max_tokens);
        if (lim.max_context && q.max_tokens >= 0) FUZZ_CHECK(q.max_tokens <= lim.max_context, "max_tokens over context");
        pdb_openai_request_free(&q);
    } else {
        FUZZ_CHECK(e.status >= 400 && e.status < 600 && e.message[0], "refusal without status/message");
        char *ej = messages_api ? pdb_anthropic_error_json(&e) : pdb_openai_error_json(&e);
        FUZZ_CHECK(ej != NULL, "error json");
        free(ej);
    }
    free(body);
    return 0;
}
