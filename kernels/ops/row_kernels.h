// Vectorized single-row kernels behind kernels/ops/ops.h and kernels/ops/rope.h (internal to kernels/).
// One table of function pointers per instruction set: portable scalar code, AVX2+FMA and
// AVX-512F. Each ISA's code is compiled with __attribute__((target(...))) on its own functions, so
// the binary runs on any x86-64; row_kernels() picks the best one the CPU supports (cpuid).
//
// Contracts shared by every table (n >= 0; pointers may be null when n == 0):
//  - exp: y[i] = e^x[i]; relative error <= 1e-6 for results in the normal f32 range; +inf for
//    x > ~88.72, 0 (or a denormal) below ~-87.3, exp(-inf) = 0. y may alias x.
//  - sum_squares: sum of x[i]^2, accumulated in double.
//  - scale_mul: y[i] = w[i] * (x[i] * s), each product rounded to f32 in that order
//    (HF LlamaRMSNorm: normalize first, then the weight). y may alias x.
//  - silu_mul: out[i] = g[i] / (1 + e^-g[i]) * u[i]. out may alias g or u.
//  - softmax: x = exp(x - max(x)) / sum, in place; the sum is accumulated in double; -inf
//    entries give 0 (a row of only -inf gives NaN, as PyTorch does).
//  - add: y[i] += x[i].
//  - block_max: out[b] = max of x[b*block, min(n, (b+1)*block)) for b < ceil(n / block) (block >= 1);
//    -inf entries take part as -inf; x holds no NaN.
//  - exp_sum: sum of e^(x[i] * s - m), accumulated in double, each term in f32: the product
//    x[i] * s rounded, then the difference (no FMA); y[i] gets the terms when y is not null (y may
//    alias x). -inf entries give 0 (m finite, s > 0).
//  - rotate_half: x[0:h], x[h:2h] -> (x1*c - x2*s, x2*c + x1*s) with c = cos[0:h], s = sin[0:h];
//    every product and sum rounded to f32 separately (no FMA), so all tables give identical
//    bits, matching PyTorch's q*cos + rotate_half(q)*sin.
#pragma once

#include <cstdint>

namespace vlm {

struct RowKernels {
  const char* name;
  void (*exp)(const float* x, float* y, int64_t n);
  double (*sum_squares)(const float* x, int64_t n);
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n);
  void (*silu_mul)(const float* g, const float* u, float* out, int64_t n);
  void (*softmax)(float* x, int64_t n);
  void (*add)(float* y, const float* x, int64_t n);
  void (*block_max)(const float* x, int64_t n, int64_t block, float* out);
  double (*exp_sum)(const float* x, int64_t n, float s, float m, float* y);
  void (*rotate_half)(float* x /*[2h]*/, const float* cos /*[h]*/, const float* sin /*[h]*/,
                      int64_t h);
};

enum class Isa { Scalar, Avx2, Avx512 };

// The table for `isa`, or nullptr when this CPU (or build) cannot run it.
const RowKernels* row_kernels_for(Isa isa);
// The best table this CPU supports; chosen once.
const RowKernels& row_kernels();

// Per-ISA tables (defined in row_kernels_<isa>.cpp). Only call through row_kernels_for().
extern const RowKernels kRowKernelsScalar;
#if defined(__x86_64__) || defined(__i386__)
extern const RowKernels kRowKernelsAvx2;
extern const RowKernels kRowKernelsAvx512;
#endif

}  // namespace vlm
