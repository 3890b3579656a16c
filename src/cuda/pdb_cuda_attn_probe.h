/* pdb_cuda_attn_probe: runs the bf16 engine's MHA-form attention kernel alone on seeded
 * pseudo-random inputs, once per tile configuration (warps per block), timing
 * each with CUDA events and comparing each configuration's output with the first one's bit for
 * bit. For the attention benchmark (bench/cuda_attn_bench.c) and the kernel's test.
 * Invariants: the inputs are a pure function of (seed, tensor, index), pdb_cuda_probe_value,
 * computable on the host as on the device, so a test can recompute any output row; the prompt
 * runs as the engine runs it: passes of `chunk` query tokens at positions 0, chunk, ..., each
 * attending to every key before it; nothing here exits. */
#ifndef PDB_CUDA_ATTN_PROBE_H
#define PDB_CUDA_ATTN_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>

#include "pdb_status.h"

typedef struct pdb_cuda_attn_probe_opts {
    int64_t tokens, chunk;  /* the prompt and the engine's pass size (0 = 8192) */
    int64_t heads, nope, rope, dv; /* per head: q/k = nope + rope, v = dv (V2-Lite: 16, 128, 64, 128) */
    float scale;            /* softmax scale (0 = 1 / sqrt(nope + rope)) */
    uint64_t seed;
    int reps;               /* timed repetitions of the whole prompt after one untimed (0 = 3) */
    float *out_first;       /* optional host [tokens, heads, dv]: the first configuration's output */
} pdb_cuda_attn_probe_opts;

enum { PDB_CUDA_ATTN_PROBE_PINGPONG = 0x1000 }; /* = PDB_CUDA_MHA_WG_PINGPONG (pdb_cuda_kernels.h, C++ only) */

typedef struct pdb_cuda_attn_probe_row {
    int warps;         /* in: the tile configuration (pdb_cuda_attention_mha_tiles), 0: the warpgroup form
                          (pdb_cuda_attention_mha_wg) */
    int keys;          /* in: the warpgroup form's key tile (64 or 128; 0 = 64), | PDB_CUDA_ATTN_PROBE_PINGPONG: the
                          warpgroups take turns on the tensor cores */
    double ms;         /* out: best time of one whole prompt (every pass) */
    double tflops;     /* out: the causal scores' and values' FLOPs / ms */
    int64_t differing; /* out: output elements whose bits differ from the first configuration's */
} pdb_cuda_attn_probe_row;

#ifdef __CUDACC__
#define PDB_PROBE_FN static __host__ __device__ inline
#else
#define PDB_PROBE_FN static inline
#endif
/* The value of element i of tensor `which` (0 = Q, 1 = K, 2 = V), in bf16 bits: a hash of (seed,
 * which, i) (splitmix64's finaliser) mapped to [-2, 2) for Q and [-1, 1) for K and V, rounded to
 * bf16 (nearest even). */
PDB_PROBE_FN uint16_t pdb_cuda_probe_value(uint64_t seed, int which, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)which * 0xD1B54A32D192ED03ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; /* [-1, 1): 24 bits, exact in f32 */
    if (which == 0) u *= 2.0f;
    union { float f; uint32_t b; } v = {u};
    return (uint16_t)((v.b + 0x7FFFu + ((v.b >> 16) & 1u)) >> 16);
}
/* Q is [heads, chunk, dqp] (dqp = nope + rope rounded up to 16, zero padded) and holds the same
 * values for every pass; K [heads, tokens, dqp], V [heads, tokens, dv]: element (h, p, d) of K is
 * pdb_cuda_probe_value(seed, 1, (h * tokens + p) * dqp + d) for d < nope + rope, 0 past it. */
pdb_status pdb_cuda_attn_probe_run(const pdb_cuda_attn_probe_opts *o, pdb_cuda_attn_probe_row *rows, int nrows);
/* 1 when o's shape runs the warpgroup form (a row of warps 0) on this device. */
int pdb_cuda_attn_probe_wg_fits(const pdb_cuda_attn_probe_opts *o);

#ifdef __cplusplus
}
#endif

#endif
