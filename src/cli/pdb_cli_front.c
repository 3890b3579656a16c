/* pdb_cli_front: `pdbridge front`. Settings come from defaults, then --config FILE (JSON), then
 * PDB_FRONT_* environment variables, then the command line. Runs until SIGINT/SIGTERM; prints
 * "listening on http://HOST:PORT" once ready. */
#include <stdio.h>
#include <string.h>

#include "pdb_cli.h"
#include "pdb_front.h"

int pdb_cli_front(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge front --decoder URL --prefill URL --decoder-model DEC_DIR --cache-dir DIR --port P\n"
        "         [--host 127.0.0.1] [--block-size N] [--config FILE] [--min-bridge-tokens N] [--min-tail N]\n"
        "         [--max-bridge-tokens N] [--max-bridges N] [--prefill-timeout-ms N] [--decoder-timeout-ms N]\n"
        "         [--max-context N] [--max-body BYTES] [--api-key KEY] [--upstream-api-key KEY] [--log-level L]\n\n"
        "The OpenAI-compatible front door. Cold long prompts are bridged: the prefill server computes the\n"
        "decoder's cache blocks and the front writes them into the decoder's store (DIR, shared with the\n"
        "decoder) before forwarding the request; every response carries X-PD-Bridge (complete | partial B/T\n"
        "| declined <reason> | skipped <reason>) and a \"pd_bridge\" object. Request header\n"
        "X-PD-Bridge-Mode: auto | off | force. Defaults: block size 2048, min-bridge-tokens 1024, min-tail\n"
        "512, no max. Config file keys and PDB_FRONT_<KEY> variables use the option names with '_'.\n\n"
        "Limits follow the served window W (--max-context, default the checkpoint's max_position_embeddings;\n"
        "above it: refused at start), docs/limits.md: a prompt of W tokens or more, or one whose max_tokens\n"
        "does not fit beside it, is answered 400 context_length_exceeded before anything is bridged; the body\n"
        "bound (--max-body) defaults to max(16 B/token of W, W token ids) + 64 KiB (at least 1 MiB) and is\n"
        "refused at start below what W token ids need; the timeouts default to W at 250 tokens/s (prefill)\n"
        "and twice that (decoder call), at least 600 s each. GET /health reports them under \"limits\".\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    const char *config = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
    pdb_front_opts o;
    if (pdb_front_opts_defaults(&o, config)) {
        pdb_cli_print_error("front", NULL);
        return 2;
    }
    o.port = -1;
    long long v = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL;
        if (!strcmp(a, "--decoder") && val) o.decoder_url = argv[++i];
        else if (!strcmp(a, "--prefill") && val) o.prefill_url = argv[++i];
        else if (!strcmp(a, "--decoder-model") && val) o.decoder_model = argv[++i];
        else if (!strcmp(a, "--cache-dir") && val) o.cache_dir = argv[++i];
        else if (!strcmp(a, "--host") && val) o.host = argv[++i];
        else if (!strcmp(a, "--config") && val) i++;
        else if (!strcmp(a, "--api-key") && val) o.api_key = argv[++i];
        else if (!strcmp(a, "--upstream-api-key") && val) o.upstream_api_key = argv[++i];
        else if (!strcmp(a, "--log-level") && val) ok = pdb_cli_set_log_level(argv[++i]);
        else if (!strcmp(a, "--port") && (ok = pdb_cli_parse_int(val, 0, 65535, &v))) { o.port = (int)v; i++; }
        else if (!strcmp(a, "--block-size") && (ok = pdb_cli_parse_int(val, 128, 1 << 20, &v) && v % 128 == 0)) { o.block_size = v; i++; }
        else if (!strcmp(a, "--min-bridge-tokens") && (ok = pdb_cli_parse_int(val, 0, 1LL << 40, &v))) { o.policy.min_bridge_tokens = v; i++; }
        else if (!strcmp(a, "--min-tail") && (ok = pdb_cli_parse_int(val, 0, 1LL << 40, &v))) { o.policy.min_tail = v; i++; }
        else if (!strcmp(a, "--max-bridge-tokens") && (ok = pdb_cli_parse_int(val, 0, 1LL << 40, &v))) { o.policy.max_bridge_tokens = v; i++; }
        else if (!strcmp(a, "--max-bridges") && (ok = pdb_cli_parse_int(val, 1, 1024, &v))) { o.max_bridges = (int)v; i++; }
        else if (!strcmp(a, "--prefill-timeout-ms") && (ok = pdb_cli_parse_int(val, 1, 1LL << 31, &v))) { o.prefill_timeout_ms = (long)v; i++; }
        else if (!strcmp(a, "--decoder-timeout-ms") && (ok = pdb_cli_parse_int(val, 1, 1LL << 31, &v))) { o.decoder_timeout_ms = (long)v; i++; }
        else if (!strcmp(a, "--max-context") && (ok = pdb_cli_parse_int(val, 2, 1LL << 40, &v))) { o.max_context = v; i++; }
        else if (!strcmp(a, "--max-body") && (ok = pdb_cli_parse_int(val, 256, 1LL << 34, &v))) { o.max_body = (size_t)v; i++; }
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "pdbridge front: bad, unknown or incomplete option '%s'\n\n%s", a, usage);
            return 2;
        }
    }
    if (!o.decoder_url || !o.prefill_url || !o.decoder_model || !o.cache_dir || o.port < 0) {
        fprintf(stderr, "pdbridge front: --decoder, --prefill, --decoder-model, --cache-dir and --port are required\n\n%s", usage);
        return 2;
    }
    pdb_cli_signals_block();
    pdb_front *f = NULL;
    if (pdb_front_start(&o, &f)) {
        pdb_cli_print_error("front", NULL);
        return 1;
    }
    pdb_cli_serve_until_signal("front", o.host, pdb_front_port(f), NULL);
    pdb_front_stop(f);
    return 0;
}
