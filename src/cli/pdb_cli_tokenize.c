/* pdb_cli_tokenize: `pdbridge tokenize --model M [--decode]`: stdin bytes -> ids on one line,
 * or (--decode) ids on stdin -> the exact bytes they decode to. Invariants: the input is used
 * byte for byte (no newline is stripped or added to text), stdin reading is bounded by
 * PDB_TOKENIZER_MAX_TEXT, and every error names the file or the input position at fault. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb_cli.h"
#include "pdb_file.h"
#include "pdb_tokenizer.h"

static void pdb_cli_tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: pdbridge tokenize --model DIR_OR_TOKENIZER_JSON [--decode] [--text STRING]\n"
            "\n"
            "Encodes the bytes of stdin (or STRING) with the model's tokenizer.json and prints the\n"
            "ids space-separated on one line. The text is taken exactly: a trailing newline is\n"
            "encoded too (use printf '%%s' or --text to avoid it). Added/special tokens written in\n"
            "the text become their ids; no BOS is added.\n"
            "\n"
            "  --model PATH   a model directory holding tokenizer.json, or the file itself\n"
            "  --decode       read ids (separated by spaces, newlines or commas) and print the\n"
            "                 text they decode to, byte for byte, with no newline added\n"
            "  --text STRING  encode STRING instead of stdin\n");
}

/* Parse ids separated by whitespace or commas. Returns 0, or -1 after printing the error. */
static int pdb_cli_parse_ids(const char *s, size_t len, int32_t **ids, int64_t *n_ids) {
    int64_t cap = 256, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) { fprintf(stderr, "pdbridge tokenize: out of memory\n"); return -1; }
    size_t i = 0;
    while (i < len) {
        if (strchr(" \t\r\n,", s[i]) && s[i]) { i++; continue; }
        char *end;
        errno = 0;
        long long x = strtoll(s + i, &end, 10);
        if (end == s + i || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "pdbridge tokenize: stdin byte %zu: expected a non-negative token id\n", i);
            free(v);
            return -1;
        }
        if (n == cap) {
            if (cap >= PDB_TOKENIZER_MAX_IDS) { fprintf(stderr, "pdbridge tokenize: too many ids\n"); free(v); return -1; }
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) { fprintf(stderr, "pdbridge tokenize: out of memory\n"); free(v); return -1; }
            v = nv;
        }
        v[n++] = (int32_t)x;
        i = (size_t)(end - s);
    }
    *ids = v;
    *n_ids = n;
    return 0;
}

int pdb_cli_tokenize(int argc, char **argv) {
    if (pdb_cli_wants_help(argc, argv)) {
        pdb_cli_tokenize_usage(stdout);
        return 0;
    }
    const char *model = NULL, *text_arg = NULL;
    int decode = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--text") && i + 1 < argc) text_arg = argv[++i];
        else if (!strcmp(argv[i], "--decode")) decode = 1;
        else {
            fprintf(stderr, "pdbridge tokenize: unexpected argument '%s'\n\n", argv[i]);
            pdb_cli_tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "pdbridge tokenize: --model is required\n\n");
        pdb_cli_tokenize_usage(stderr);
        return 2;
    }
    pdb_tokenizer *tok;
    pdb_status st = pdb_tokenizer_load(model, &tok);
    if (st != PDB_OK) {
        pdb_cli_print_error("tokenize", pdb_status_str(st));
        return 1;
    }
    char *in = NULL;
    size_t in_len = 0;
    int rc = 1;
    if (text_arg) {
        in = strdup(text_arg);
        in_len = in ? strlen(in) : 0;
        if (!in) fprintf(stderr, "pdbridge tokenize: out of memory\n");
    } else if (pdb_file_read_stream(stdin, "stdin", PDB_TOKENIZER_MAX_TEXT, &in, &in_len)) {
        fprintf(stderr, "pdbridge tokenize: %s\n", pdb_err_msg());
    }
    if (!in) goto done;
    if (decode) {
        int32_t *ids;
        int64_t n;
        if (pdb_cli_parse_ids(in, in_len, &ids, &n) != 0) goto done;
        char *out;
        size_t out_len;
        st = pdb_tokenizer_decode(tok, ids, n, &out, &out_len);
        free(ids);
        if (st != PDB_OK) {
            pdb_cli_print_error("tokenize", pdb_status_str(st));
            goto done;
        }
        rc = fwrite(out, 1, out_len, stdout) == out_len ? 0 : 1;
        free(out);
    } else {
        int32_t *ids;
        int64_t n;
        st = pdb_tokenizer_encode(tok, in, in_len, &ids, &n);
        if (st != PDB_OK) {
            pdb_cli_print_error("tokenize", pdb_status_str(st));
            goto done;
        }
        for (int64_t i = 0; i < n; i++) printf(i ? " %" PRId32 : "%" PRId32, ids[i]);
        printf("\n");
        free(ids);
        rc = 0;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "pdbridge tokenize: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
done:
    free(in);
    pdb_tokenizer_free(tok);
    return rc;
}
