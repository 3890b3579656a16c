/* pdb_cli_main: dispatch `pdbridge SUBCOMMAND ...` to its handler; unknown subcommands and
 * bare `pdbridge` print the list. Invariant: every subcommand answers --help with exit 0. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_status.h"

#include "pdb_cli.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} pdb_cli_cmd;

static const pdb_cli_cmd cmds[] = {
    {"up", pdb_cli_up, "the demo: start decoder + prefill + front, bridge a cold prompt, compare with native"},
    {"tokenize", pdb_cli_tokenize, "text on stdin -> token ids (tokenizer.json BPE)"},
    {"make-model", pdb_cli_make_model, "write a random checkpoint of a real architecture"},
    {"forward", pdb_cli_forward, "reference CPU forward: prefill logits + greedy cached decode"},
    {"generate", pdb_cli_generate, "reference CPU generation from a text prompt"},
    {"quantize", pdb_cli_quantize, "write the decoder's own checkpoint (MXFP4/MXFP8, or --scheme none)"},
    {"decode-server", pdb_cli_decode_server, "the decode engine: OpenAI-compatible server with a prefix-cache store"},
    {"prefill-server", pdb_cli_prefill_server, "the prefill engine: streams the decoder's finished cache per block"},
    {"front", pdb_cli_front, "the front door: bridges cold long prompts, serves everything, says what happened"},
    {"bench-cold", pdb_cli_bench_cold, "measure one cold prompt through a front (and a native decoder): TTFT, verdict, memory, CSV"},
    {"doctor", pdb_cli_doctor, "check every link of a deployment and say how to fix what fails"},
    {"verify-blocks", pdb_cli_verify_blocks, "compare two block files or cache dirs tensor by tensor: N/M identical"},
    {"diff-state", pdb_cli_diff_state, "the decoder's native cache for a prompt vs the blocks mounted from a store"},
    {"pool-validate", pdb_cli_pool_validate, "the capture hook's math on a backend vs the CPU reference (identical fraction, ulps)"},
    {"info", pdb_cli_info, "build features, CPU and GPU visible to this binary"},
};

int pdb_cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    return 0;
}

static sigset_t cli_sigs;

void pdb_cli_signals_block(void) {
    sigemptyset(&cli_sigs);
    sigaddset(&cli_sigs, SIGINT);
    sigaddset(&cli_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &cli_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int pdb_cli_signals_wait(void) {
    int sig = 0;
    sigwait(&cli_sigs, &sig);
    return sig;
}

void pdb_cli_serve_until_signal(const char *cmd, const char *host, int port, const char *note) {
    printf("listening on http://%s:%d%s%s%s\n", host ? host : "127.0.0.1", port, note ? " (" : "", note ? note : "", note ? ")" : "");
    fflush(stdout);
    int sig = pdb_cli_signals_wait();
    PDB_INFO("%s: signal %d, stopping", cmd, sig);
}

int pdb_cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || !end || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int pdb_cli_set_log_level(const char *l) {
    if (!strcmp(l, "debug")) pdb_log_set_level(PDB_LOG_DEBUG);
    else if (!strcmp(l, "info")) pdb_log_set_level(PDB_LOG_INFO);
    else if (!strcmp(l, "warn")) pdb_log_set_level(PDB_LOG_WARN);
    else if (!strcmp(l, "error")) pdb_log_set_level(PDB_LOG_ERROR);
    else return 0;
    return 1;
}

const char *pdb_cli_error_text(const char *cmd) {
    const char *m = pdb_err_msg();
    size_t n = strlen(cmd);
    while (!strncmp(m, cmd, n) && (m[n] == ':' || !m[n])) { /* "cmd: ", "cmd: : " (an empty wrap), "cmd" */
        m += n;
        while (*m == ':' || *m == ' ') m++;
    }
    return m;
}

void pdb_cli_print_error(const char *cmd, const char *status) {
    const char *m = pdb_cli_error_text(cmd);
    if (status && *m) fprintf(stderr, "pdbridge %s: %s: %s\n", cmd, status, m);
    else fprintf(stderr, "pdbridge %s: %s\n", cmd, *m ? m : status ? status : "failed");
}

static void usage(FILE *f) {
    fprintf(f, "usage: pdbridge SUBCOMMAND [options]   (pdbridge SUBCOMMAND --help for each)\n\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-14s %s\n", cmds[i].name, cmds[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pdbridge: unknown subcommand '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
