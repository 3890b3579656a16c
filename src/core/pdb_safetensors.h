/* pdb_safetensors: mmap reader (single file, or sharded through model.safetensors.index.json)
 * and writer of the safetensors format.
 * Format (byte by byte): u64 little-endian N = header length; N bytes of UTF-8 JSON
 * {"__metadata__": {str: str}, NAME: {"dtype": "BF16", "shape": [d0, ...],
 *  "data_offsets": [begin, end]}, ...}; then the data area; offsets are relative to the data
 * area start (8 + N), end - begin == prod(shape) * dtype size.
 * Reader invariants: the header is fully validated at open (JSON, dtypes, shapes, offsets
 * inside the file, no overflow, sizes consistent); a tensor view is valid while the reader is
 * open; failures name the file and the tensor. */
#ifndef PDB_SAFETENSORS_H
#define PDB_SAFETENSORS_H

#include <stdint.h>

#include "pdb_dtype.h"
#include "pdb_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PDB_ST_MAX_DIMS 8

typedef struct pdb_tensor_view {
    const char *name;            /* owned by the reader */
    pdb_dtype dtype;
    int ndim;
    int64_t shape[PDB_ST_MAX_DIMS];
    int64_t numel;
    const void *data;            /* mmap'd, read-only */
    uint64_t nbytes;
    const char *file;            /* path of the file holding it */
} pdb_tensor_view;

typedef struct pdb_st pdb_st; /* a set of one or more mapped files */

/* path: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (+ shards). */
pdb_status pdb_st_open(const char *path, pdb_st **out);
/* flags: PDB_ST_RESIDENT reads every file into anonymous memory advised for transparent huge
 * pages instead of mapping it (the decoder's weights: no page-cache faults, and a 2 MB page
 * spans 512 of a streamed matrix's 4 KB TLB entries); the views' bytes are the same. */
enum { PDB_ST_RESIDENT = 1, PDB_ST_KEEP_FD = 2 };
/* PDB_ST_KEEP_FD: a mapped file's descriptor stays open until pdb_st_close, so its bytes can also
 * be read with pread (into a caller's buffer, no page faults) from the very inode that was mapped. */
pdb_status pdb_st_open_flags(const char *path, int flags, pdb_st **out);
/* Where a view's bytes are: the descriptor of its file (-1 unless opened with PDB_ST_KEEP_FD, or
 * read resident) and their byte offset in it. PDB_INVALID when v is no view of st's files. */
pdb_status pdb_st_locate(const pdb_st *st, const pdb_tensor_view *v, int *fd, uint64_t *offset);
/* Whether a file of file_bytes is read resident when available_bytes of memory are free
 * (MemAvailable): it must leave an eighth of them and 1 GiB besides; a file that does not fit is
 * mapped instead, with a warning naming it (a resident copy would be killed for memory, where a
 * mapping pages). available_bytes 0: unknown, read resident. */
int pdb_st_resident_fits(uint64_t file_bytes, uint64_t available_bytes);
void pdb_st_close(pdb_st *st);

int64_t pdb_st_count(const pdb_st *st);
const pdb_tensor_view *pdb_st_at(const pdb_st *st, int64_t i);
const pdb_tensor_view *pdb_st_find(const pdb_st *st, const char *name); /* NULL if absent */
/* Metadata value from the (first) file's __metadata__, NULL if absent. */
const char *pdb_st_meta(const pdb_st *st, const char *key);

/* Find a tensor and check its shape (any dtype); the error names
 * the tensor and the file. ndim/shape given by the caller; a -1 dim matches anything. */
pdb_status pdb_st_get(const pdb_st *st, const char *name, int ndim, const int64_t *shape,
                      const pdb_tensor_view **out);
/* An MX weight as `pdbridge quantize` writes it (docs/formats: "NAME" e4m3 [rows, cols] for MXFP8
 * or packed e2m1 U8 [rows, cols/2] for MXFP4, plus "NAME_mx_scale" e8m0 (or U8) [rows, cols/32]),
 * or as DeepSeek ships FP4 experts: "NAME" I8 or U8 [rows, cols/2] (two e2m1 per byte, element
 * 2i in the low nibble, as ours) with a NAME_scale_inv / <NAME minus .weight>.scale / NAME.scale
 * companion of e8m0 (or U8) [rows, cols/32] (one scale per 32 along the row).
 * *q = *scales = NULL and PDB_OK when NAME has neither companion (NAME is not an MX weight);
 * PDB_MISMATCH naming the tensor and the file when the pair is not an MX weight of [rows, cols]
 * (cols a multiple of 32). rows/cols < 0 take the stored size. *fp4: 1 for MXFP4. */
pdb_status pdb_st_get_mx(const pdb_st *st, const char *name, int64_t rows, int64_t cols, const pdb_tensor_view **q,
                         const pdb_tensor_view **scales, int *fp4);
/* Load a float tensor of any float dtype (F32/BF16/F16/F8_E4M3; FP8 with a companion
 * NAME_scale_inv or NAME.scale tensor is block-dequantized; an MX weight, pdb_st_get_mx, is
 * dequantized exactly row by row, ndim 2) into a new f32 buffer. */
pdb_status pdb_st_load_f32(const pdb_st *st, const char *name, int ndim, const int64_t *shape,
                           float **out /* malloc'd, numel floats */);

/* Writer: collects tensors (data pointers must stay valid until finish) then writes the
 * file to path.tmp, fsyncs and renames to path (atomic publish). */
typedef struct pdb_st_writer pdb_st_writer;
pdb_status pdb_st_writer_init(pdb_st_writer **out);
pdb_status pdb_st_writer_meta(pdb_st_writer *w, const char *key, const char *value);
pdb_status pdb_st_writer_add(pdb_st_writer *w, const char *name, pdb_dtype dt, int ndim,
                             const int64_t *shape, const void *data);
/* A tensor whose bytes are produced at finish, in add order, into a buffer of exactly its size
 * that is freed once written: a writer of fill tensors holds one tensor's bytes at a time. fill's
 * error aborts finish (no file is published). ctx must stay valid until finish. */
typedef pdb_status (*pdb_st_fill_fn)(void *ctx, void *dst, uint64_t nbytes);
pdb_status pdb_st_writer_add_fill(pdb_st_writer *w, const char *name, pdb_dtype dt, int ndim, const int64_t *shape,
                                  pdb_st_fill_fn fill, void *ctx);
pdb_status pdb_st_writer_finish(pdb_st_writer *w, const char *path);
void pdb_st_writer_free(pdb_st_writer *w);

#ifdef __cplusplus
}
#endif

#endif
