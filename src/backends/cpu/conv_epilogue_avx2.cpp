// The AVX2 body of ConvEpilogue::apply (conv_epilogue.h): the consumer's steps over blocks of
// 64 values, one step at a time with its 8 vectors in flight (each step's results in a small
// local block, the last step's into the output), for programs of f32 Add / Sub / Mul / Div /
// Max / Min and Relu. Max / Min / Relu keep the scalar kernels' NaN rules (a NaN operand wins
// the max / min; Relu keeps NaN), so the results have the bits of the unfused steps.
#include <cstdint>

#include "backends/cpu/conv_epilogue.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace rlx::cpu::epilogue_avx2 {
namespace {

#define RLX_EINLINE inline __attribute__((always_inline))

RLX_EINLINE __m256 max_nan(__m256 a, __m256 b) {  // (a > b || a != a) ? a : b
  const __m256 take_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(b, a, take_a);
}
RLX_EINLINE __m256 min_nan(__m256 a, __m256 b) {  // (a < b || a != a) ? a : b
  const __m256 take_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(b, a, take_a);
}
RLX_EINLINE __m256 relu(__m256 x) {  // x < 0 ? 0 : x
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ), x);
}

template <int K>
RLX_EINLINE __m256 op(__m256 a, __m256 b) {
  if constexpr (K == 0) return _mm256_add_ps(a, b);
  else if constexpr (K == 1) return _mm256_sub_ps(a, b);
  else if constexpr (K == 2) return _mm256_mul_ps(a, b);
  else if constexpr (K == 3) return _mm256_div_ps(a, b);
  else if constexpr (K == 4) return max_nan(a, b);
  else return min_nan(a, b);
}

// dst[0..64) = op(a, b); a / b advance by 8 floats per vector unless broadcast (stride 0).
template <int K>
RLX_EINLINE void block_op(const float* a, bool a_bc, const float* b, bool b_bc, float* dst) {
  const __m256 as = _mm256_broadcast_ss(a), bs = _mm256_broadcast_ss(b);
  for (int v = 0; v < 8; ++v) {
    const __m256 x = a_bc ? as : _mm256_loadu_ps(a + 8 * v);
    const __m256 y = b_bc ? bs : _mm256_loadu_ps(b + 8 * v);
    _mm256_storeu_ps(dst + 8 * v, op<K>(x, y));
  }
}

}  // namespace

// kind: 0..5 = Add, Sub, Mul, Div, Max, Min; 6 = Relu (b unused).
void step_block(int kind, const float* a, bool a_bc, const float* b, bool b_bc, float* dst) {
  switch (kind) {
    case 0: return block_op<0>(a, a_bc, b, b_bc, dst);
    case 1: return block_op<1>(a, a_bc, b, b_bc, dst);
    case 2: return block_op<2>(a, a_bc, b, b_bc, dst);
    case 3: return block_op<3>(a, a_bc, b, b_bc, dst);
    case 4: return block_op<4>(a, a_bc, b, b_bc, dst);
    case 5: return block_op<5>(a, a_bc, b, b_bc, dst);
    default: {
      const __m256 as = _mm256_broadcast_ss(a);
      for (int v = 0; v < 8; ++v) _mm256_storeu_ps(dst + 8 * v, relu(a_bc ? as : _mm256_loadu_ps(a + 8 * v)));
    }
  }
}

// The HardSwish chain as the ONNX importer writes it, x * max(min(x * c[0] + c[1], c[2]), c[3]),
// over 64 values in registers: out[0..64) from x[0..64), the steps' own operations and order.
void hardswish_block(const float* x, const float* c, float* out) {
  const __m256 c0 = _mm256_broadcast_ss(c), c1 = _mm256_broadcast_ss(c + 1), c2 = _mm256_broadcast_ss(c + 2),
               c3 = _mm256_broadcast_ss(c + 3);
  for (int v = 0; v < 8; ++v) {
    const __m256 xv = _mm256_loadu_ps(x + 8 * v);
    __m256 t = _mm256_add_ps(_mm256_mul_ps(xv, c0), c1);
    t = max_nan(min_nan(t, c2), c3);
    _mm256_storeu_ps(out + 8 * v, _mm256_mul_ps(xv, t));
  }
}

}  // namespace rlx::cpu::epilogue_avx2

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else

namespace rlx::cpu::epilogue_avx2 {
void step_block(int, const float*, bool, const float*, bool, float*) {}
void hardswish_block(const float*, const float*, float*) {}
}  // namespace rlx::cpu::epilogue_avx2

#endif
