/* pdb_cli_prompt: the real-text prompt builder shared by `up` and `bench-cold` (see
 * pdb_cli_prompt.h): stdlib .py files (top level, then packages), sorted or shuffled by a seed,
 * a needle at the middle. */
#include "pdb_cli_prompt.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static uint64_t prompt_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

char *pdb_cli_prompt_stdlib_dir(void) {
    FILE *p = popen("python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])' 2>/dev/null", "r");
    char buf[512] = "";
    if (p) {
        if (!fgets(buf, sizeof buf, p)) buf[0] = 0;
        pclose(p);
    }
    buf[strcspn(buf, "\n")] = 0;
    if (!buf[0]) snprintf(buf, sizeof buf, "/usr/lib/python3.11");
    return strdup(buf);
}

void pdb_cli_prompt_code(uint64_t seed, char out[10]) {
    uint64_t s = seed ^ 0x6E6565646C65ull; /* "needle": another stream than the shuffle's */
    for (int i = 0; i < 4; i++) out[i] = (char)('A' + prompt_splitmix(&s) % 26);
    out[4] = '-';
    for (int i = 5; i < 9; i++) out[i] = (char)('0' + prompt_splitmix(&s) % 10);
    out[9] = 0;
}

/* Shuffle names[0..n) by the seed (0: keep the sorted order). */
static void prompt_shuffle(char **names, int n, uint64_t seed) {
    if (!seed) return;
    uint64_t s = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(prompt_splitmix(&s) % (uint64_t)(i + 1));
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
    }
}

/* Append to names (cap entries) the .py files of dir/sub not starting with '_', as "sub/name"
 * (sub "" : "name"), sorted; subdirectories too (not '_', '.', site-packages) when subs is set. */
static pdb_status prompt_list(const char *dir, const char *sub, char **names, int cap, int *n, char **subs, int subcap, int *nsub) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s%s", dir, sub[0] ? "/" : "", sub);
    DIR *d = opendir(path);
    if (!d) return sub[0] ? PDB_OK : pdb_err_set(PDB_IO, "cannot read the Python standard library at %s", dir);
    int first = *n;
    struct dirent *e;
    pdb_status st = PDB_OK;
    while (!st && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        char full[1400];
        snprintf(full, sizeof full, "%s%s%s", sub, sub[0] ? "/" : "", e->d_name);
        if (l > 3 && !strcmp(e->d_name + l - 3, ".py") && e->d_name[0] != '_') {
            if (*n < cap && !(names[(*n)++] = strdup(full))) st = pdb_err_set(PDB_NOMEM, "the file name %s", full);
        } else if (subs && e->d_name[0] != '_' && e->d_name[0] != '.' && strcmp(e->d_name, "site-packages") && *nsub < subcap) {
            char sp[1400];
            snprintf(sp, sizeof sp, "%s/%s", path, e->d_name);
            DIR *t = opendir(sp);
            if (t) {
                closedir(t);
                if (!(subs[(*nsub)++] = strdup(e->d_name))) st = pdb_err_set(PDB_NOMEM, "the directory name %s", e->d_name);
            }
        }
    }
    closedir(d);
    if (*n > first) qsort(names + first, (size_t)(*n - first), sizeof *names, cmp_str); /* readdir's order is the filesystem's */
    return st;
}

enum { PROMPT_MAX_FILES = 16384, PROMPT_MAX_SUBS = 1024 };

pdb_status pdb_cli_prompt_build(const pdb_tokenizer *tok, int64_t target, uint64_t seed, const char *needle, char **out,
                                int64_t *tokens) {
    *out = NULL;
    if (tokens) *tokens = 0;
    char *dir = pdb_cli_prompt_stdlib_dir();
    if (!dir) return pdb_err_set(PDB_NOMEM, "the path of the Python standard library");
    char **names = calloc(PROMPT_MAX_FILES, sizeof *names), **subs = calloc(PROMPT_MAX_SUBS, sizeof *subs);
    int n = 0, nsub = 0, ntop = 0;
    pdb_status st = names && subs ? PDB_OK : pdb_err_set(PDB_NOMEM, "the file list of the Python standard library");
    /* first the top-level files (shuffled), then the packages' files (shuffled among themselves):
     * a prompt the top level can fill is the same text as before the packages were read */
    if (!st) st = prompt_list(dir, "", names, PROMPT_MAX_FILES, &n, subs, PROMPT_MAX_SUBS, &nsub);
    ntop = n;
    if (!st) prompt_shuffle(names, ntop, seed);
    qsort(subs, (size_t)nsub, sizeof *subs, cmp_str);
    for (int i = 0; i < nsub && !st; i++) st = prompt_list(dir, subs[i], names, PROMPT_MAX_FILES, &n, NULL, 0, NULL);
    if (!st) {
        qsort(names + ntop, (size_t)(n - ntop), sizeof *names, cmp_str);
        prompt_shuffle(names + ntop, n - ntop, seed);
    }
    for (int i = 0; i < nsub; i++) free(subs[i]);
    free(subs);
    size_t cap = 1 << 20, len = 0;
    char *text = st ? NULL : malloc(cap);
    if (!st && !text) st = pdb_err_set(PDB_NOMEM, "%zu bytes for the prompt", cap);
    int64_t toks = 0, placed = 0;
    for (int i = 0; i < n && toks < target && !st; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        static char buf[1 << 16]; /* CLI, one thread */
        size_t r = fread(buf, 1, sizeof buf, f);
        fclose(f);
        int32_t *ids = NULL;
        int64_t ni = 0;
        if (pdb_tokenizer_encode(tok, buf, r, &ids, &ni)) continue;
        free(ids);
        if (toks + ni > target) { /* take a proportional prefix */
            r = (size_t)((double)r * (double)(target - toks) / (double)ni);
            ni = target - toks;
        }
        char head[1200];
        int hl = snprintf(head, sizeof head, "\n# ---- file %s ----\n", names[i]);
        size_t need = len + r + (size_t)hl + 200 + (needle ? strlen(needle) : 0);
        while (need > cap) {
            char *t = realloc(text, cap * 2);
            if (!t) { st = pdb_err_set(PDB_NOMEM, "%zu bytes for the prompt", cap * 2); break; }
            text = t;
            cap *= 2;
        }
        if (st) break;
        memcpy(text + len, head, (size_t)hl);
        len += (size_t)hl;
        memcpy(text + len, buf, r);
        len += r;
        toks += ni;
        if (!placed && toks >= target / 2) {
            if (needle) len += (size_t)snprintf(text + len, cap - len, "\n# %s\n", needle);
            placed = 1;
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(dir);
    if (st) {
        free(text);
        return st;
    }
    text[len] = 0;
    *out = text;
    if (tokens) *tokens = toks;
    return PDB_OK;
}
