/* pdb_cli_generate: `pdbridge generate`, greedy text generation with the reference forward and
 * the model directory's tokenizer.json; tokens are printed as they are produced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_chat.h"
#include "pdb_cli.h"
#include "pdb_clock.h"
#include "pdb_file.h"
#include "pdb_math.h"
#include "pdb_tokenizer.h"
#include "pdb_v2.h"

int pdb_cli_generate(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge generate --model DIR [--prompt TEXT] [-n N] [--chat]\n\n"
        "Greedy generation with the CPU reference forward (f32). The prompt is --prompt or stdin;\n"
        "--chat wraps it as one user message in the DeepSeek chat template. DIR needs tokenizer.json.\n"
        "Prints the continuation as it is generated, then timings on stderr.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    const char *model = NULL, *prompt = NULL;
    long n_gen = 32;
    int chat = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) model = argv[++i];
        else if (!strcmp(a, "--prompt") && v) prompt = argv[++i];
        else if ((!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) && v) n_gen = strtol(argv[++i], NULL, 10);
        else if (!strcmp(a, "--chat")) chat = 1;
        else { fprintf(stderr, "pdbridge generate: unknown or incomplete option '%s'\n\n%s", a, usage); return 2; }
    }
    if (!model || n_gen < 0 || n_gen > 100000) { fprintf(stderr, "pdbridge generate: --model is required, 0 <= n <= 100000\n\n%s", usage); return 2; }
    char *text = NULL;
    size_t len = 0;
    pdb_status rs = PDB_OK;
    if (prompt) { text = strdup(prompt); len = strlen(prompt); }
    else rs = pdb_file_read_stream(stdin, "stdin", PDB_TOKENIZER_MAX_TEXT, &text, &len);
    pdb_tokenizer *tok = NULL;
    pdb_v2_model *m = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    float *logits = NULL;
    pdb_v2_cache c = {0};
    int rc = 1;
    if (!text) { if (!rs) pdb_err_set(PDB_NOMEM, "prompt"); goto done; }
    if (pdb_tokenizer_load(model, &tok)) goto done;
    if (chat) {
        pdb_chat_message msg = {"user", text, NULL, 0};
        char *rendered;
        size_t rl;
        if (pdb_chat_render_prompt(&msg, 1, true, &rendered, &rl)) goto done;
        free(text);
        text = rendered;
        len = rl;
    }
    if (pdb_tokenizer_encode(tok, text, len, &ids, &n)) goto done;
    if (n == 0) { pdb_err_set(PDB_INVALID, "empty prompt"); goto done; }
    double t0 = pdb_clock_now();
    if (pdb_v2_load(model, &m)) goto done;
    if (pdb_tokenizer_vocab_size(tok) > m->cfg.vocab_size) {
        pdb_err_set(PDB_MISMATCH, "%s: tokenizer has %d ids but the model's vocab_size is %lld", model,
                    pdb_tokenizer_vocab_size(tok), (long long)m->cfg.vocab_size);
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)m->cfg.vocab_size);
    if (!logits) { pdb_err_set(PDB_NOMEM, "logits"); goto done; }
    if (pdb_v2_cache_init(&c, m, n + n_gen + 1)) goto done;
    double t1 = pdb_clock_now();
    if (pdb_v2_forward(m, &c, ids, n, 0, logits)) goto done;
    double t2 = pdb_clock_now();
    int64_t produced = 0;
    for (; produced < n_gen; produced++) {
        int32_t next = (int32_t)pdb_math_argmax(logits, m->cfg.vocab_size);
        size_t bl;
        const char *b = pdb_tokenizer_token_bytes(tok, next, &bl);
        if (b) fwrite(b, 1, bl, stdout);
        fflush(stdout);
        if (next == pdb_tokenizer_eos_id(tok)) { produced++; break; }
        if (produced + 1 < n_gen && pdb_v2_forward(m, &c, &next, 1, 0, logits)) goto done;
    }
    double t3 = pdb_clock_now();
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "generate: load %.2fs, prompt %lld tokens in %.2fs (%.1f tok/s), %lld tokens in %.2fs (%.1f tok/s)\n",
            t1 - t0, (long long)n, t2 - t1, n / (t2 - t1 + 1e-9), (long long)produced, t3 - t2,
            produced / (t3 - t2 + 1e-9));
    rc = 0;
done:
    if (rc) pdb_cli_print_error("generate", NULL);
    pdb_v2_cache_free(&c);
    free(logits);
    free(ids);
    pdb_v2_free(m);
    pdb_tokenizer_free(tok);
    free(text);
    return rc;
}
