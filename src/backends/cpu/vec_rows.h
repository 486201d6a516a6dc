#pragma once
// f32 row kernels on vector lanes (vec_math.h), 8 lanes with AVX2 else 4, same bits either way:
// softmax / log-softmax rows, LayerNorm / RmsNorm rows and the activations whose formula the
// vector math covers. Accuracy: docs/ops.md ("CPU float math").
#include <cstdint>

#include "rlx/dtype.h"
#include "rlx/ops.h"

namespace rlx::cpu {

// y = softmax(x) (log: log-softmax) over n contiguous floats; y may alias x. exp in f32 (vec::exp),
// the sum in double; softmax: e * (1 / sum) in double, log-softmax: (x - max) - log(sum) in
// double, rounded once. A NaN in the row makes it NaN; a row of -inf is NaN (as the scalar path).
void softmax_row_f32(const float* x, float* y, int64_t n, bool log);

// Softmax / log-softmax over a non-last axis: n adjacent columns of mid rows `stride` floats
// apart (y may alias x), each column as softmax_row_f32 computes a row.
void softmax_cols_f32(const float* x, float* y, int64_t mid, int64_t stride, int64_t n, bool log);

// One row of LayerNorm (rms false) / RmsNorm over len floats: v = x, or round_f32(x + res);
// mean and centered squares summed in double, ((v - mean) * inv) * gamma (+ beta) in double,
// rounded once. beta may be null.
void norm_row_f32(const float* x, const float* res, const double* gamma, const double* beta, float* y, int64_t len,
                  double eps, bool rms);

// The sum of n floats in double (several accumulators: not the order of a plain loop).
double sum_f32(const float* x, int64_t n);

// The largest (max) or smallest value of n >= 1 floats; NaN when one is NaN.
float extreme_f32(const float* x, int64_t n, bool max);

// Applies activation k to n floats on vector lanes; returns false (nothing written) when k has
// no vector path (n = 0 only asks). y may alias x.
bool activation_f32(ActKind k, const float* x, float* y, int64_t n);

// f16 <-> f32 for n values, bit-identical to f16_bits_to_f32 / f32_to_f16_bits (round to
// nearest even, overflow to inf, denormals kept) except that F16C quiets a signaling NaN: with
// F16C 8 at a time, else one by one through those functions (also when force_scalar).
void f16_to_f32(const f16* x, float* y, int64_t n, bool force_scalar = false);
void f32_to_f16(const float* x, f16* y, int64_t n, bool force_scalar = false);

// exp on n floats (the accuracy tests' entry point; the 4-lane path when force_narrow).
void exp_f32(const float* x, float* y, int64_t n, bool force_narrow = false);
void tanh_f32(const float* x, float* y, int64_t n, bool force_narrow = false);
void erf_f32(const float* x, float* y, int64_t n, bool force_narrow = false);

}  // namespace rlx::cpu
