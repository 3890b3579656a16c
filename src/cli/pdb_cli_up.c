/* pdb_cli_up: `pdbridge up`, the one-command demo (make run). Generates (once) a small random
 * DeepSeek-V2 checkpoint (or with --arch deepseek_v4 the tiny V4 preset widened to the real
 * vocabulary) with the real tokenizer and its decoder copy, starts a decoder, a
 * prefill server (CUDA when a GPU is usable, else CPU) and a front on loopback, plus a second,
 * purely native decoder for comparison; sends a cold prompt of several thousand tokens built
 * from the Python standard library's sources with a needle sentence in the middle, then a warm
 * follow-up; prints tokens, verdict, time to first token, total, bridged vs native and whether
 * the answers are equal; stops everything it started. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pdb_arch.h"
#include "pdb_cli.h"
#include "pdb_cli_prompt.h"
#include "pdb_cli_stream.h"
#include "pdb_clock.h"
#include "pdb_http_client.h"
#include "pdb_make_model.h"
#include "pdb_quantize.h"
#include "pdb_sys.h"
#include "pdb_tokenizer.h"

#define UP_NEEDLE "The secret passphrase for the pdbridge demo is violet-harbor-42."
#define UP_QUESTION "\n\nQuestion: what is the secret passphrase mentioned in the text above?"
#define UP_FOLLOWUP "\n\nQuestion: which module of the text above defines the most functions?"

typedef struct { pid_t pid; char url[128]; char log[512]; } up_proc;

/* Start `pdbridge ARGS...` with output to log; wait for "listening on URL". */
static int up_start(up_proc *p, const char *name, const char *dir, char *const argv[]) {
    snprintf(p->log, sizeof p->log, "%s/%s.log", dir, name);
    int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644); /* truncated before the child runs */
    if (fd < 0) { fprintf(stderr, "up: cannot create %s: %s\n", p->log, strerror(errno)); return 0; }
    char exe[4096]; /* this binary (resolved before the fork: the child only execs) */
    if (pdb_sys_self_exe(exe, sizeof exe)) {
        fprintf(stderr, "up: cannot find this program's own path to start %s\n", name);
        close(fd);
        return 0;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { close(fd); return 0; }
    if (pid == 0) {
        if (dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        close(fd);
        execv(exe, argv);
        _exit(127);
    }
    close(fd);
    p->pid = pid;
    for (int i = 0; i < 1200; i++) {
        FILE *f = fopen(p->log, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            char *u = strstr(line, "listening on http://");
            if (u) {
                sscanf(u + 13, "%127s", p->url);
                fclose(f);
                return 1;
            }
        }
        if (f) fclose(f);
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { p->pid = 0; break; }
        usleep(100000);
    }
    fprintf(stderr, "up: %s did not start; its log (%s):\n", name, p->log);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "tail -20 '%s' >&2", p->log);
    if (system(cmd)) {}
    return 0;
}

static void up_stop(up_proc *p) {
    if (p->pid <= 0) return;
    kill(p->pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid) { p->pid = 0; return; }
        usleep(50000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

/* The cold prompt via a server, streamed (pdb_cli_stream); on failure the message on stderr. */
static int up_chat(const char *url, const char *content, int max_tokens, pdb_cli_stream_result *r) {
    pdb_cli_stream_opts o = {.url = url, .chat = 1, .text = content, .max_tokens = max_tokens};
    if (pdb_cli_stream_request(&o, r)) {
        fprintf(stderr, "up: %s\n", pdb_err_msg());
        pdb_cli_stream_free(r);
        return 0;
    }
    if (!r->verdict[0]) snprintf(r->verdict, sizeof r->verdict, "(native: no front)");
    return 1;
}

static int up_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int pdb_cli_up(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge up [--arch deepseek_v2|deepseek_v4] [--tokens N] [--max-tokens N] [--scheme none|mx] [--dir DIR]\n"
        "                   [--backend auto|cpu|cuda] [--precision bf16|f32|exact]\n\n"
        "The demo end to end: a small random DeepSeek-V2 (real tokenizer), its decoder copy (--scheme none:\n"
        "same weights on both engines, so bridged and native answers must be equal), decoder + prefill +\n"
        "front on loopback and a native decoder for comparison; a cold prompt of N tokens (default 6000)\n"
        "from the Python standard library with a needle sentence in the middle, then a warm follow-up.\n"
        "Models are generated once under DIR (default .cache/up); logs go to DIR/logs. --backend/--precision\n"
        "go to the prefill server (auto: CUDA when a GPU is usable; --precision exact: the CUDA V2 engine runs\n"
        "the decoder's own math, so the bridged answer equals the native one on a GPU too).\n"
        "--arch deepseek_v4: the tiny V4 preset (window 8, CSA rate 4 with its lightning indexer, HCA rate 16,\n"
        "hyper-connections) with the real tokenizer's vocabulary, official semantics, default 3000 tokens\n"
        "(the V4 engines are the f32 reference math; on a GPU its matrix products run there).\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    long long tokens = 0, max_tokens = 24;
    const char *scheme = "none", *dir = ".cache/up", *backend = "auto", *arch = "deepseek_v2", *precision = "bf16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--tokens") && pdb_cli_parse_int(v, 300, 1 << 20, &x)) { tokens = x; i++; }
        else if (!strcmp(a, "--max-tokens") && pdb_cli_parse_int(v, 1, 4096, &x)) { max_tokens = x; i++; }
        else if (!strcmp(a, "--scheme") && v) scheme = argv[++i];
        else if (!strcmp(a, "--dir") && v) dir = argv[++i];
        else if (!strcmp(a, "--backend") && v) backend = argv[++i];
        else if (!strcmp(a, "--precision") && v) precision = argv[++i];
        else if (!strcmp(a, "--arch") && v && pdb_arch_find(v)) arch = argv[++i];
        else { fprintf(stderr, "pdbridge up: bad option '%s'\n\n%s", a, usage); return 2; }
    }
    const pdb_arch_def *def = pdb_arch_find(arch);
    if (strcmp(scheme, "none") && strcmp(scheme, "mx")) { fprintf(stderr, "pdbridge up: --scheme none or mx\n"); return 2; }
    if (strcmp(precision, "bf16") && strcmp(precision, "f32") && strcmp(precision, "exact")) {
        fprintf(stderr, "pdbridge up: --precision bf16, f32 or exact\n");
        return 2;
    }
    if (!tokens) tokens = def->demo.tokens;
    const char *mname = def->demo.dir_name;
    char hf[600], dec[600], logs[600], cache[600], cache_n[600], path[700];
    snprintf(hf, sizeof hf, "%s/%s", dir, mname);
    snprintf(dec, sizeof dec, "%s/%s-dec-%s", dir, mname, scheme);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(cache_n, sizeof cache_n, "%s/cache-native", dir);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' && rm -rf '%s' '%s'", dir, logs, cache, cache_n);
    if (system(cmd)) { fprintf(stderr, "up: cannot prepare %s\n", dir); return 1; }
    snprintf(path, sizeof path, "%s/model.safetensors", hf);
    if (!up_exists(path)) {
        char voc[64] = "";
        if (def->demo.vocab) snprintf(voc, sizeof voc, ", vocabulary %lld", (long long)def->demo.vocab);
        printf("up: writing a random %s checkpoint (preset %s%s, real tokenizer) to %s\n", def->demo.title, def->demo.preset,
               voc, hf);
        fflush(stdout);
        pdb_make_model_opts o = {.arch = arch, .preset = def->demo.preset, .seed = 1, .out_dir = hf,
                                 .vocab = def->demo.vocab, .tokenizer = ".cache/tokenizer/deepseek_v3/tokenizer.json"};
        if (pdb_make_model_write(&o)) { fprintf(stderr, "up: %s\n", pdb_err_msg()); return 1; }
    }
    snprintf(path, sizeof path, "%s/pdbridge_decoder.json", dec);
    if (!up_exists(path)) {
        printf("up: writing the decoder's checkpoint (scheme %s) to %s\n", scheme, dec);
        fflush(stdout);
        if (pdb_quantize_model(hf, dec, scheme, 0)) { fprintf(stderr, "up: %s\n", pdb_err_msg()); return 1; }
    }
    pdb_tokenizer *tok = NULL;
    if (pdb_tokenizer_load(dec, &tok)) { fprintf(stderr, "up: %s\n", pdb_err_msg()); return 1; }
    char *ctx;
    pdb_status cst = pdb_cli_prompt_build(tok, tokens, 0, UP_NEEDLE, &ctx, NULL);
    pdb_tokenizer_free(tok);
    if (cst) { fprintf(stderr, "up: %s\n", pdb_err_msg()); return 1; }
    if (pdb_http_client_init()) { fprintf(stderr, "up: %s\n", pdb_err_msg()); free(ctx); return 1; }
    up_proc pd = {0}, pp = {0}, pf = {0}, pn = {0};
    int rc = 1;
    char *dargs[] = {"pdbridge", "decode-server", "--model", dec, "--cache-dir", cache, "--port", "0", "--block-size", "512", NULL};
    char *nargs[] = {"pdbridge", "decode-server", "--model", dec, "--cache-dir", cache_n, "--port", "0", "--block-size", "512", NULL};
    char *pargs[] = {"pdbridge", "prefill-server", "--model", hf, "--decoder-model", dec, "--port", "0", "--backend",
                     (char *)backend, "--precision", (char *)precision, NULL};
    printf("up: starting decoder, native decoder, prefill server and front on loopback (logs in %s)\n", logs);
    fflush(stdout);
    if (!up_start(&pd, "decoder", logs, dargs) || !up_start(&pn, "native", logs, nargs) || !up_start(&pp, "prefill", logs, pargs))
        goto done;
    char *fargs[] = {"pdbridge", "front", "--decoder", pd.url, "--prefill", pp.url, "--decoder-model", dec, "--cache-dir", cache,
                     "--port", "0", "--block-size", "512", NULL};
    if (!up_start(&pf, "front", logs, fargs)) goto done;
    size_t cl = strlen(ctx);
    char *cold = malloc(cl + 200), *warm = malloc(cl + 200);
    if (!cold || !warm) {
        pdb_err_set(PDB_NOMEM, "the two prompts of %zu bytes", cl + 200);
        fprintf(stderr, "up: %s\n", pdb_err_msg());
        free(cold);
        free(warm);
        goto done;
    }
    snprintf(cold, cl + 200, "%s%s", ctx, UP_QUESTION);
    snprintf(warm, cl + 200, "%s%s", ctx, UP_FOLLOWUP);
    static pdb_cli_stream_result rc1, rw, rn; /* 64 KiB line buffers each; zero: freeing an unsent one is a no-op */
    printf("up: cold prompt via the front (bridged)...\n");
    fflush(stdout);
    int ok = up_chat(pf.url, cold, (int)max_tokens, &rc1);
    printf("up: warm follow-up via the front...\n");
    fflush(stdout);
    ok = ok && up_chat(pf.url, warm, (int)max_tokens, &rw);
    printf("up: the cold prompt on the native decoder (no bridge, empty cache)...\n");
    fflush(stdout);
    ok = ok && up_chat(pn.url, cold, (int)max_tokens, &rn);
    if (!ok) {
        pdb_cli_stream_free(&rc1);
        pdb_cli_stream_free(&rw);
        free(cold);
        free(warm);
        goto done;
    }
    int equal = rc1.len == rn.len && !memcmp(rc1.text, rn.text, rc1.len);
    printf("\n%-22s %7s %7s %9s %9s  %s\n", "request", "tokens", "cached", "TTFT s", "total s", "verdict (X-PD-Bridge)");
    pdb_cli_stream_result *rs[3] = {&rc1, &rw, &rn};
    const char *names[3] = {"cold, bridged", "warm follow-up", "cold, native"};
    for (int i = 0; i < 3; i++) {
        char v[600];
        snprintf(v, sizeof v, "%s", rs[i]->verdict);
        v[strcspn(v, ";")] = 0;
        printf("%-22s %7lld %7lld %9.2f %9.2f  %s\n", names[i], (long long)rs[i]->prompt_tokens, (long long)rs[i]->cached_tokens,
               rs[i]->ttft_s, rs[i]->total_s, v);
    }
    printf("\nbridged TTFT %.2f s vs native %.2f s (%.1fx); bridged answer %s the native one (random weights: the words are "
           "nonsense)\n  bridged: %.70s\n  native:  %.70s\n",
           rc1.ttft_s, rn.ttft_s, rn.ttft_s / (rc1.ttft_s > 0 ? rc1.ttft_s : 1), equal ? "EQUALS" : "DIFFERS FROM", rc1.text, rn.text);
    rc = !strncmp(rc1.verdict, "complete", 8) ? (equal || strcmp(scheme, "none") ? 0 : 1) : 1;
    if (rc) fprintf(stderr, "up: expected a complete bridge%s\n", strcmp(scheme, "none") ? "" : " and equal answers");
    pdb_cli_stream_free(&rc1);
    pdb_cli_stream_free(&rw);
    pdb_cli_stream_free(&rn);
    free(cold);
    free(warm);
done:
    up_stop(&pf);
    up_stop(&pp);
    up_stop(&pd);
    up_stop(&pn);
    free(ctx);
    return rc;
}
