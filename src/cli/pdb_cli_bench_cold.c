/* pdb_cli_bench_cold: `pdbridge bench-cold`, one cold prompt measured through a running front
 * (and, with --native, on a decoder alone): a prompt of about N tokens of real text
 * (pdb_cli_prompt: the Python standard library shuffled by the seed, a needle sentence with a
 * seeded code in the middle, a question about it at the end), streamed at temperature 0
 * (pdb_cli_stream); one CSV row per request and a human-readable line on stdout, progress on
 * stderr. Invariants: a row's mode is `bridged` only when the front's verdict is `complete`
 * (anything else through the front is `front`, the decoder alone is `native`); every number in
 * a row is measured or reported by a server in this run, and a value that does not apply or was
 * not reported is left empty, never guessed; every server is checked before the prompt is built,
 * and one that cannot be reached ends the run (exit 1) with a message naming its URL; no row is
 * written for a request that failed. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pdb_cli.h"
#include "pdb_cli_prompt.h"
#include "pdb_cli_stream.h"
#include "pdb_http_client.h"
#include "pdb_tokenizer.h"

#define BC_NEEDLE "The secret code of this benchmark run is %s."
#define BC_QUESTION "\n\nQuestion: what is the secret code mentioned in the text above?"

/* The CSV's columns, in order (documented in --help). */
static const char *const BC_COLUMNS[] = {
    "time_utc", "mode", "verdict", "endpoint", "model", "tokens_target", "seed", "max_tokens", "prompt_tokens",
    "cached_tokens", "completion_tokens", "ttft_s", "total_s", "decode_tok_s", "blocks_written", "blocks_requested",
    "bytes", "engine_ms", "transfer_ms", "write_ms", "bridge_total_ms", "front_peak_rss_bytes",
    "decoder_peak_rss_bytes", "prefill_peak_rss_bytes", "needle", "url", "answer_bytes", "answer_fnv64", "answer_equal",
};
enum { BC_NCOL = sizeof BC_COLUMNS / sizeof BC_COLUMNS[0] };

typedef struct {
    const char *front, *native, *csv, *model, *mode, *bearer, *tokenizer, *dec_metrics, *pre_metrics, *save_prompt;
    long long tokens, seed, max_tokens, timeout_s;
    int chat, ignore_eos, prompt_only;
} bc_opts;

/* GET base+path, answer 200 required; *body (free it) on success. */
static pdb_status bc_get(const bc_opts *o, const char *base, const char *path, char **body) {
    char url[700];
    snprintf(url, sizeof url, "%s%s", base, path);
    pdb_http_call c = {.url = url, .bearer = o->bearer, .connect_timeout_ms = 5000, .timeout_ms = 30000};
    pdb_http_reply rp;
    pdb_status st = pdb_http_client_call(&c, &rp);
    if (st == PDB_OK && rp.status != 200) st = pdb_err_set(PDB_PROTOCOL, "%s answered HTTP %d", url, rp.status);
    if (st) {
        free(rp.body);
        *body = NULL;
        return st;
    }
    *body = rp.body;
    return PDB_OK;
}

/* A gauge's value from base's /metrics; -1 when the server answered without it. */
static pdb_status bc_metric(const bc_opts *o, const char *base, const char *name, double *out) {
    *out = -1;
    char *b;
    PDB_TRY(bc_get(o, base, "/metrics", &b));
    size_t nl = strlen(name);
    for (char *l = b; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, nl) && l[nl] == ' ') {
            *out = strtod(l + nl + 1, NULL);
            break;
        }
    free(b);
    return PDB_OK;
}

/* The value of "; key=" in a verdict string into out ("" when absent). */
static void bc_verdict_value(const char *v, const char *key, char *out, size_t n) {
    out[0] = 0;
    char pat[64];
    snprintf(pat, sizeof pat, "; %s=", key);
    const char *p = strstr(v, pat);
    if (!p) return;
    p += strlen(pat);
    size_t k = strcspn(p, ";");
    snprintf(out, n, "%.*s", (int)k, p);
}

typedef struct {
    char cols[BC_NCOL][160];
} bc_row;

static void bc_set(bc_row *r, const char *col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bc_set(bc_row *r, const char *col, const char *fmt, ...) {
    for (int i = 0; i < BC_NCOL; i++)
        if (!strcmp(BC_COLUMNS[i], col)) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->cols[i], sizeof r->cols[i], fmt, ap);
            va_end(ap);
            return;
        }
}

static const char *bc_col(const bc_row *r, const char *col) {
    for (int i = 0; i < BC_NCOL; i++)
        if (!strcmp(BC_COLUMNS[i], col)) return r->cols[i];
    return "";
}

static void bc_csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Append the row to the CSV (the header first when the file is new or empty). */
static int bc_csv_append(const char *path, const bc_row *r) {
    FILE *f = fopen(path, "a");
    if (!f) { fprintf(stderr, "pdbridge bench-cold: cannot open --csv %s: %s\n", path, strerror(errno)); return 0; }
    int ok = fseek(f, 0, SEEK_END) == 0;
    long at = ok ? ftell(f) : -1;
    if (at == 0)
        for (int i = 0; i < BC_NCOL; i++) fprintf(f, "%s%s", BC_COLUMNS[i], i + 1 < BC_NCOL ? "," : "\n");
    for (int i = 0; i < BC_NCOL; i++) {
        bc_csv_field(f, r->cols[i]);
        fputc(i + 1 < BC_NCOL ? ',' : '\n', f);
    }
    ok = ok && at >= 0 && !ferror(f);
    if (fclose(f)) ok = 0;
    if (!ok) fprintf(stderr, "pdbridge bench-cold: cannot write --csv %s: %s\n", path, strerror(errno));
    return ok;
}

/* FNV-1a 64 of the answer's bytes: an identity label for comparing two answers in one run (not a
 * digest against an adversary; the byte counts are compared too). */
static uint64_t bc_fnv64(const char *s, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static void bc_first_text(void *user, double ttft) {
    fprintf(stderr, "bench-cold: %s: first token after %.2f s\n", (const char *)user, ttft);
}

static void bc_mb(char *out, size_t n, const char *bytes) {
    if (!bytes[0]) snprintf(out, n, "-");
    else snprintf(out, n, "%.1f MB", strtod(bytes, NULL) / 1e6);
}

/* One request and its row. native: the decoder alone (dec_url is then the native decoder). */
static int bc_measure(const bc_opts *o, const char *url, int native, const char *prompt, const char *code, const char *dec_url,
                      const char *pre_url, bc_row *row, double *ttft) {
    const char *label = native ? "native" : "front";
    pdb_cli_stream_opts so = {.url = url, .chat = o->chat, .text = prompt, .max_tokens = (int)o->max_tokens, .model = o->model,
                              .mode = native ? NULL : o->mode, .bearer = o->bearer, .ignore_eos = o->ignore_eos,
                              .timeout_ms = o->timeout_s * 1000, .on_first_text = bc_first_text, .user = (void *)label};
    fprintf(stderr, "bench-cold: %s: sending the prompt to %s (streamed, temperature 0%s%s)...\n", label, url,
            so.mode ? ", X-PD-Bridge-Mode: " : "", so.mode ? so.mode : "");
    static pdb_cli_stream_result r; /* a 64 KiB line buffer */
    if (pdb_cli_stream_request(&so, &r)) {
        fprintf(stderr, "pdbridge bench-cold: %s: %s\n", label, pdb_err_msg());
        pdb_cli_stream_free(&r);
        return 0;
    }
    if (r.stream_error[0]) {
        fprintf(stderr, "pdbridge bench-cold: %s: the stream from %s ended with an error: %s\n", label, url, r.stream_error);
        pdb_cli_stream_free(&r);
        return 0;
    }
    fprintf(stderr, "bench-cold: %s: done in %.2f s; reading peak memory from /metrics\n", label, r.total_s);
    *ttft = r.ttft_s;
    memset(row, 0, sizeof *row);
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    bc_set(row, "time_utc", "%s", when);
    const char *v = r.verdict[0] ? r.verdict : r.pd_verdict; /* the header, else the final chunk's pd_bridge */
    char kind[160];
    snprintf(kind, sizeof kind, "%.*s", (int)strcspn(v, ";"), v);
    int complete = !native && !strcmp(kind, "complete");
    bc_set(row, "mode", "%s", native ? "native" : complete ? "bridged" : "front");
    bc_set(row, "verdict", "%s", native ? "native" : kind[0] ? kind : "none");
    bc_set(row, "endpoint", "%s", o->chat ? "chat" : "completions");
    bc_set(row, "model", "%s", o->model ? o->model : "");
    bc_set(row, "tokens_target", "%lld", o->tokens);
    bc_set(row, "seed", "%lld", o->seed);
    bc_set(row, "max_tokens", "%lld", o->max_tokens);
    if (r.prompt_tokens >= 0) bc_set(row, "prompt_tokens", "%lld", (long long)r.prompt_tokens);
    if (r.cached_tokens >= 0) bc_set(row, "cached_tokens", "%lld", (long long)r.cached_tokens);
    if (r.completion_tokens >= 0) bc_set(row, "completion_tokens", "%lld", (long long)r.completion_tokens);
    if (r.ttft_s > 0) bc_set(row, "ttft_s", "%.4f", r.ttft_s);
    bc_set(row, "total_s", "%.4f", r.total_s);
    if (r.ttft_s > 0 && r.completion_tokens > 1 && r.total_s > r.ttft_s)
        bc_set(row, "decode_tok_s", "%.2f", (double)(r.completion_tokens - 1) / (r.total_s - r.ttft_s));
    if (!native && v[0]) {
        char x[160];
        bc_verdict_value(v, "blocks", x, sizeof x); /* W/R */
        if (x[0] && strchr(x, '/')) {
            bc_set(row, "blocks_written", "%.*s", (int)strcspn(x, "/"), x);
            bc_set(row, "blocks_requested", "%s", strchr(x, '/') + 1);
        }
        static const char *const kv[][2] = {{"bytes", "bytes"}, {"engine_ms", "engine_ms"}, {"transfer_ms", "transfer_ms"},
                                            {"write_ms", "write_ms"}, {"total_ms", "bridge_total_ms"}};
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
            bc_verdict_value(v, kv[i][0], x, sizeof x);
            if (x[0]) bc_set(row, kv[i][1], "%s", x);
        }
    }
    const char *servers[3][2] = {{native ? NULL : url, "front_peak_rss_bytes"}, {dec_url, "decoder_peak_rss_bytes"},
                                 {native ? NULL : pre_url, "prefill_peak_rss_bytes"}};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        if (!servers[i][0]) continue;
        double peak;
        if (bc_metric(o, servers[i][0], "pdb_process_peak_rss_bytes", &peak)) {
            fprintf(stderr, "pdbridge bench-cold: cannot read %s/metrics after the request: %s\n", servers[i][0], pdb_err_msg());
            ok = 0;
        } else if (peak >= 0) {
            bc_set(row, servers[i][1], "%.0f", peak);
        } else {
            fprintf(stderr, "bench-cold: %s/metrics has no pdb_process_peak_rss_bytes (an older server?): column left empty\n",
                    servers[i][0]);
        }
    }
    bc_set(row, "needle", "%d", strstr(r.text, code) != NULL);
    bc_set(row, "url", "%s", url);
    bc_set(row, "answer_bytes", "%zu", strlen(r.text));
    bc_set(row, "answer_fnv64", "%016llx", (unsigned long long)bc_fnv64(r.text, strlen(r.text)));
    pdb_cli_stream_free(&r);
    if (!ok) return 0;
    char b[32], fr[32], dr[32], pr[32];
    bc_mb(b, sizeof b, bc_col(row, "bytes"));
    bc_mb(fr, sizeof fr, bc_col(row, "front_peak_rss_bytes"));
    bc_mb(dr, sizeof dr, bc_col(row, "decoder_peak_rss_bytes"));
    bc_mb(pr, sizeof pr, bc_col(row, "prefill_peak_rss_bytes"));
#define C(name) (bc_col(row, name)[0] ? bc_col(row, name) : "-")
    printf("%-7s tokens %s (cached %s)  TTFT %s s  total %s s  decode %s tok/s  verdict %s", bc_col(row, "mode"),
           C("prompt_tokens"), C("cached_tokens"), C("ttft_s"), C("total_s"), C("decode_tok_s"), bc_col(row, "verdict"));
    if (!native)
        printf("  blocks %s/%s  moved %s  engine %s ms  transfer %s ms  write %s ms", C("blocks_written"),
               C("blocks_requested"), b, C("engine_ms"), C("transfer_ms"), C("write_ms"));
    printf("  peak RSS front %s decoder %s prefill %s  needle %s\n", fr, dr, pr,
           bc_col(row, "needle")[0] == '1' ? "found" : "not found");
#undef C
    fflush(stdout);
    return 1;
}

/* Check that base answers GET path; print the failure naming what and the URL. */
static int bc_reachable(const bc_opts *o, const char *what, const char *base, const char *path, const char *hint) {
    char *b;
    if (bc_get(o, base, path, &b)) {
        fprintf(stderr, "pdbridge bench-cold: cannot reach the %s at %s: %s%s\n", what, base, pdb_err_msg(), hint ? hint : "");
        return 0;
    }
    free(b);
    return 1;
}

static int bc_is_url(const char *s) { return s && (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)); }

static int bc_check_servers(const bc_opts *op, char *dec_url, char *pre_url);
static int bc_run(const bc_opts *op, const char *dec_url, const char *pre_url);

int pdb_cli_bench_cold(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge bench-cold --front URL --tokens N [--native URL] [--seed S] [--max-tokens K] [--csv FILE]\n"
        "                           [--model NAME] [--chat] [--mode auto|force|off] [--ignore-eos] [--api-key KEY]\n"
        "                           [--tokenizer FILE] [--decoder-metrics URL] [--prefill-metrics URL] [--timeout-s T]\n"
        "                           [--save-prompt FILE]\n"
        "       pdbridge bench-cold --prompt-only --tokens N [--seed S] [--chat] --save-prompt FILE\n\n"
        "One cold prompt through a running front, measured. The prompt is about N tokens of real text: the Python\n"
        "standard library's .py files shuffled by S (default 1; 0: sorted by name), a needle sentence with a code\n"
        "drawn from S in the middle and a question about it at the end; it is sent as a streamed /v1/completions\n"
        "request (--chat: /v1/chat/completions) at temperature 0 with K tokens to generate (default 16). No\n"
        "X-PD-Bridge-Mode header is sent unless --mode names one (the front's default is auto; --mode force\n"
        "bridges past the front's --min-bridge-tokens, --min-tail and --max-bridge-tokens).\n"
        "The tokenizer counts the prompt (default .cache/tokenizer/deepseek_v3/tokenizer.json); the tokens that\n"
        "count are the ones the server reports. With --native URL the same prompt then goes to a decoder alone\n"
        "(give it an empty cache for a cold run) and the bridged/native ratio of the times to first token is printed.\n"
        "Each server's peak memory comes from its /metrics (pdb_process_peak_rss_bytes): the front's /health names\n"
        "its decoder and prefill server; --decoder-metrics / --prefill-metrics give other URLs for them (when the\n"
        "front reaches them at addresses this machine does not). The peak is the process's since it started: start\n"
        "fresh servers for a per-prompt peak. Every server is checked first; one that cannot be reached ends the\n"
        "run with exit 1 and its URL. Progress goes to stderr, one line per request to stdout, and with --csv one\n"
        "row per request is appended to FILE (the header first when FILE is new). Columns:\n"
        "  time_utc          when the request ended (ISO 8601, UTC)\n"
        "  mode              bridged (through the front, verdict complete), front (through the front, any other\n"
        "                    verdict: not bridged), native (the decoder alone)\n"
        "  verdict           the front's verdict without its key=value pairs (X-PD-Bridge, else the final chunk's\n"
        "                    pd_bridge), e.g. complete, partial 1024/1500, skipped short; native for the decoder alone\n"
        "  endpoint, model   completions or chat; the --model sent (empty: none)\n"
        "  tokens_target, seed, max_tokens   the options\n"
        "  prompt_tokens, cached_tokens, completion_tokens   the usage the server reported\n"
        "  ttft_s            seconds from sending to the first text of the answer\n"
        "  total_s           seconds from sending to the end of the stream\n"
        "  decode_tok_s      (completion_tokens - 1) / (total_s - ttft_s); empty below 2 tokens\n"
        "  blocks_written, blocks_requested, bytes, engine_ms, transfer_ms, write_ms, bridge_total_ms\n"
        "                    the verdict's blocks=W/R, bytes, engine_ms, transfer_ms, write_ms, total_ms (front rows)\n"
        "  front_peak_rss_bytes, decoder_peak_rss_bytes, prefill_peak_rss_bytes\n"
        "                    each server's pdb_process_peak_rss_bytes after the request (a native row: its decoder's)\n"
        "  needle            1 when the answer contains the needle's code, else 0\n"
        "  url               the server the prompt went to\n"
        "  answer_bytes, answer_fnv64   the answer text's length and FNV-1a 64 (hex)\n"
        "  answer_equal      native row with --native: 1 when its answer's bytes and FNV equal the front row's, else 0\n"
        "An empty field was not reported or does not apply. Exit 0 when every request was answered, 1 otherwise.\n"
        "--save-prompt FILE writes the prompt's text (exactly the bytes sent); --prompt-only builds and writes it,\n"
        "prints its bytes and the files' tokens, and sends nothing (no server needed), e.g. to time a tokenizer on it.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    bc_opts o = {.seed = 1, .max_tokens = 16, .timeout_s = 3600, .tokenizer = ".cache/tokenizer/deepseek_v3/tokenizer.json"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        const char **sv = !strcmp(a, "--front") ? &o.front : !strcmp(a, "--native") ? &o.native : !strcmp(a, "--csv") ? &o.csv
                        : !strcmp(a, "--model") ? &o.model : !strcmp(a, "--mode") ? &o.mode : !strcmp(a, "--api-key") ? &o.bearer
                        : !strcmp(a, "--tokenizer") ? &o.tokenizer : !strcmp(a, "--decoder-metrics") ? &o.dec_metrics
                        : !strcmp(a, "--prefill-metrics") ? &o.pre_metrics : !strcmp(a, "--save-prompt") ? &o.save_prompt : NULL;
        long long *iv = !strcmp(a, "--tokens") ? &o.tokens : !strcmp(a, "--seed") ? &o.seed : !strcmp(a, "--max-tokens") ? &o.max_tokens
                      : !strcmp(a, "--timeout-s") ? &o.timeout_s : NULL;
        if (sv && v) { *sv = v; i++; }
        else if (iv && pdb_cli_parse_int(v, !strcmp(a, "--seed") ? 0 : 1, !strcmp(a, "--tokens") ? (1LL << 24) : (1LL << 31), &x)) {
            *iv = x;
            i++;
        } else if (!strcmp(a, "--chat")) o.chat = 1;
        else if (!strcmp(a, "--ignore-eos")) o.ignore_eos = 1;
        else if (!strcmp(a, "--prompt-only")) o.prompt_only = 1;
        else if (sv || iv) {
            fprintf(stderr, "pdbridge bench-cold: %s needs %s\n\n%s", a, iv ? "a positive integer" : "a value", usage);
            return 2;
        } else {
            fprintf(stderr, "pdbridge bench-cold: bad option '%s'\n\n%s", a, usage);
            return 2;
        }
    }
    if (o.prompt_only && (!o.save_prompt || !o.tokens)) {
        fprintf(stderr, "pdbridge bench-cold: --prompt-only needs --tokens and --save-prompt FILE\n\n%s", usage);
        return 2;
    }
    if (!o.prompt_only && (!o.front || !o.tokens)) {
        fprintf(stderr, "pdbridge bench-cold: --front and --tokens are required\n\n%s", usage);
        return 2;
    }
    const char *urls[][2] = {{"--front", o.front}, {"--native", o.native}, {"--decoder-metrics", o.dec_metrics},
                             {"--prefill-metrics", o.pre_metrics}};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++)
        if (urls[i][1] && !bc_is_url(urls[i][1])) {
            fprintf(stderr, "pdbridge bench-cold: %s '%s' is not an http:// URL\n", urls[i][0], urls[i][1]);
            return 2;
        }
    if (o.mode && strcmp(o.mode, "auto") && strcmp(o.mode, "force") && strcmp(o.mode, "off")) {
        fprintf(stderr, "pdbridge bench-cold: --mode '%s': auto, force or off\n", o.mode);
        return 2;
    }
    if (pdb_http_client_init()) { pdb_cli_print_error("bench-cold", NULL); return 1; }

    char dec_url[512] = "", pre_url[512] = "";
    if (!o.prompt_only && !bc_check_servers(&o, dec_url, pre_url)) return 1;
    return bc_run(&o, dec_url, pre_url);
}

/* Every server first: a dead one ends the run before the prompt is built. dec_url / pre_url (512
 * bytes): the decoder and prefill server whose /metrics are read. 1 when all answered. */
static int bc_check_servers(const bc_opts *op, char *dec_url, char *pre_url) {
    const bc_opts o = *op;
    fprintf(stderr, "bench-cold: checking the front at %s\n", o.front);
    char *health;
    if (bc_get(&o, o.front, "/health", &health)) {
        fprintf(stderr, "pdbridge bench-cold: cannot reach the front (--front %s): %s\n", o.front, pdb_err_msg());
        return 0;
    }
    json_t *hj = json_loads(health, 0, NULL);
    free(health);
    const char *hd = json_string_value(json_object_get(hj, "decoder")), *hp = json_string_value(json_object_get(hj, "prefill"));
    snprintf(dec_url, 512, "%s", o.dec_metrics ? o.dec_metrics : hd ? hd : "");
    snprintf(pre_url, 512, "%s", o.pre_metrics ? o.pre_metrics : hp ? hp : "");
    json_decref(hj);
    if (!dec_url[0] || !pre_url[0]) {
        fprintf(stderr, "pdbridge bench-cold: the front at %s does not name its %s in /health: give --%s-metrics URL\n", o.front,
                !dec_url[0] ? "decoder" : "prefill server", !dec_url[0] ? "decoder" : "prefill");
        return 0;
    }
    if (!bc_reachable(&o, "front's decoder", dec_url, "/metrics", o.dec_metrics ? NULL : " (give --decoder-metrics URL)") ||
        !bc_reachable(&o, "front's prefill server", pre_url, "/metrics", o.pre_metrics ? NULL : " (give --prefill-metrics URL)") ||
        (o.native && !bc_reachable(&o, "native decoder (--native)", o.native, "/health", NULL)))
        return 0;
    return 1;
}

/* Build the prompt, save it when asked, then measure (not with --prompt-only). Exit status. */
static int bc_run(const bc_opts *op, const char *dec_url, const char *pre_url) {
    const bc_opts o = *op;
    fprintf(stderr, "bench-cold: loading the tokenizer %s\n", o.tokenizer);
    pdb_tokenizer *tok = NULL;
    if (pdb_tokenizer_load(o.tokenizer, &tok)) {
        fprintf(stderr, "pdbridge bench-cold: --tokenizer %s: %s\n", o.tokenizer, pdb_err_msg());
        return 1;
    }
    char code[10], needle[128];
    pdb_cli_prompt_code((uint64_t)o.seed, code);
    snprintf(needle, sizeof needle, BC_NEEDLE, code);
    char *dir = pdb_cli_prompt_stdlib_dir();
    fprintf(stderr, "bench-cold: building a prompt of about %lld tokens from %s (seed %lld, needle code %s)\n", o.tokens,
            dir ? dir : "the Python standard library", o.seed, code);
    free(dir);
    char *ctx = NULL;
    int64_t got = 0;
    pdb_status pst = pdb_cli_prompt_build(tok, o.tokens, (uint64_t)o.seed, needle, &ctx, &got);
    pdb_tokenizer_free(tok);
    if (pst) { pdb_cli_print_error("bench-cold", NULL); return 1; }
    if (got < o.tokens)
        fprintf(stderr, "bench-cold: the library has only %lld tokens of text: the prompt is shorter than --tokens %lld\n",
                (long long)got, o.tokens);
    size_t cl = strlen(ctx), pl = cl + sizeof BC_QUESTION + 16;
    char *prompt = malloc(pl);
    if (!prompt) {
        fprintf(stderr, "pdbridge bench-cold: out of memory for the %zu-byte prompt\n", pl);
        free(ctx);
        return 1;
    }
    snprintf(prompt, pl, "%s%s%s", ctx, BC_QUESTION, o.chat ? "" : "\nAnswer:");
    free(ctx);
    fprintf(stderr, "bench-cold: prompt: %zu bytes\n", strlen(prompt));
    if (o.save_prompt) {
        FILE *f = fopen(o.save_prompt, "wb");
        int ok = f && fwrite(prompt, 1, strlen(prompt), f) == strlen(prompt);
        if (f && fclose(f)) ok = 0;
        if (!ok) {
            fprintf(stderr, "pdbridge bench-cold: cannot write --save-prompt %s: %s\n", o.save_prompt, strerror(errno));
            free(prompt);
            return 1;
        }
        fprintf(stderr, "bench-cold: prompt written to %s\n", o.save_prompt);
    }
    if (o.prompt_only) {
        printf("prompt %zu bytes, %lld tokens of files (target %lld, seed %lld) in %s\n", strlen(prompt), (long long)got,
               o.tokens, o.seed, o.save_prompt);
        free(prompt);
        return 0;
    }

    static bc_row rows[2];
    double ttft_front = 0, ttft_native = 0;
    int rc = 0;
    if (!bc_measure(&o, o.front, 0, prompt, code, dec_url, pre_url, &rows[0], &ttft_front)) rc = 1;
    else if (o.csv && !bc_csv_append(o.csv, &rows[0])) rc = 1;
    if (!rc && o.native) {
        if (!bc_measure(&o, o.native, 1, prompt, code, o.native, NULL, &rows[1], &ttft_native)) {
            rc = 1;
        } else {
            /* the same answer bytes from the front and from the decoder alone */
            int eq = !strcmp(bc_col(&rows[0], "answer_bytes"), bc_col(&rows[1], "answer_bytes")) &&
                     !strcmp(bc_col(&rows[0], "answer_fnv64"), bc_col(&rows[1], "answer_fnv64"));
            bc_set(&rows[1], "answer_equal", "%d", eq);
            printf("answer: %s %s bytes fnv64 %s, native %s bytes fnv64 %s: %s\n", bc_col(&rows[0], "mode"),
                   bc_col(&rows[0], "answer_bytes"), bc_col(&rows[0], "answer_fnv64"), bc_col(&rows[1], "answer_bytes"),
                   bc_col(&rows[1], "answer_fnv64"), eq ? "equal" : "DIFFERENT");
            if (o.csv && !bc_csv_append(o.csv, &rows[1])) rc = 1;
            else if (ttft_front > 0 && ttft_native > 0)
                printf("time to first token: %s %.3f s / native %.3f s = %.3f (native/%s = %.2fx)\n", bc_col(&rows[0], "mode"),
                       ttft_front, ttft_native, ttft_front / ttft_native, bc_col(&rows[0], "mode"), ttft_native / ttft_front);
        }
    }
    if (!rc && o.csv) fprintf(stderr, "bench-cold: appended %d row%s to %s\n", o.native ? 2 : 1, o.native ? "s" : "", o.csv);
    free(prompt);
    return rc;
}
