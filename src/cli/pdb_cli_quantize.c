/* pdb_cli_quantize: `pdbridge quantize --model HF_DIR --out DEC_DIR [--scheme mx|none] [--v4-semantics S]`. */
#include <stdio.h>
#include <string.h>

#include "pdb_cli.h"
#include "pdb_quantize.h"

int pdb_cli_quantize(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge quantize --model HF_DIR --out DEC_DIR [--scheme mx|none] [--v4-semantics official|exact]\n\n"
        "Writes the decode engine's own checkpoint. mx (default): routed experts MXFP4, attention and\n"
        "dense/shared MLP projections and lm_head MXFP8, embeddings/norms/router unchanged. none: all\n"
        "tensors unchanged (used for exactness tests). DEC_DIR/pdbridge_decoder.json records the scheme,\n"
        "the weights digest and the model fingerprint the prefix-cache store keys on. deepseek_v4: mx makes\n"
        "routed experts MXFP4 and the attention/compressor/indexer/shared-expert projections and the head\n"
        "MXFP8 (router, hash tables, sinks, hc mixing, norms unchanged); --v4-semantics (default official)\n"
        "fixes the decoder's cache math and is part of the fingerprint (docs/v4.md).\n"
        "DEC_DIR is written as DEC_DIR.tmp and renamed when complete; an existing DEC_DIR is replaced only\n"
        "if it holds nothing but files quantize writes (an earlier output), otherwise nothing is touched.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    const char *model = NULL, *out = NULL, *scheme = "mx", *sem = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--scheme") && i + 1 < argc) scheme = argv[++i];
        else if (!strcmp(argv[i], "--v4-semantics") && i + 1 < argc) sem = argv[++i];
        else { fprintf(stderr, "pdbridge quantize: unknown or incomplete option '%s'\n\n%s", argv[i], usage); return 2; }
    }
    if (!model || !out) { fprintf(stderr, "pdbridge quantize: --model and --out are required\n\n%s", usage); return 2; }
    if (pdb_quantize_model_ex(model, out, scheme, sem, 1)) {
        pdb_cli_print_error("quantize", NULL);
        return 1;
    }
    printf("wrote %s (scheme %s)\n", out, scheme);
    return 0;
}
