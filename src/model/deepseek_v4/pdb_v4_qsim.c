/* pdb_v4_qsim: FP8 / FP4 round-trips with power-of-two block scales and the Hadamard rotation
 * of DeepSeek-V4's official inference code. Invariant: deterministic, element order fixed. */
#include "pdb_v4_qsim.h"

#include <math.h>

#include "pdb_dtype.h"
#include "pdb_status.h"

float pdb_v4_qsim_pow2_ceil(float r) {
    int e;
    float m = frexpf(r, &e); /* r = m * 2^e, m in [0.5, 1) */
    if (m == 0.5f) e -= 1;
    return ldexpf(1.0f, e);
}

static void round_trip(float *x, int64_t n, int64_t block, float qmax, float amin, int fp8) {
    for (int64_t b = 0; b < n; b += block) {
        float *xb = x + b;
        float amax = 0;
        for (int64_t i = 0; i < block; i++) amax = fmaxf(amax, fabsf(xb[i]));
        if (amax < amin) amax = amin;
        float s = pdb_v4_qsim_pow2_ceil(amax / qmax);
        for (int64_t i = 0; i < block; i++) {
            float q = xb[i] / s;
            if (q > qmax) q = qmax;
            if (q < -qmax) q = -qmax;
            float r = fp8 ? pdb_e4m3_to_f32(pdb_f32_to_e4m3(q)) : pdb_e2m1_to_f32(pdb_f32_to_e2m1(q));
            xb[i] = r * s;
        }
    }
}

void pdb_v4_qsim_fp8(float *x, int64_t n) {
    PDB_ASSERT(n % 64 == 0, "FP8 simulation needs a multiple of 64 values");
    round_trip(x, n, 64, 448.0f, 1e-4f, 1);
}

void pdb_v4_qsim_fp4(float *x, int64_t n) {
    PDB_ASSERT(n % 32 == 0, "FP4 simulation needs a multiple of 32 values");
    round_trip(x, n, 32, 6.0f, 6.0f * 0x1p-126f, 0);
}

void pdb_v4_qsim_hadamard(float *x, int64_t n) {
    PDB_ASSERT(n > 0 && (n & (n - 1)) == 0, "Hadamard needs a power-of-two length");
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float sc = (float)(1.0 / sqrt((double)n));
    for (int64_t i = 0; i < n; i++) x[i] *= sc;
}
