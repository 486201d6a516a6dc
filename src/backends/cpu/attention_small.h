#pragma once
// The two products of attention for a few query rows (decode: one position's query heads that
// share a KV head) on vector lanes, instead of two BLAS calls whose fixed cost dominates at this
// size (attention_core.cpp uses them for f32 blocks of at most kSmallRows rows).
#include <cstdint>

namespace rlx::cpu::attn {

inline constexpr int64_t kSmallRows = 8;

// Whether the kernels run on this CPU (AVX2 + FMA) for head size d (a multiple of 8).
bool small_products_native(int64_t d);

// s[r * ld + j] = scale * (q_r . k_j) for r < rows, j < ncol; q_r at q + r * q_ld, k_j at
// k + j * k_ld, d values each.
void small_qk(int64_t rows, int64_t ncol, int64_t d, float scale, const float* q, int64_t q_ld, const float* k,
              int64_t k_ld, float* s, int64_t ld);
// o[r * o_ld + e] = sum_j s[r * ld + j] * v[j * v_ld + e] for r < rows, e < d.
void small_pv(int64_t rows, int64_t d, int64_t ncol, const float* s, int64_t ld, const float* v, int64_t v_ld,
              float* o, int64_t o_ld);

}  // namespace rlx::cpu::attn
