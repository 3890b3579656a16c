/* pdb_cli_prefill_server: `pdbridge prefill-server`. Runs until SIGINT/SIGTERM; prints
 * "listening on http://HOST:PORT" once ready (tests read the port from it with --port 0). */
#include <stdio.h>
#include <string.h>

#include "pdb_cli.h"
#include "pdb_prefill_server.h"

int pdb_cli_prefill_server(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge prefill-server --model HF_DIR --decoder-model DEC_DIR --port P [--host 127.0.0.1]\n"
        "         [--backend auto|cuda|cpu] [--device N] [--precision bf16|f32|exact] [--chunk N]\n"
        "         [--threads N] [--parallel N]\n"
        "         [--max-context N] [--max-tokens N] [--block-size N] [--api-key KEY] [--log-level debug|info|warn|error]\n"
        "         [--spill-dir DIR] [--spill-max-mb N] [--spool-mem-mb N] [--spool-ttl-s N]\n\n"
        "The prefill engine: runs the model with its own weights (HF_DIR) and, at every layer, computes\n"
        "the decoder's cache rows with the decoder's weights (DEC_DIR), streaming one segment per block\n"
        "(POST /v1/prefill, format in docs/protocol.md). GET /health reports the decoder fingerprint.\n"
        "--backend auto uses CUDA when a GPU is usable, else the CPU. --parallel N runs N prefills at\n"
        "once (N engines). --port 0 picks a free port. --precision (CUDA): bf16 (default, fastest), f32,\n"
        "or exact: the decoder's own math on the GPU, segments bit-identical to the decoder's blocks when\n"
        "the decoder runs the engine's weights (slower; docs/cuda.md). The CPU backend always runs the\n"
        "decoder's math.\n\n"
        "Every answer names its transfer (header X-PD-Transfer). Its segments are kept until the consumer\n"
        "acknowledges them (POST /v1/prefill/ack {\"transfer\", \"through_block\"}): in memory while the\n"
        "transfer's queue has room (--spool-mem-mb, default 4; one segment always fits), else as files in a\n"
        "spill directory created under --spill-dir (default $TMPDIR or /tmp) and removed at exit. Spill files\n"
        "of all transfers stay under --spill-max-mb (default 1024; 0 = no spill): when it is full the engine\n"
        "pauses until the consumer drains. A resume (same request plus \"transfer\" and first_block) is\n"
        "answered from the kept segments without recomputation while they are all there, else recomputed.\n"
        "Segments of a transfer idle for --spool-ttl-s seconds (default 120) are dropped.\n\n"
        "Limits follow the served window W (--max-context, default the model's max_position_embeddings; above\n"
        "it: refused at start), docs/limits.md: token_ids longer than W are answered 400 context_length_exceeded;\n"
        "--max-tokens below W is refused at start; the body bound is max(16 B/token of W, W token ids) + 64 KiB.\n"
        "--block-size N serves only that block size (default: any the architecture allows; the limits in\n"
        "GET /health are then computed at 2048). A spill smaller than a full window's segments is warned about.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    pdb_prefill_server_opts o = {.backend = "auto", .port = -1};
    long long v = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL;
        if (!strcmp(a, "--model") && val) o.model_dir = argv[++i];
        else if (!strcmp(a, "--decoder-model") && val) o.decoder_dir = argv[++i];
        else if (!strcmp(a, "--host") && val) o.host = argv[++i];
        else if (!strcmp(a, "--api-key") && val) o.api_key = argv[++i];
        else if (!strcmp(a, "--backend") && val) {
            o.backend = argv[++i];
            ok = !strcmp(o.backend, "auto") || !strcmp(o.backend, "cuda") || !strcmp(o.backend, "cpu");
        } else if (!strcmp(a, "--precision") && val) {
            const char *p = argv[++i];
            ok = !strcmp(p, "bf16") || !strcmp(p, "f32") || !strcmp(p, "exact");
            o.precision = !strcmp(p, "exact") ? PDB_CUDA_PREC_EXACT : !strcmp(p, "f32") ? PDB_CUDA_PREC_F32 : PDB_CUDA_PREC_BF16;
        } else if (!strcmp(a, "--port") && (ok = pdb_cli_parse_int(val, 0, 65535, &v))) { o.port = (int)v; i++; }
        else if (!strcmp(a, "--device") && (ok = pdb_cli_parse_int(val, 0, 1024, &v))) { o.device = (int)v; i++; }
        else if (!strcmp(a, "--chunk") && (ok = pdb_cli_parse_int(val, 1, 1 << 20, &v))) { o.chunk = v; i++; }
        else if (!strcmp(a, "--threads") && (ok = pdb_cli_parse_int(val, 0, 4096, &v))) { o.threads = (int)v; i++; }
        else if (!strcmp(a, "--parallel") && (ok = pdb_cli_parse_int(val, 1, 64, &v))) { o.parallel = (int)v; i++; }
        else if (!strcmp(a, "--max-tokens") && (ok = pdb_cli_parse_int(val, 1, 1LL << 32, &v))) { o.max_tokens = v; i++; }
        else if (!strcmp(a, "--max-context") && (ok = pdb_cli_parse_int(val, 2, 1LL << 40, &v))) { o.max_context = v; i++; }
        else if (!strcmp(a, "--block-size") && (ok = pdb_cli_parse_int(val, 128, 1 << 20, &v) && v % 128 == 0)) { o.block_size = v; i++; }
        else if (!strcmp(a, "--spill-dir") && val) o.spill_dir = argv[++i];
        else if (!strcmp(a, "--spill-max-mb") && (ok = pdb_cli_parse_int(val, 0, 1LL << 30, &v))) {
            o.spill_max_bytes = v ? v << 20 : -1;
            i++;
        } else if (!strcmp(a, "--spool-mem-mb") && (ok = pdb_cli_parse_int(val, 1, 1 << 20, &v))) { o.spool_mem_bytes = v << 20; i++; }
        else if (!strcmp(a, "--spool-ttl-s") && (ok = pdb_cli_parse_int(val, 1, 86400 * 7, &v))) { o.spool_ttl_s = (int)v; i++; }
        else if (!strcmp(a, "--log-level") && val) ok = pdb_cli_set_log_level(argv[++i]);
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "pdbridge prefill-server: bad, unknown or incomplete option '%s'\n\n%s", a, usage);
            return 2;
        }
    }
    if (!o.model_dir || !o.decoder_dir || o.port < 0) {
        fprintf(stderr, "pdbridge prefill-server: --model, --decoder-model and --port are required\n\n%s", usage);
        return 2;
    }
    pdb_cli_signals_block();
    pdb_prefill_server *s = NULL;
    if (pdb_prefill_server_start(&o, &s)) {
        pdb_cli_print_error("prefill-server", NULL);
        return 1;
    }
    char note[64];
    snprintf(note, sizeof note, "backend %s", pdb_prefill_server_backend(s));
    pdb_cli_serve_until_signal("prefill-server", o.host, pdb_prefill_server_port(s), note);
    pdb_prefill_server_stop(s);
    return 0;
}
