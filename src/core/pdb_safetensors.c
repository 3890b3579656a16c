/* pdb_safetensors: validating reader, mapped or resident in memory (one file, a directory, or
 * shards through model.safetensors.index.json) and atomic writer. Format byte by byte: docs/formats/safetensors.md.
 * Invariants: pdb_st_open either fails with a message naming the file (and tensor) at fault
 * or returns a reader in which every view lies inside its mapping with nbytes ==
 * numel * dtype size; tensor names are unique across all files and found through an
 * open-addressing hash table; names and metadata strings point into the parsed JSON headers,
 * which live as long as the reader. The writer publishes by write-to-temp, fsync, rename,
 * fsync(dir): a reader never sees a partial file. */
#include "pdb_safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pdb_clock.h"
#include "pdb_mem.h"
#include "pdb_proc.h"
#include "pdb_sys.h"

#define ST_MAX_HEADER (100ull * 1000 * 1000) /* a header larger than this is refused */
#define ST_MAX_INDEX (100ll * 1000 * 1000)   /* same limit for model.safetensors.index.json */

/* ---- small helpers ---------------------------------------------------------------------- */

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + slash, name, b + 1);
    return p;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

/* "[3,4]" into buf; a -1 dim prints as "*" (caller's wildcard). */
static const char *fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++) {
        if (shape[i] < 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s*", i ? "," : "");
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? "," : "", shape[i]);
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Open-addressing table of indices into an array of names (linear probing, load <= 1/2). */
typedef const char *(*name_at_fn)(const void *ctx, int64_t i);
typedef struct name_index {
    int64_t *slots; /* [mask + 1], -1 = empty */
    uint64_t mask;
    int64_t count;
} name_index;

static int64_t ni_find(const name_index *ni, const char *name, name_at_fn at, const void *ctx) {
    if (!ni->slots) return -1;
    for (uint64_t h = name_hash(name) & ni->mask;; h = (h + 1) & ni->mask) {
        int64_t i = ni->slots[h];
        if (i < 0) return -1;
        if (strcmp(at(ctx, i), name) == 0) return i;
    }
}

static void ni_put(name_index *ni, int64_t idx, const char *name) {
    uint64_t h = name_hash(name) & ni->mask;
    while (ni->slots[h] >= 0) h = (h + 1) & ni->mask;
    ni->slots[h] = idx;
}

/* Add idx (whose name must not be present yet); grows the table as needed. */
static pdb_status ni_add(name_index *ni, int64_t idx, name_at_fn at, const void *ctx) {
    if (!ni->slots || (uint64_t)(ni->count + 1) * 2 > ni->mask + 1) {
        uint64_t cap = ni->slots ? (ni->mask + 1) * 2 : 64;
        int64_t *slots = malloc(cap * sizeof *slots);
        if (!slots) return pdb_err_set(PDB_NOMEM, "tensor name index: out of memory (%" PRIu64 " slots)", cap);
        memset(slots, 0xFF, cap * sizeof *slots);
        int64_t *old = ni->slots;
        uint64_t old_cap = old ? ni->mask + 1 : 0;
        ni->slots = slots;
        ni->mask = cap - 1;
        for (uint64_t s = 0; s < old_cap; s++)
            if (old[s] >= 0) ni_put(ni, old[s], at(ctx, old[s]));
        free(old);
    }
    ni_put(ni, idx, at(ctx, idx));
    ni->count++;
    return PDB_OK;
}

/* ---- reader ----------------------------------------------------------------------------- */

typedef struct st_file {
    char *path;
    const uint8_t *map; /* [map_len], PROT_READ */
    size_t map_len;
    const uint8_t *data; /* data area [data_len] = map + 8 + header length */
    uint64_t data_len;
    json_t *header;
    int fd; /* the file, kept open with PDB_ST_KEEP_FD (else -1) */
} st_file;

struct pdb_st {
    char *root; /* the path given to pdb_st_open */
    int flags;  /* PDB_ST_* */
    st_file *files;
    int nfiles, files_cap;
    pdb_tensor_view *tensors;
    int64_t ntensors, tensors_cap;
    name_index index;
    json_t *meta; /* borrowed: __metadata__ of files[0], or NULL */
};

static const char *view_name_at(const void *ctx, int64_t i) {
    return ((const pdb_st *)ctx)->tensors[i].name;
}

static pdb_status st_push_view(pdb_st *st, const pdb_tensor_view *v) {
    if (st->ntensors == st->tensors_cap) {
        int64_t cap = st->tensors_cap ? st->tensors_cap * 2 : 256;
        pdb_tensor_view *t = realloc(st->tensors, (size_t)cap * sizeof *t);
        if (!t) return pdb_err_set(PDB_NOMEM, "%s: out of memory for %" PRId64 " tensor views", v->file, cap);
        st->tensors = t;
        st->tensors_cap = cap;
    }
    st->tensors[st->ntensors++] = *v;
    return PDB_OK;
}

static int64_t json_int_or(json_t *j, int *ok) {
    if (!json_is_integer(j)) {
        *ok = 0;
        return 0;
    }
    return (int64_t)json_integer_value(j);
}

/* Validate one header entry and append its view. */
static pdb_status st_parse_tensor(pdb_st *st, const st_file *f, const char *name, json_t *obj) {
    const char *fp = f->path;
    if (!json_is_object(obj))
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': header entry is not a JSON object", fp, name);
    pdb_tensor_view v;
    memset(&v, 0, sizeof v);
    v.name = name;
    v.file = f->path;

    json_t *jdt = json_object_get(obj, "dtype");
    if (!json_is_string(jdt))
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': missing or non-string \"dtype\"", fp, name);
    if (pdb_dtype_parse(json_string_value(jdt), &v.dtype) != PDB_OK)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: tensor '%s': unknown or unsupported dtype '%s'", fp, name,
                           json_string_value(jdt));

    json_t *jshape = json_object_get(obj, "shape");
    if (!json_is_array(jshape))
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': missing or non-array \"shape\"", fp, name);
    size_t nd = json_array_size(jshape);
    if (nd > PDB_ST_MAX_DIMS)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: tensor '%s': %zu dims, at most %d supported", fp, name, nd,
                           PDB_ST_MAX_DIMS);
    v.ndim = (int)nd;
    int64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        int ok = 1;
        int64_t d = json_int_or(json_array_get(jshape, i), &ok);
        if (!ok) return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': shape[%zu] is not an integer", fp, name, i);
        if (d < 0) return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': negative dim shape[%zu] = %" PRId64, fp, name, i, d);
        v.shape[i] = d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': element count of the shape overflows 64 bits", fp, name);
    }
    v.numel = numel;
    char sbuf[160];
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)pdb_dtype_size(v.dtype), &need))
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': byte size of shape %s %s overflows 64 bits", fp, name,
                           fmt_shape(sbuf, sizeof sbuf, v.ndim, v.shape), pdb_dtype_name(v.dtype));

    json_t *joff = json_object_get(obj, "data_offsets");
    int ok = json_is_array(joff) && json_array_size(joff) == 2;
    int64_t b = ok ? json_int_or(json_array_get(joff, 0), &ok) : 0;
    int64_t e = ok ? json_int_or(json_array_get(joff, 1), &ok) : 0;
    if (!ok)
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': \"data_offsets\" must be an array of two integers", fp, name);
    if (b < 0 || e < 0)
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': negative data_offsets [%" PRId64 ", %" PRId64 "]", fp, name, b, e);
    if (b > e)
        return pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] are not ordered",
                           fp, name, b, e);
    if ((uint64_t)e > f->data_len)
        return pdb_err_set(PDB_CORRUPT,
                           "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] extend past the data area "
                           "(%" PRIu64 " bytes; file truncated?)", fp, name, b, e, f->data_len);
    if ((uint64_t)(e - b) != need)
        return pdb_err_set(PDB_CORRUPT,
                           "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] but shape %s %s needs %" PRIu64
                           " bytes", fp, name, b, e, fmt_shape(sbuf, sizeof sbuf, v.ndim, v.shape),
                           pdb_dtype_name(v.dtype), need);
    v.data = f->data + b;
    v.nbytes = need;
    return st_push_view(st, &v);
}

static pdb_status st_parse_meta(const st_file *f, json_t *meta) {
    if (!json_is_object(meta))
        return pdb_err_set(PDB_CORRUPT, "%s: \"__metadata__\" is not a JSON object", f->path);
    const char *k;
    json_t *val;
    json_object_foreach(meta, k, val) {
        if (!json_is_string(val))
            return pdb_err_set(PDB_CORRUPT, "%s: __metadata__ key '%s' is not a string", f->path, k);
    }
    return PDB_OK;
}

/* PDB_ST_RESIDENT: the whole file read into huge-page memory (pdb_mem_map), then made read-only.
 * f->map/map_len then describe that region (munmap'd by pdb_st_close as a mapping is). */
enum { ST_READ_CHUNK = 64 << 20 };
#define ST_PROGRESS (8ull << 30) /* a progress line per 8 GiB read; the final line from 256 MiB */

int pdb_st_resident_fits(uint64_t file_bytes, uint64_t available_bytes) {
    if (!available_bytes) return 1;
    uint64_t keep = available_bytes / 8 + ((uint64_t)1 << 30);
    return available_bytes > keep && file_bytes <= available_bytes - keep;
}

static pdb_status st_read_resident(st_file *f, int fd, uint64_t size) {
    size_t len = pdb_mem_len((size_t)size);
    uint8_t *a = pdb_mem_map((size_t)size, 1);
    if (!a)
        return pdb_err_set(PDB_NOMEM, "%s: cannot allocate %zu bytes to hold the file in memory: %s", f->path, len,
                           strerror(errno));
    f->map = a; /* from here pdb_st_close unmaps it */
    f->map_len = len;
    double t0 = pdb_clock_now();
    for (uint64_t off = 0, shown = 0; off < size;) {
        if (off - shown >= ST_PROGRESS) { /* a large checkpoint takes a while: say how far */
            PDB_INFO("safetensors: %s: %.1f of %.1f GB read into memory", f->path, off / 1e9, size / 1e9);
            shown = off;
        }
        size_t want = size - off < ST_READ_CHUNK ? (size_t)(size - off) : ST_READ_CHUNK;
        ssize_t got = pread(fd, a + off, want, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return pdb_err_set(PDB_IO, "%s: read at byte %" PRIu64 " of %" PRIu64 ": %s", f->path, off, size,
                               got < 0 ? strerror(errno) : "unexpected end of file");
        off += (uint64_t)got;
    }
    if (mprotect(a, len, PROT_READ) != 0)
        return pdb_err_set(PDB_IO, "%s: mprotect of the in-memory copy: %s", f->path, strerror(errno));
    if (size >= ST_PROGRESS / 32)
        PDB_INFO("safetensors: %s: %.2f GB read into memory in %.1f s", f->path, size / 1e9,
                 pdb_clock_now() - t0);
    return PDB_OK;
}

/* Map `path`, validate its header, append its tensors. */
static pdb_status st_add_file(pdb_st *st, const char *path) {
    if (st->nfiles == st->files_cap) {
        int cap = st->files_cap ? st->files_cap * 2 : 4;
        st_file *nf = realloc(st->files, (size_t)cap * sizeof *nf);
        if (!nf) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
        st->files = nf;
        st->files_cap = cap;
    }
    st_file *f = &st->files[st->nfiles];
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = str_dup(path);
    if (!f->path) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    st->nfiles++; /* from here pdb_st_close releases whatever f holds */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return pdb_err_set(err == ENOENT ? PDB_NOT_FOUND : PDB_IO, "%s: cannot open: %s", path, strerror(err));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return pdb_err_set(PDB_IO, "%s: fstat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pdb_err_set(PDB_INVALID, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return pdb_err_set(PDB_CORRUPT, "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length "
                           "(truncated?)", path, size);
    }
    int resident = (st->flags & PDB_ST_RESIDENT) != 0;
    if (resident) {
        uint64_t avail = pdb_proc_mem_available();
        if (!pdb_st_resident_fits(size, avail)) {
            PDB_WARN("safetensors: %s: %.1f GB does not fit in the %.1f GB of available memory with room to spare: "
                     "mapped instead of read into memory", path, size / 1e9, avail / 1e9);
            resident = 0;
        }
    }
    if (resident) {
        pdb_status rs = st_read_resident(f, fd, size);
        close(fd);
        if (rs) return rs;
    } else {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        int err = errno;
        if (st->flags & PDB_ST_KEEP_FD) f->fd = fd; /* closed by pdb_st_close */
        else close(fd);
        if (m == MAP_FAILED) return pdb_err_set(PDB_IO, "%s: mmap of %" PRIu64 " bytes: %s", path, size, strerror(err));
        f->map = m;
        f->map_len = (size_t)size;
    }

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > size - 8)
        return pdb_err_set(PDB_CORRUPT, "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64
                           " bytes; truncated or not a safetensors file?)", path, hlen, size);
    if (hlen > ST_MAX_HEADER)
        return pdb_err_set(PDB_TOO_LARGE, "%s: header length %" PRIu64 " exceeds the %llu-byte limit", path, hlen,
                           ST_MAX_HEADER);
    f->data = f->map + 8 + hlen;
    f->data_len = size - 8 - hlen;

    json_error_t je;
    f->header = json_loadb((const char *)f->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    /* jansson reports an allocation failure inside the parser as out_of_memory, or with no
     * position and no text at all; neither is the file's fault (a block store deletes CORRUPT files) */
    if (!f->header && (json_error_code(&je) == json_error_out_of_memory ||
                       (json_error_code(&je) == json_error_unknown && je.line < 0 && !je.text[0])))
        return pdb_err_set(PDB_NOMEM, "%s: out of memory parsing the JSON header", path);
    if (!f->header)
        return pdb_err_set(PDB_CORRUPT, "%s: invalid JSON header at line %d column %d: %s", path, je.line,
                           je.column, je.text);
    if (!json_is_object(f->header))
        return pdb_err_set(PDB_CORRUPT, "%s: JSON header is not an object", path);

    const char *key;
    json_t *val;
    json_object_foreach(f->header, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            PDB_TRY(st_parse_meta(f, val));
        else
            PDB_TRY(st_parse_tensor(st, f, key, val));
    }
    if (st->nfiles == 1) st->meta = json_object_get(f->header, "__metadata__");
    return PDB_OK;
}

static pdb_status st_build_index(pdb_st *st) {
    for (int64_t i = 0; i < st->ntensors; i++) {
        int64_t j = ni_find(&st->index, st->tensors[i].name, view_name_at, st);
        if (j >= 0)
            return pdb_err_set(PDB_CORRUPT, "tensor '%s' appears twice: in %s and in %s", st->tensors[i].name,
                               st->tensors[j].file, st->tensors[i].file);
        PDB_TRY(ni_add(&st->index, i, view_name_at, st));
    }
    return PDB_OK;
}

/* Read a whole small file (the index) into a malloc'd buffer. */
static pdb_status read_small_file(const char *path, char **out, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return pdb_err_set(err == ENOENT ? PDB_NOT_FOUND : PDB_IO, "%s: cannot open: %s", path, strerror(err));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pdb_err_set(PDB_IO, "%s: not a readable regular file", path);
    }
    if (sb.st_size > ST_MAX_INDEX) {
        close(fd);
        return pdb_err_set(PDB_TOO_LARGE, "%s: %lld bytes exceeds the %lld-byte limit", path,
                           (long long)sb.st_size, ST_MAX_INDEX);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int err = r < 0 ? errno : 0;
            free(buf);
            close(fd);
            return pdb_err_set(PDB_IO, "%s: read: %s", path, err ? strerror(err) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return PDB_OK;
}

static pdb_status st_open_index(pdb_st *st, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    PDB_TRY(read_small_file(index_path, &text, &len));
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return pdb_err_set(PDB_CORRUPT, "%s: invalid JSON at line %d column %d: %s", index_path, je.line, je.column,
                           je.text);
    pdb_status rc = PDB_OK;
    json_t *wm = json_object_get(root, "weight_map");
    char *dir = str_dup(index_path);
    const char **shards = NULL;
    int nshards = 0;
    if (!dir) {
        rc = pdb_err_set(PDB_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        strcpy(dir, "./");
    if (!json_is_object(root) || !json_is_object(wm)) {
        rc = pdb_err_set(PDB_CORRUPT, "%s: expected an object with a \"weight_map\" object", index_path);
        goto done;
    }
    size_t nmap = json_object_size(wm);
    shards = malloc((nmap ? nmap : 1) * sizeof *shards);
    if (!shards) {
        rc = pdb_err_set(PDB_NOMEM, "%s: out of memory", index_path);
        goto done;
    }
    const char *tname;
    json_t *jshard;
    json_object_foreach(wm, tname, jshard) { /* distinct shard names in order of first use */
        const char *s = json_string_value(jshard);
        if (!s || !s[0] || s[0] == '/' || strstr(s, "..")) {
            rc = pdb_err_set(PDB_CORRUPT, "%s: tensor '%s': shard must be a relative file name inside the directory",
                             index_path, tname);
            goto done;
        }
        int seen = 0;
        for (int i = nshards - 1; i >= 0 && !seen; i--) seen = strcmp(shards[i], s) == 0;
        if (seen) continue;
        shards[nshards++] = s;
        char *sp = path_join(dir, s);
        if (!sp) {
            rc = pdb_err_set(PDB_NOMEM, "%s: out of memory", index_path);
            goto done;
        }
        rc = st_add_file(st, sp);
        if (rc == PDB_NOT_FOUND)
            rc = pdb_err_set(PDB_NOT_FOUND, "%s: tensor '%s' maps to shard '%s', but %s does not exist", index_path,
                             tname, s, sp);
        free(sp);
        if (rc != PDB_OK) goto done;
    }
    if ((rc = st_build_index(st)) != PDB_OK) goto done;
    json_object_foreach(wm, tname, jshard) { /* every listed tensor is in the shard named */
        const char *s = json_string_value(jshard);
        int64_t i = ni_find(&st->index, tname, view_name_at, st);
        if (i < 0 || !ends_with(st->tensors[i].file, s) ||
            strlen(st->tensors[i].file) != strlen(dir) + strlen(s)) {
            rc = pdb_err_set(PDB_CORRUPT, "%s: weight_map puts tensor '%s' in shard '%s', but %s", index_path, tname,
                             s, i < 0 ? "no shard holds it" : st->tensors[i].file);
            goto done;
        }
    }
done:
    free(shards);
    free(dir);
    json_decref(root);
    return rc;
}

static pdb_status st_open_dir(pdb_st *st, const char *dir) {
    struct stat sb;
    char *p = path_join(dir, "model.safetensors.index.json");
    if (!p) return pdb_err_set(PDB_NOMEM, "%s: out of memory", dir);
    if (stat(p, &sb) == 0) {
        pdb_status rc = st_open_index(st, p);
        free(p);
        return rc;
    }
    free(p);
    p = path_join(dir, "model.safetensors");
    if (!p) return pdb_err_set(PDB_NOMEM, "%s: out of memory", dir);
    if (stat(p, &sb) == 0) {
        pdb_status rc = st_add_file(st, p);
        free(p);
        return rc == PDB_OK ? st_build_index(st) : rc;
    }
    free(p);
    DIR *d = opendir(dir);
    if (!d) return pdb_err_set(PDB_IO, "%s: opendir: %s", dir, strerror(errno));
    char *only = NULL;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!ends_with(de->d_name, ".safetensors") || de->d_name[0] == '.') continue;
        if (++count == 1) only = str_dup(de->d_name);
    }
    closedir(d);
    if (count == 0)
        return pdb_err_set(PDB_NOT_FOUND, "%s: no model.safetensors.index.json, model.safetensors or *.safetensors "
                           "file in the directory", dir);
    if (!only) return pdb_err_set(PDB_NOMEM, "%s: out of memory", dir);
    if (count > 1) {
        free(only);
        return pdb_err_set(PDB_INVALID, "%s: %d *.safetensors files but no model.safetensors.index.json to "
                           "say which tensors each holds", dir, count);
    }
    p = path_join(dir, only);
    free(only);
    if (!p) return pdb_err_set(PDB_NOMEM, "%s: out of memory", dir);
    pdb_status rc = st_add_file(st, p);
    free(p);
    return rc == PDB_OK ? st_build_index(st) : rc;
}

pdb_status pdb_st_open(const char *path, pdb_st **out) { return pdb_st_open_flags(path, 0, out); }

pdb_status pdb_st_open_flags(const char *path, int flags, pdb_st **out) {
    PDB_ASSERT(path && out, "pdb_st_open: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int err = errno;
        return pdb_err_set(err == ENOENT ? PDB_NOT_FOUND : PDB_IO, "%s: %s", path, strerror(err));
    }
    pdb_st *st = calloc(1, sizeof *st);
    if (!st) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    st->root = str_dup(path);
    st->flags = flags;
    pdb_status rc;
    if (!st->root)
        rc = pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    else if (S_ISDIR(sb.st_mode))
        rc = st_open_dir(st, path);
    else if (ends_with(path, ".index.json"))
        rc = st_open_index(st, path);
    else if ((rc = st_add_file(st, path)) == PDB_OK)
        rc = st_build_index(st);
    if (rc != PDB_OK) {
        pdb_st_close(st);
        return rc;
    }
    PDB_DEBUG("safetensors: %s: %" PRId64 " tensors in %d file(s)", path, st->ntensors, st->nfiles);
    *out = st;
    return PDB_OK;
}

void pdb_st_close(pdb_st *st) {
    if (!st) return;
    for (int i = 0; i < st->nfiles; i++) {
        st_file *f = &st->files[i];
        if (f->map) munmap((void *)f->map, f->map_len);
        if (f->fd >= 0) close(f->fd);
        json_decref(f->header);
        free(f->path);
    }
    free(st->files);
    free(st->tensors);
    free(st->index.slots);
    free(st->root);
    free(st);
}

pdb_status pdb_st_locate(const pdb_st *st, const pdb_tensor_view *v, int *fd, uint64_t *offset) {
    for (int i = 0; st && v && i < st->nfiles; i++) {
        const st_file *f = &st->files[i];
        const uint8_t *d = v->data;
        if (f->map && d >= f->map && d + v->nbytes <= f->map + f->map_len) {
            *fd = f->fd;
            *offset = (uint64_t)(d - f->map);
            return PDB_OK;
        }
    }
    return pdb_err_set(PDB_INVALID, "safetensors: tensor %s is in none of the open files", v && v->name ? v->name : "?");
}

int64_t pdb_st_count(const pdb_st *st) { return st ? st->ntensors : 0; }

const pdb_tensor_view *pdb_st_at(const pdb_st *st, int64_t i) {
    if (!st || i < 0 || i >= st->ntensors) return NULL;
    return &st->tensors[i];
}

const pdb_tensor_view *pdb_st_find(const pdb_st *st, const char *name) {
    if (!st || !name) return NULL;
    int64_t i = ni_find(&st->index, name, view_name_at, st);
    return i < 0 ? NULL : &st->tensors[i];
}

const char *pdb_st_meta(const pdb_st *st, const char *key) {
    if (!st || !st->meta || !key) return NULL;
    return json_string_value(json_object_get(st->meta, key));
}

pdb_status pdb_st_get(const pdb_st *st, const char *name, int ndim, const int64_t *shape,
                      const pdb_tensor_view **out) {
    PDB_ASSERT(st && name, "pdb_st_get: NULL argument");
    PDB_ASSERT(ndim >= 0 && ndim <= PDB_ST_MAX_DIMS && (ndim == 0 || shape), "pdb_st_get: bad expected shape");
    if (out) *out = NULL;
    const pdb_tensor_view *t = pdb_st_find(st, name);
    if (!t) return pdb_err_set(PDB_NOT_FOUND, "tensor '%s' not found in %s", name, st->root);
    int match = t->ndim == ndim;
    for (int i = 0; match && i < ndim; i++) match = shape[i] < 0 || shape[i] == t->shape[i];
    if (!match) {
        char want[160], have[160];
        return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s': shape %s (%s) but expected %s", t->file, name,
                           fmt_shape(have, sizeof have, t->ndim, t->shape), pdb_dtype_name(t->dtype),
                           fmt_shape(want, sizeof want, ndim, shape));
    }
    if (out) *out = t;
    return PDB_OK;
}

/* The FP8 block-scale companion of `name`: NAME_scale_inv, <NAME minus .weight>.scale, NAME.scale. */
static const pdb_tensor_view *st_find_scale(const pdb_st *st, const char *name) {
    size_t n = strlen(name);
    char *buf = malloc(n + 16);
    if (!buf) return NULL;
    const pdb_tensor_view *s;
    snprintf(buf, n + 16, "%s_scale_inv", name);
    s = pdb_st_find(st, buf);
    if (!s && ends_with(name, ".weight")) {
        snprintf(buf, n + 16, "%.*s.scale", (int)(n - 7), name);
        s = pdb_st_find(st, buf);
    }
    if (!s) {
        snprintf(buf, n + 16, "%s.scale", name);
        s = pdb_st_find(st, buf);
    }
    free(buf);
    return s;
}

static pdb_status st_dequant_fp8(const pdb_tensor_view *t, const pdb_tensor_view *s, float *out) {
    char ts[160], ss[160];
    if (s->dtype != PDB_DT_F32 && s->dtype != PDB_DT_BF16 && s->dtype != PDB_DT_F8_E8M0)
        return pdb_err_set(PDB_UNSUPPORTED, "%s: tensor '%s': scale dtype %s (want F32, BF16 or F8_E8M0)", s->file,
                           s->name, pdb_dtype_name(s->dtype));
    int ok = t->ndim >= 2 && s->ndim == t->ndim;
    int64_t rows = t->ndim >= 2 ? t->shape[t->ndim - 2] : 0, cols = t->ndim >= 2 ? t->shape[t->ndim - 1] : 0;
    for (int i = 0; ok && i < t->ndim - 2; i++) ok = s->shape[i] == t->shape[i];
    ok = ok && s->shape[t->ndim - 2] == (rows + 127) / 128 && s->shape[t->ndim - 1] == (cols + 127) / 128;
    if (!ok)
        return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s': scale shape %s does not match weight '%s' shape %s "
                           "(want one scale per 128x128 block)", s->file, s->name,
                           fmt_shape(ss, sizeof ss, s->ndim, s->shape), t->name,
                           fmt_shape(ts, sizeof ts, t->ndim, t->shape));
    float *scale = malloc((size_t)(s->numel ? s->numel : 1) * sizeof *scale);
    if (!scale) return pdb_err_set(PDB_NOMEM, "%s: tensor '%s': out of memory", s->file, s->name);
    pdb_status rc = pdb_dtype_to_f32(s->dtype, s->data, s->numel, scale);
    if (rc == PDB_OK) {
        int64_t batch = rows > 0 && cols > 0 ? t->numel / (rows * cols) : 0, sper = s->numel / (batch ? batch : 1);
        for (int64_t b = 0; b < batch; b++)
            pdb_dequant_fp8_block((const uint8_t *)t->data + b * rows * cols, scale + b * sper, rows, cols,
                                  out + b * rows * cols);
    }
    free(scale);
    return rc;
}

pdb_status pdb_st_get_mx(const pdb_st *st, const char *name, int64_t rows, int64_t cols, const pdb_tensor_view **q,
                         const pdb_tensor_view **scales, int *fp4) {
    PDB_ASSERT(st && name && q && scales && fp4, "pdb_st_get_mx: NULL argument");
    *q = *scales = NULL;
    *fp4 = 0;
    size_t n = strlen(name);
    char *sname = malloc(n + 16);
    if (!sname) return pdb_err_set(PDB_NOMEM, "tensor '%s': out of memory", name);
    snprintf(sname, n + 16, "%s_mx_scale", name);
    const pdb_tensor_view *sc = pdb_st_find(st, sname), *v = pdb_st_find(st, name);
    free(sname);
    if (!sc && v && (v->dtype == PDB_DT_I8 || v->dtype == PDB_DT_U8) && v->ndim == 2) {
        /* DeepSeek's packed FP4: a per-32 e8m0 companion under the FP8 scale names */
        const pdb_tensor_view *ds = st_find_scale(st, name);
        if (ds && ds->ndim == 2 && ds->shape[0] == v->shape[0] && ds->shape[1] * 16 == v->shape[1] &&
            (ds->dtype == PDB_DT_F8_E8M0 || ds->dtype == PDB_DT_U8))
            sc = ds;
    }
    if (!sc) return PDB_OK;
    if (!v) return pdb_err_set(PDB_NOT_FOUND, "%s: tensor '%s_mx_scale' without its weight '%s'", sc->file, name, name);
    int mx4 = v->dtype == PDB_DT_U8 || v->dtype == PDB_DT_I8;
    if (v->ndim == 2) {
        if (rows < 0) rows = v->shape[0];
        if (cols < 0) cols = mx4 ? 2 * v->shape[1] : v->shape[1];
    }
    if ((!mx4 && v->dtype != PDB_DT_F8_E4M3) || v->ndim != 2 || v->shape[0] != rows ||
        v->shape[1] != (mx4 ? cols / 2 : cols) || cols % 32 || sc->ndim != 2 || sc->shape[0] != rows ||
        sc->shape[1] != cols / 32 || (sc->dtype != PDB_DT_F8_E8M0 && sc->dtype != PDB_DT_U8))
        return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s' is not an MX weight of shape [%lld, %lld]", v->file, name,
                           (long long)rows, (long long)cols);
    *q = v;
    *scales = sc;
    *fp4 = mx4;
    return PDB_OK;
}

/* An MX weight (pdb_st_get_mx) into f32, exactly (every MX value is an f32). */
static pdb_status st_load_mx(const pdb_st *st, const char *name, int ndim, const int64_t *shape, float **out, int *found) {
    const pdb_tensor_view *q, *sc;
    int fp4;
    *found = 0;
    if (!pdb_st_find(st, name)) return PDB_OK; /* pdb_st_get reports it */
    PDB_TRY(pdb_st_get_mx(st, name, ndim == 2 ? shape[0] : -1, ndim == 2 ? shape[1] : -1, &q, &sc, &fp4));
    if (!q) return PDB_OK;
    *found = 1;
    if (ndim != 2) return pdb_err_set(PDB_MISMATCH, "%s: tensor '%s' is an MX weight (2-d), expected %d dims", q->file, name, ndim);
    int64_t R = q->shape[0], C = fp4 ? 2 * q->shape[1] : q->shape[1];
    float *buf = malloc((size_t)(R * C > 0 ? R * C : 1) * sizeof *buf);
    if (!buf) return pdb_err_set(PDB_NOMEM, "%s: tensor '%s': out of memory for %lld floats", q->file, name, (long long)(R * C));
    const uint8_t *d = q->data, *s = sc->data;
    for (int64_t r = 0; r < R; r++) {
        if (fp4) pdb_dequant_mxfp4_row(d + r * C / 2, s + r * C / 32, C, buf + r * C);
        else pdb_dequant_mxfp8_row(d + r * C, s + r * C / 32, C, buf + r * C);
    }
    *out = buf;
    return PDB_OK;
}

pdb_status pdb_st_load_f32(const pdb_st *st, const char *name, int ndim, const int64_t *shape, float **out) {
    PDB_ASSERT(out, "pdb_st_load_f32: NULL out");
    *out = NULL;
    int mx = 0;
    PDB_TRY(st_load_mx(st, name, ndim, shape, out, &mx));
    if (mx) return PDB_OK;
    const pdb_tensor_view *t;
    PDB_TRY(pdb_st_get(st, name, ndim, shape, &t));
    switch (t->dtype) {
    case PDB_DT_F32: case PDB_DT_BF16: case PDB_DT_F16: case PDB_DT_F64: case PDB_DT_F8_E4M3: case PDB_DT_F8_E8M0:
        break;
    default:
        return pdb_err_set(PDB_UNSUPPORTED, "%s: tensor '%s': dtype %s is not a float type", t->file, name,
                           pdb_dtype_name(t->dtype));
    }
    float *buf = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *buf);
    if (!buf)
        return pdb_err_set(PDB_NOMEM, "%s: tensor '%s': out of memory for %" PRId64 " floats", t->file, name, t->numel);
    const pdb_tensor_view *s = t->dtype == PDB_DT_F8_E4M3 ? st_find_scale(st, name) : NULL;
    pdb_status rc = s ? st_dequant_fp8(t, s, buf) : pdb_dtype_to_f32(t->dtype, t->data, t->numel, buf);
    if (rc != PDB_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return PDB_OK;
}

/* ---- writer ----------------------------------------------------------------------------- */

typedef struct st_wtensor {
    char *name;
    pdb_dtype dtype;
    int ndim;
    int64_t shape[PDB_ST_MAX_DIMS];
    const void *data; /* [nbytes], the caller's; NULL for a fill tensor */
    uint64_t nbytes;
    pdb_st_fill_fn fill; /* NULL: data holds the bytes */
    void *fill_ctx;
} st_wtensor;

struct pdb_st_writer {
    st_wtensor *t;
    int64_t n, cap;
    name_index index;
    json_t *meta; /* insertion-ordered object of strings */
};

static const char *wt_name_at(const void *ctx, int64_t i) { return ((const pdb_st_writer *)ctx)->t[i].name; }

pdb_status pdb_st_writer_init(pdb_st_writer **out) {
    PDB_ASSERT(out, "pdb_st_writer_init: NULL out");
    *out = calloc(1, sizeof **out);
    if (!*out) return pdb_err_set(PDB_NOMEM, "safetensors writer: out of memory");
    return PDB_OK;
}

pdb_status pdb_st_writer_meta(pdb_st_writer *w, const char *key, const char *value) {
    PDB_ASSERT(w && key && value, "pdb_st_writer_meta: NULL argument");
    if (!w->meta && !(w->meta = json_object())) return pdb_err_set(PDB_NOMEM, "safetensors writer: out of memory");
    json_t *v = json_string(value);
    if (!v) return pdb_err_set(PDB_INVALID, "safetensors writer: metadata '%s': value is not valid UTF-8", key);
    if (json_object_set_new(w->meta, key, v) != 0)
        return pdb_err_set(PDB_INVALID, "safetensors writer: metadata key '%s' is not valid UTF-8", key);
    return PDB_OK;
}

static pdb_status st_writer_add(pdb_st_writer *w, const char *name, pdb_dtype dt, int ndim, const int64_t *shape,
                                const void *data, pdb_st_fill_fn fill, void *fill_ctx) {
    PDB_ASSERT(w && name, "pdb_st_writer_add: NULL argument");
    if (strcmp(name, "__metadata__") == 0)
        return pdb_err_set(PDB_INVALID, "safetensors writer: '__metadata__' is reserved, not a tensor name");
    if (pdb_dtype_size(dt) == 0)
        return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': bad dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > PDB_ST_MAX_DIMS || (ndim > 0 && !shape))
        return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': bad ndim %d", name, ndim);
    if (ni_find(&w->index, name, wt_name_at, w) >= 0)
        return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s' added twice", name);
    st_wtensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    t.data = data;
    t.fill = fill;
    t.fill_ctx = fill_ctx;
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': negative dim %" PRId64, name, shape[i]);
        t.shape[i] = shape[i];
        if (__builtin_mul_overflow(numel, (uint64_t)shape[i], &numel))
            return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': element count overflows", name);
    }
    if (__builtin_mul_overflow(numel, (uint64_t)pdb_dtype_size(dt), &t.nbytes) || t.nbytes > (uint64_t)INT64_MAX)
        return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': byte size overflows", name);
    if (t.nbytes && !data && !fill)
        return pdb_err_set(PDB_INVALID, "safetensors writer: tensor '%s': NULL data", name);
    if (w->n == w->cap) {
        int64_t cap = w->cap ? w->cap * 2 : 64;
        st_wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) return pdb_err_set(PDB_NOMEM, "safetensors writer: out of memory");
        w->t = nt;
        w->cap = cap;
    }
    if (!(t.name = str_dup(name))) return pdb_err_set(PDB_NOMEM, "safetensors writer: out of memory");
    w->t[w->n] = t;
    pdb_status rc = ni_add(&w->index, w->n, wt_name_at, w);
    if (rc != PDB_OK) {
        free(t.name);
        return rc;
    }
    w->n++;
    return PDB_OK;
}

pdb_status pdb_st_writer_add(pdb_st_writer *w, const char *name, pdb_dtype dt, int ndim, const int64_t *shape,
                             const void *data) {
    return st_writer_add(w, name, dt, ndim, shape, data, NULL, NULL);
}

pdb_status pdb_st_writer_add_fill(pdb_st_writer *w, const char *name, pdb_dtype dt, int ndim, const int64_t *shape,
                                  pdb_st_fill_fn fill, void *ctx) {
    PDB_ASSERT(fill, "pdb_st_writer_add_fill: NULL fill");
    return st_writer_add(w, name, dt, ndim, shape, NULL, fill, ctx);
}

static pdb_status write_all(int fd, const void *buf, uint64_t n, const char *path) {
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t r = write(fd, p, chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return pdb_err_set(PDB_IO, "%s: write: %s", path, r < 0 ? strerror(errno) : "wrote 0 bytes");
        p += r;
        n -= (uint64_t)r;
    }
    return PDB_OK;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes. */
static pdb_status st_build_header(const pdb_st_writer *w, const char *path, char **out, uint64_t *len) {
    json_t *root = json_object();
    if (!root) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    pdb_status rc = PDB_OK;
    if (w->meta && json_object_size(w->meta) > 0 && json_object_set(root, "__metadata__", w->meta) != 0)
        rc = pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    uint64_t off = 0;
    for (int64_t i = 0; rc == PDB_OK && i < w->n; i++) {
        const st_wtensor *t = &w->t[i];
        json_t *shape = json_array(), *offs = json_array(), *o = json_object();
        int bad = !shape || !offs || !o;
        for (int d = 0; !bad && d < t->ndim; d++) bad = json_array_append_new(shape, json_integer(t->shape[d])) != 0;
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) != 0 ||
              json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes))) != 0 ||
              json_object_set_new(o, "dtype", json_string(pdb_dtype_name(t->dtype))) != 0;
        bad = bad || json_object_set(o, "shape", shape) != 0 || json_object_set(o, "data_offsets", offs) != 0;
        json_decref(shape);
        json_decref(offs);
        if (bad) {
            json_decref(o);
            rc = pdb_err_set(PDB_NOMEM, "%s: out of memory building the header", path);
        } else if (json_object_set_new(root, t->name, o) != 0) {
            rc = pdb_err_set(PDB_INVALID, "%s: tensor '%s': name is not valid UTF-8", path, t->name);
        }
        if (off + t->nbytes < off || off + t->nbytes > (uint64_t)INT64_MAX)
            rc = pdb_err_set(PDB_TOO_LARGE, "%s: total tensor bytes overflow", path);
        off += t->nbytes;
    }
    char *text = rc == PDB_OK ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (rc != PDB_OK) return rc;
    if (!text) return pdb_err_set(PDB_NOMEM, "%s: out of memory serializing the header", path);
    size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
    char *buf = realloc(text, padded + 1);
    if (!buf) {
        free(text);
        return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    }
    memset(buf + n, ' ', padded - n);
    buf[padded] = 0;
    if (padded > ST_MAX_HEADER) {
        free(buf);
        return pdb_err_set(PDB_TOO_LARGE, "%s: header of %zu bytes exceeds the %llu-byte limit", path, padded,
                           ST_MAX_HEADER);
    }
    *out = buf;
    *len = padded;
    return PDB_OK;
}

static pdb_status fsync_parent_dir(const char *path) {
    char *dir = str_dup(path);
    if (!dir) return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        strcpy(dir, ".");
    pdb_status rc = PDB_OK;
    int fd = open(dir, O_RDONLY | pdb_sys_o_directory() | O_CLOEXEC);
    if (fd < 0)
        rc = pdb_err_set(PDB_IO, "%s: open directory %s for fsync: %s", path, dir, strerror(errno));
    else {
        if (fsync(fd) != 0 && errno != EINVAL) /* some filesystems cannot fsync directories */
            rc = pdb_err_set(PDB_IO, "%s: fsync directory %s: %s", path, dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return rc;
}

pdb_status pdb_st_writer_finish(pdb_st_writer *w, const char *path) {
    PDB_ASSERT(w && path, "pdb_st_writer_finish: NULL argument");
    static atomic_uint seq;
    char *header = NULL;
    uint64_t hlen = 0;
    PDB_TRY(st_build_header(w, path, &header, &hlen));
    size_t tlen = strlen(path) + 48;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(header);
        return pdb_err_set(PDB_NOMEM, "%s: out of memory", path);
    }
    /* pid + a per-process counter: concurrent writers of one path never share a temp file */
    snprintf(tmp, tlen, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1u));
    pdb_status rc = PDB_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = pdb_err_set(PDB_IO, "%s: create temp file %s: %s", path, tmp, strerror(errno));
        free(header);
        free(tmp);
        return rc;
    }
    uint8_t lenb[8];
    pdb_put_le64(lenb, hlen);
    rc = write_all(fd, lenb, 8, path);
    if (rc == PDB_OK) rc = write_all(fd, header, hlen, path);
    for (int64_t i = 0; rc == PDB_OK && i < w->n; i++) {
        const st_wtensor *t = &w->t[i];
        if (!t->fill) {
            rc = write_all(fd, t->data, t->nbytes, path);
            continue;
        }
        void *buf = malloc(t->nbytes ? (size_t)t->nbytes : 1);
        if (!buf) rc = pdb_err_set(PDB_NOMEM, "%s: tensor '%s': out of memory for %llu bytes", path, t->name,
                                   (unsigned long long)t->nbytes);
        else if ((rc = t->fill(t->fill_ctx, buf, t->nbytes)) == PDB_OK) rc = write_all(fd, buf, t->nbytes, path);
        free(buf);
    }
    if (rc == PDB_OK && fsync(fd) != 0) rc = pdb_err_set(PDB_IO, "%s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == PDB_OK) rc = pdb_err_set(PDB_IO, "%s: close: %s", path, strerror(errno));
    if (rc == PDB_OK && rename(tmp, path) != 0)
        rc = pdb_err_set(PDB_IO, "%s: rename from %s: %s", path, tmp, strerror(errno));
    if (rc != PDB_OK)
        unlink(tmp);
    else
        rc = fsync_parent_dir(path);
    free(header);
    free(tmp);
    return rc;
}

void pdb_st_writer_free(pdb_st_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w->index.slots);
    json_decref(w->meta);
    free(w);
}
