/* pdb_cli_decode_server: `pdbridge decode-server`, the decode engine behind an OpenAI-compatible
 * HTTP API. Runs until SIGINT/SIGTERM, then stops gracefully (in-flight requests are cancelled,
 * streams end). Invariant: SIGINT/SIGTERM are blocked in every thread and taken by sigwait in
 * the main thread, so no handler runs in a signal context. Prints "listening on
 * http://HOST:PORT" on stdout once ready (tests read the port from it when --port 0). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cli.h"
#include "pdb_dec_server.h"


int pdb_cli_decode_server(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge decode-server --model DEC_DIR --cache-dir DIR --port P [--host 127.0.0.1]\n"
        "         [--threads N] [--block-size N] [--max-batch N] [--max-body BYTES] [--max-context N]\n"
        "         [--cache-max-bytes N] [--api-key KEY] [--weights resident|mmap]\n"
        "         [--log-level debug|info|warn|error]\n\n"
        "The decode engine as an OpenAI-compatible server: POST /v1/completions, POST /v1/chat/completions\n"
        "(stream via SSE or not), GET /v1/models, GET /health, GET /metrics (Prometheus text).\n"
        "DEC_DIR is a `pdbridge quantize` output (or an HF directory); without tokenizer.json it is\n"
        "served in token-id mode (prompts must be arrays of token ids). --port 0 picks a free port;\n"
        "the bound address is printed as \"listening on http://HOST:PORT\". --block-size (multiple of\n"
        "128, default 2048) must match the store in --cache-dir. --api-key KEY requires\n"
        "\"Authorization: Bearer KEY\" on every endpoint except /health. Limits follow the served window W\n"
        "(--max-context, default the model's max_position_embeddings; above it: refused at start), see\n"
        "docs/limits.md: --max-body (larger bodies get 413) defaults to max(16 B/token of W, W token ids) + 64 KiB,\n"
        "at least 1 MiB, and is refused at start below what W token ids need; --cache-max-bytes (default\n"
        "unlimited) is refused below a full window's blocks. Without max_tokens, chat generates up to the rest\n"
        "of W and completions 16 tokens (400 when they do not fit). /health reports the limits.\n"
        "--weights resident (default) reads the checkpoint into memory\n"
        "(transparent huge pages where the kernel allows); mmap maps it and pages it in on first use.\n"
        "See docs/api.md.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    pdb_dec_server_opts o;
    memset(&o, 0, sizeof o);
    o.port = -1;
    o.svc.block_size = 2048;
    long long v = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL;
        if (!strcmp(a, "--model") && val) o.svc.model_dir = argv[++i];
        else if (!strcmp(a, "--cache-dir") && val) o.svc.cache_dir = argv[++i];
        else if (!strcmp(a, "--host") && val) o.host = argv[++i];
        else if (!strcmp(a, "--api-key") && val) o.api_key = argv[++i];
        else if (!strcmp(a, "--port") && val && (ok = pdb_cli_parse_int(argv[++i], 0, 65535, &v))) o.port = (int)v;
        else if (!strcmp(a, "--threads") && val && (ok = pdb_cli_parse_int(argv[++i], 0, 4096, &v))) o.svc.threads = (int)v;
        else if (!strcmp(a, "--block-size") && val && (ok = pdb_cli_parse_int(argv[++i], 128, 1 << 20, &v)) && (ok = v % 128 == 0))
            o.svc.block_size = v;
        else if (!strcmp(a, "--max-batch") && val && (ok = pdb_cli_parse_int(argv[++i], 1, 4096, &v))) o.svc.max_batch = (int)v;
        else if (!strcmp(a, "--max-body") && val && (ok = pdb_cli_parse_int(argv[++i], 256, (long long)1 << 34, &v))) o.max_body = (size_t)v;
        else if (!strcmp(a, "--max-context") && val && (ok = pdb_cli_parse_int(argv[++i], 1, (long long)1 << 40, &v))) o.svc.max_context = v;
        else if (!strcmp(a, "--cache-max-bytes") && val && (ok = pdb_cli_parse_int(argv[++i], 0, LLONG_MAX, &v)))
            o.svc.cache_max_bytes = (uint64_t)v;
        else if (!strcmp(a, "--weights") && val) {
            const char *w = argv[++i];
            ok = !strcmp(w, "resident") || !strcmp(w, "mmap");
            o.svc.weights_mmap = !strcmp(w, "mmap");
        }
        else if (!strcmp(a, "--log-level") && val) ok = pdb_cli_set_log_level(argv[++i]);
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "pdbridge decode-server: bad, unknown or incomplete option '%s'%s%s\n\n%s", a, val ? " " : "",
                    val ? val : "", usage);
            return 2;
        }
    }
    if (!o.svc.model_dir || !o.svc.cache_dir || o.port < 0) {
        fprintf(stderr, "pdbridge decode-server: --model, --cache-dir and --port are required\n\n%s", usage);
        return 2;
    }
    pdb_cli_signals_block(); /* inherited by every thread started below */
    pdb_dec_server *srv = NULL;
    pdb_status st = pdb_dec_server_start(&o, &srv);
    if (st != PDB_OK) {
        pdb_cli_print_error("decode-server", pdb_status_str(st));
        return 1;
    }
    char note[300];
    snprintf(note, sizeof note, "model %s", pdb_dec_server_model_id(srv));
    pdb_cli_serve_until_signal("decode-server", o.host, pdb_dec_server_port(srv), note);
    pdb_dec_server_stop(srv);
    return 0;
}
