/* pdb_cli_doctor: `pdbridge doctor` checks every link of a deployment and says how to fix what
 * fails: each server answers /health; the decoder fingerprint agrees on decoder, prefill, front
 * (and DEC_DIR when given); block sizes agree; the front's cache dir is writable and is the
 * decoder's store; decoder and front tokenize with the same tokenizer.json; the servers' limits
 * (each derived from its window, reported in /health "limits") are coherent. Exit 0 only when
 * every check passes ("note" lines are information, not failures). */
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

/* A number of a server's "limits" (its /health); -1 when absent. */
static long long dr_lim(json_t *health, const char *k) {
    json_t *v = json_object_get(json_object_get(health, "limits"), k);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

/* The limits of the three servers against each other and against the window the decoder serves
 * (each server derives its own from its window and block size, pdb_limits): equal windows; every
 * body bound holds the decoder's full window of token ids; the prefill server accepts a full
 * window; the decoder's store cap and disk hold a full window's blocks; the front's timeouts
 * cover a full window at the documented rate. */
static void dr_limits(json_t *jf, json_t *jd, json_t *jp) {
    char msg[1024];
    json_t *srv[3] = {jf, jd, jp};
    const char *name[3] = {"front", "decoder", "prefill"};
    for (int i = 0; i < 3; i++)
        if (srv[i] && !json_is_object(json_object_get(srv[i], "limits"))) {
            snprintf(msg, sizeof msg, "the %s's /health has no \"limits\"", name[i]);
            dr_report(0, "limits reported", msg, "run the same pdbridge version on all three servers");
            srv[i] = NULL;
        }
    jf = srv[0], jd = srv[1], jp = srv[2];
    json_t *ref = jd ? jd : jf; /* the decoder's window is the one served */
    if (!ref) return;
    long long w = dr_lim(ref, "window"), need_body = dr_lim(ref, "min_body_bytes");
    const char *rn = jd ? "decoder" : "front";
    for (int i = 0; i < 3; i++) {
        if (!srv[i] || srv[i] == ref) continue;
        long long wi = dr_lim(srv[i], "window");
        snprintf(msg, sizeof msg, "%s %lld, %s %lld", rn, w, name[i], wi);
        char what[64];
        snprintf(what, sizeof what, "served window %s = %s", rn, name[i]);
        dr_report(wi == w, what, msg, "give every server the same --max-context (or none: the checkpoint's max_position_embeddings)");
    }
    for (int i = 0; i < 3; i++) {
        if (!srv[i]) continue;
        long long mb = dr_lim(srv[i], "max_body");
        snprintf(msg, sizeof msg, "%s's body bound %lld bytes, a full window of %lld token ids needs %lld", name[i], mb, w, need_body);
        char what[64];
        snprintf(what, sizeof what, "%s body bound holds a full window", name[i]);
        dr_report(mb >= need_body, what, msg, "raise (or drop) that server's --max-body");
    }
    if (jp) {
        long long mt = dr_lim(jp, "max_tokens");
        snprintf(msg, sizeof msg, "prefill accepts %lld tokens, the window is %lld", mt, w);
        dr_report(mt >= w, "prefill accepts a full window", msg, "raise (or drop) the prefill server's --max-tokens / --max-context");
        long long sp = dr_lim(jp, "spill_max_bytes"), need = dr_lim(jp, "window_spill_bytes");
        printf("%-5s prefill spill holds %lld of a full window's %lld bytes%s\n", "note", sp, need,
               sp >= need ? "" : " (the engine pauses while the front drains; a resume after a break recomputes)");
        if (jd && json_is_true(json_object_get(json_object_get(jp, "limits"), "block_size_fixed"))) {
            long long bp = dr_lim(jp, "block_size"), bd = dr_lim(jd, "block_size");
            snprintf(msg, sizeof msg, "decoder %lld, prefill %lld", bd, bp);
            dr_report(bp == bd, "block size decoder = prefill", msg, "give the prefill server the decoder's --block-size");
        }
    }
    if (jd) {
        long long cap = dr_lim(jd, "cache_max_bytes"), need = dr_lim(jd, "window_store_bytes"), disk = dr_lim(jd, "store_disk_bytes");
        snprintf(msg, sizeof msg, "cap %lld bytes (0 = none), a full window's blocks need %lld", cap, need);
        dr_report(cap == 0 || cap >= need, "decoder store cap holds a full window", msg, "raise or drop the decoder's --cache-max-bytes");
        if (disk >= 0) {
            snprintf(msg, sizeof msg, "its disk holds %lld bytes of blocks (present + free), a full window needs %lld", disk, need);
            dr_report(disk >= need, "decoder store disk holds a full window", msg,
                      "free space on the store's disk, move --cache-dir, or serve a smaller --max-context");
        }
    }
    if (jf) {
        const char *k[2][2] = {{"prefill_timeout_ms_set", "prefill_timeout_ms"}, {"decoder_timeout_ms_set", "decoder_timeout_ms"}};
        for (int i = 0; i < 2; i++) {
            long long set = dr_lim(jf, k[i][0]), need = dr_lim(jf, k[i][1]);
            snprintf(msg, sizeof msg, "%lld ms, a full window needs %lld ms at the documented rate", set, need);
            char what[64];
            snprintf(what, sizeof what, "front %s timeout covers a full window", i ? "decoder" : "prefill");
            dr_report(set >= need, what, msg, i ? "raise (or drop) --decoder-timeout-ms" : "raise (or drop) --prefill-timeout-ms");
        }
        long long mbt = dr_lim(jf, "max_bridge_tokens"), bt = dr_lim(jf, "window_blocks") * dr_lim(jf, "block_size");
        if (mbt > 0 && mbt < bt)
            printf("%-5s front --max-bridge-tokens %lld < a full window's %lld bridgeable tokens: longer prompts are bridged in part\n",
                   "note", mbt, bt);
    }
}

int pdb_cli_doctor(int argc, char **argv) {
    static const char *usage =
        "usage: pdbridge doctor --front URL [--decoder URL] [--prefill URL] [--decoder-model DEC_DIR] [--api-key KEY]\n\n"
        "Checks a deployment: every server answers; decoder, prefill and front agree on the decoder fingerprint\n"
        "(model, quantization, cache semantics) and the block size; the front's cache dir is writable and is\n"
        "the decoder's store; decoder and front use the same tokenizer; the limits each server derives from its\n"
        "window agree (same window; every body bound, the prefill's max tokens, the decoder's store cap and disk\n"
        "and the front's timeouts hold a full window: docs/limits.md). The decoder and prefill URLs default to\n"
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
    if (jf || jd || jp) dr_limits(jf, jd, jp);
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
