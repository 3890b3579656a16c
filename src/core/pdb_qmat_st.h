/* pdb_qmat_st: weight matrices of a safetensors checkpoint as pdb_qmat views of their stored
 * bytes (the decoders' loaders, V2 and V4, and quantize share it). A tensor becomes:
 *   MX (`quantize --scheme mx`: NAME + NAME_mx_scale; DeepSeek's FP4 experts)  MXFP8 / MXFP4 in place;
 *   FP8 e4m3 with one e8m0 scale per 128x128 block (DeepSeek's layout; F32/BF16 scales that are
 *     exact powers of two too) and cols % 32 == 0                             MXFP8: the codes in
 *     place, each block's scale repeated for its 32-wide groups (owned [rows, cols/32]: lossless);
 *   BF16, and F32 at a 4-byte aligned address                                    in place;
 *   anything else (F16, F64, other FP8)                                          an owned f32 copy.
 * Invariants: every element of the qmat is exactly the value pdb_st_load_f32 gives for the tensor
 * (so a product is the same whatever the stored format: pdb_qmat's contract); views stay valid
 * while the reader is open; buffers made here are pushed onto `owned` (freed by its owner). */
#ifndef PDB_QMAT_ST_H
#define PDB_QMAT_ST_H

#include <stdint.h>

#include "pdb_ptrs.h"
#include "pdb_qmat.h"
#include "pdb_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor `name` of shape shape[0..nd) (the matrix is [prod(shape[0..nd-1)), shape[nd-1]]; MX and
 * block FP8 only for nd == 2) as a qmat; the error names the tensor and the file. *bytes (may be
 * NULL) gets the bytes the qmat reads: its data and scales (owned or viewed). */
pdb_status pdb_qmat_st_load(const pdb_st *st, const char *name, int nd, const int64_t *shape, pdb_ptrs *owned,
                            pdb_qmat *q, int64_t *bytes);
/* DeepSeek's block FP8 as MXFP8 scales: 1 and the [R, C/32] e8m0 scales (malloc'd) when v is e4m3
 * [R, C], C % 32 == 0, with a 128x128 block scale companion (NAME_scale_inv, <NAME minus
 * .weight>.scale or NAME.scale; F8_E8M0, or F32/BF16 holding only powers of two 2^-127..2^127);
 * 0 otherwise (also when out of memory: the caller then takes the f32 route). */
int pdb_qmat_st_fp8_scales(const pdb_st *st, const pdb_tensor_view *v, uint8_t **out);
/* The bytes a qmat reads (data + scales). */
int64_t pdb_qmat_st_bytes(const pdb_qmat *q);

#ifdef __cplusplus
}
#endif

#endif
