/* pdb_block_compare: tensor-by-tensor comparison of prefix-cache block files (or any two
 * safetensors files) and of raw value arrays, for the exactness tools (verify-blocks,
 * diff-state, pool-validate). Invariants: "identical" means byte-identical tensor data with
 * equal dtype and shape (never a file hash: created_at differs between two writes of one
 * block); metadata is compared only when asked (strict); a distance in ulps is the number of
 * representable values of the tensor's dtype between the two values (so +0/-0 differ in bytes
 * at 0 ulps, and a NaN against anything else is an infinite distance); for F32 the distance is
 * also given in bf16 ulps (f32 ulps / 65536, the unit the CUDA tolerance is stated in). */
#ifndef PDB_BLOCK_COMPARE_H
#define PDB_BLOCK_COMPARE_H

#include <stdint.h>

#include "pdb_dtype.h"
#include "pdb_status.h"

/* What a value comparison found. Zero-initialise before the first accumulate. */
typedef struct pdb_block_cmp_stats {
    int64_t n;               /* elements compared */
    int64_t n_diff;          /* elements whose bytes differ */
    double worst_ulps;       /* largest distance in ulps of the dtype (integers: units); INFINITY for NaN vs non-NaN */
    double worst_bf16_ulps;  /* F32: worst_ulps / 65536; other dtypes: 0 */
    int64_t n_beyond_bf16;   /* F32: elements more than 1 bf16 ulp (65536 f32 ulps) apart; other dtypes: 0 */
    double worst_abs;        /* largest |a - b| (as f64; 0 for non-float dtypes of equal value) */
    double worst_rel;        /* largest |a - b| / max(|a|, |b|) over differing elements */
} pdb_block_cmp_stats;

/* Compare n elements of dtype dt at a and b (unaligned allowed), accumulating into *st (the
 * caller zeroes it once; several arrays can be accumulated). PDB_UNSUPPORTED for dtypes
 * without a defined ulp (none today: every pdb_dtype is handled). */
pdb_status pdb_block_compare_values(pdb_dtype dt, const void *a, const void *b, int64_t n, pdb_block_cmp_stats *st);
/* Merge src into dst (sums counts, keeps the worst distances). */
void pdb_block_compare_merge_stats(pdb_block_cmp_stats *dst, const pdb_block_cmp_stats *src);

/* Append-only: how one tensor compared. */
typedef enum pdb_block_cmp_kind {
    PDB_BLOCK_CMP_SAME = 0,    /* dtype, shape and bytes equal */
    PDB_BLOCK_CMP_VALUES,      /* dtype and shape equal, some elements differ (stats says how) */
    PDB_BLOCK_CMP_DTYPE,       /* dtypes differ */
    PDB_BLOCK_CMP_SHAPE,       /* shapes differ */
    PDB_BLOCK_CMP_ONLY_A,      /* tensor present in A only */
    PDB_BLOCK_CMP_ONLY_B,      /* tensor present in B only */
} pdb_block_cmp_kind;

const char *pdb_block_compare_kind_str(pdb_block_cmp_kind k);

typedef struct pdb_block_cmp_tensor {
    char name[128];
    pdb_block_cmp_kind kind;
    pdb_dtype dtype_a, dtype_b;
    pdb_block_cmp_stats stats;     /* PDB_BLOCK_CMP_SAME / PDB_BLOCK_CMP_VALUES */
} pdb_block_cmp_tensor;

/* The comparison of two files. */
typedef struct pdb_block_cmp_report {
    int identical;           /* every tensor SAME and (strict) every metadata value equal */
    int n_tensors;           /* union of the two files' tensor names */
    pdb_block_cmp_tensor *tensors; /* [n_tensors], A's order then B-only names */
    int n_meta_diff;         /* strict: metadata keys missing on one side or with different values */
    char first_meta_diff[128]; /* strict: the first such key ("" when none) */
    pdb_block_cmp_stats total;     /* all VALUES/SAME tensors merged */
} pdb_block_cmp_report;

/* Compare two safetensors files (block files) tensor by tensor; strict_meta != 0 also compares
 * every __metadata__ key, created_at included. Fails (PDB_NOT_FOUND / PDB_IO / PDB_CORRUPT,
 * message naming the file) only when a file cannot be read or parsed; differences are results,
 * not errors. Free the report with pdb_block_compare_free_report. */
pdb_status pdb_block_compare_files(const char *path_a, const char *path_b, int strict_meta, pdb_block_cmp_report *out);
void pdb_block_compare_free_report(pdb_block_cmp_report *r);

#endif
