/* pdb_cli_doctor: `pdbridge doctor` checks every link of a deployment and says how to fix what
 * fails: each server answers /health; the decoder fingerprint agrees on decoder, prefill, front
 * (and DEC_DIR when given); block sizes agree; the front's cache dir is writable and is the
 * decoder's store; decoder and front tokenize with the same tokenizer.json. Exit 0 only when
 * every check passes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pdb_cli.h"
#include "pdb_config.h"
#include "pdb_dec_model.h"
#include "pdb_http_client.h"
#include "pdb_store.h"

/* GET url/health; NULL (and why in err) when it does not answer with JSON. */
static json_t *dr_health(const char *url, const char *key, char *err, size_t errn) {
    char full[600];
    snprintf(full, sizeof full, "%s/health", url);
    pdb_http_call call = {.url = full, .bearer = key, .timeout_ms = 5000L};
    pdb_http_reply rp;
    pdb_status st = pdb_http_client_call(&call, &rp);
    json_t *j = NULL;
    if (st != PDB_OK) snprintf(err, errn, "%s", rp.error);
    else if (rp.status != 200) snprintf(err, errn, "HTTP %d", rp.status);
    else if (!(j = rp.body ? json_loadb(rp.body, rp.len, 0, NULL) : NULL)) snprintf(err, errn, "not a JSON health answer");
    free(rp.body);
    return j;
}

static int n_fail;

static void dr_report(int ok, const char *what, const char *detail, const char *fix) {
    printf("%-5s %s%s%s\n", ok ? "ok" : "FAIL", what, detail && *detail ? ": " : "", detail ? detail : "");
    if (!ok) {
        n_fail++;
        if (fix) printf("      fix: %s\n", fix);
    }
}

static const char *dr_str(json_t *j, const char *k) {
    const char *s = json_string_value(json_object_get(j, k));
    return s ? s : "";
}

int pdb_cli_doctor(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge doctor --front URL [--decoder URL] [--prefill URL] [--decoder-model DEC_DIR] [--api-key KEY]\n\n"
        "Checks a deployment: every server answers; decoder, prefill and front agree on the decoder fingerprint\n"
        "(model, quantization, cache semantics) and the block size; the front's cache dir is writable and is\n"
        "the decoder's store; decoder and front use the same tokenizer. The decoder and prefill URLs default to\n"
        "the ones the front reports. Prints one line per check and how to fix failures; exit 0 when all pass.\n";
    if (pdb_cli_wants_help(argc, argv)) { fputs(usage, stdout); return 0; }
    const char *front = NULL, *dec = NULL, *pre = NULL, *dd = NULL, *key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--front") && v) front = argv[++i];
        else if (!strcmp(a, "--decoder") && v) dec = argv[++i];
        else if (!strcmp(a, "--prefill") && v) pre = argv[++i];
        else if (!strcmp(a, "--decoder-model") && v) dd = argv[++i];
        else if (!strcmp(a, "--api-key") && v) key = argv[++i];
        else { fprintf(stderr, "pdbridge doctor: bad option '%s'\n\n%s", a, usage); return 2; }
    }
    if (!front && (!dec || !pre)) { fprintf(stderr, "pdbridge doctor: give --front, or --decoder and --prefill\n\n%s", usage); return 2; }
    if (pdb_http_client_init()) { fprintf(stderr, "pdbridge doctor: %s\n", pdb_err_msg()); return 1; }
    n_fail = 0;
    char err[256], msg[1024];
    json_t *jf = NULL, *jd = NULL, *jp = NULL;
    if (front) {
        jf = dr_health(front, key, err, sizeof err);
        snprintf(msg, sizeof msg, "%s %s", front, jf ? "answers" : err);
        dr_report(jf != NULL, "front", msg, "start `pdbridge front` there, or fix --front");
        if (jf && !dec) dec = dr_str(jf, "decoder");
        if (jf && !pre) pre = dr_str(jf, "prefill");
    }
    if (dec && *dec) {
        jd = dr_health(dec, key, err, sizeof err);
        snprintf(msg, sizeof msg, "%s %s", dec, jd ? "answers" : err);
        dr_report(jd != NULL, "decoder", msg, "start `pdbridge decode-server` there (the front's --decoder URL)");
    }
    if (pre && *pre) {
        jp = dr_health(pre, key, err, sizeof err);
        snprintf(msg, sizeof msg, "%s %s (backend %s)", pre, jp ? "answers" : err, jp ? dr_str(jp, "backend") : "-");
        dr_report(jp != NULL, "prefill", msg, "start `pdbridge prefill-server` there (the front's --prefill URL)");
    }
    const char *fd = jd ? dr_str(jd, "fingerprint") : "";
    if (jd && jp) {
        int ok = !strcmp(fd, dr_str(jp, "fingerprint"));
        snprintf(msg, sizeof msg, "decoder %.16s... prefill %.16s...", fd, dr_str(jp, "fingerprint"));
        dr_report(ok, "fingerprint decoder = prefill", msg,
                  "start the prefill server with --decoder-model pointing at the decoder's checkpoint (same quantize output)");
    }
    if (jd && jf) {
        int ok = !strcmp(fd, dr_str(jf, "fingerprint"));
        snprintf(msg, sizeof msg, "decoder %.16s... front %.16s...", fd, dr_str(jf, "fingerprint"));
        dr_report(ok, "fingerprint decoder = front", msg, "start the front with --decoder-model = the decoder's --model");
        json_int_t bd = json_integer_value(json_object_get(jd, "block_size")), bf = json_integer_value(json_object_get(jf, "block_size"));
        snprintf(msg, sizeof msg, "decoder %lld, front %lld", (long long)bd, (long long)bf);
        dr_report(bd == bf, "block size", msg, "give the front the decoder's --block-size");
        const char *td = dr_str(jd, "tokenizer_sha256"), *tf = dr_str(jf, "tokenizer_sha256");
        snprintf(msg, sizeof msg, "decoder %.12s..., front %.12s...", *td ? td : "(token-id mode)", *tf ? tf : "(token-id mode)");
        dr_report(!strcmp(td, tf), "tokenizers identical", msg, "use the same DEC_DIR (its tokenizer.json) for decoder and front");
        const char *cd = dr_str(jd, "cache_dir"), *cf = dr_str(jf, "cache_dir");
        snprintf(msg, sizeof msg, "decoder %s, front %s", cd, cf);
        dr_report(*cd && !strcmp(cd, cf), "cache dir shared", msg,
                  "give the front --cache-dir = the decoder's --cache-dir (same directory, or the same shared mount)");
        if (*cf) {
            char probe[4200];
            snprintf(probe, sizeof probe, "%s/.doctor-probe-%d", cf, (int)getpid());
            FILE *p = fopen(probe, "w");
            int ok = p && fputs("probe\n", p) >= 0;
            if (p) ok &= fclose(p) == 0;
            unlink(probe);
            dr_report(ok, "cache dir writable (from here)", cf, "make the directory writable by the front's user");
        }
    }
    if (dd && jd) {
        pdb_config cfg;
        pdb_st *st = NULL;
        char scheme[32], hex[65];
        uint8_t fp[32];
        int ok = !pdb_config_load(dd, &cfg) && !pdb_st_open(dd, &st) && !pdb_dec_model_identity(dd, &cfg, st, scheme, fp);
        pdb_st_close(st);
        if (ok) pdb_store_hash_hex(fp, hex);
        snprintf(msg, sizeof msg, "%s: %s", dd, ok ? hex : pdb_err_msg());
        dr_report(ok && !strcmp(hex, fd), "fingerprint DEC_DIR = decoder", msg, "this DEC_DIR is not the checkpoint the decoder serves");
    }
    json_decref(jf);
    json_decref(jd);
    json_decref(jp);
    printf("%s\n", n_fail ? "doctor: some checks failed" : "doctor: all checks passed");
    return n_fail ? 1 : 0;
}
