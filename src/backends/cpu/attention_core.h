#pragma once
// Internal building blocks shared by the Attention / Rope kernels and the fused
// transformer kernels (FusedAttentionBlock, FusedTransformerLayer).
//
// Attention score pipeline, per query row i (position pos = Skv - Sq + i) and key j:
//   s = (q_i . k_j) * scale
//   if softcap > 0:  s = softcap * tanh(s / softcap)
//   Bias:            s = s + bias[b, h, i, j]           (after the softcap)
//   Causal:          key j dropped when j > pos
//   SlidingWindow:   key j dropped when j > pos or j <= pos - window
//   Custom:          key j dropped when keep[b, j] == 0
//   Positions:       key j dropped when j > positions[b, i] (keys past the largest are never read)
//   p = softmax over the kept keys (max-subtracted); out_i = sum_j p_j v_j.
// A row whose kept keys all score -inf (or with no kept key at all) outputs zeros.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "rlx/dtype.h"
#include "rlx/ops.h"
#include "rlx/tensor.h"

namespace rlx::cpu::attn {

// A strided (B, S, H, D) view whose last dim is contiguous; element (b, s, h, d) lives at
// data[b*batch + s*seq + h*head + d]. Covers BSHD, BHSD and slices of a packed qkv buffer.
template <class P>
struct View {
  P* data = nullptr;
  int64_t batch = 0, seq = 0, head = 0;
};

template <class C>
struct Problem {
  int64_t batch = 0, num_heads = 0, num_kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  View<const C> q, k, v;
  View<C> out;
  C scale = 1;    // already resolved (score_scale 0 -> 1/sqrt(head_dim))
  C softcap = 0;  // 0 = off
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  // Custom: keep[b * keep_batch + j] != 0 keeps key j.
  const uint8_t* keep = nullptr;
  int64_t keep_batch = 0;
  // Bias: bias[b*bs[0] + h*bs[1] + i*bs[2] + j*bs[3]] (broadcast strides may be 0).
  const C* bias = nullptr;
  int64_t bias_strides[4] = {0, 0, 0, 0};
  // Positions: query row i of batch b sees keys j <= positions[b * positions_batch + i].
  const int64_t* positions = nullptr;
  int64_t positions_batch = 0;
};

// Runs the whole problem, parallel over (batch, head, block of query rows).
// Instantiated for float and double.
template <class C>
void run(const Problem<C>& p);

// Rotates one head vector: the first n_rot values of `in` (NeoX pairs (i, i + n_rot/2),
// GptJ pairs (2i, 2i+1)) with cos/sin rows of n_rot/2 values; values n_rot..head_dim-1 are
// copied. `in` and `out` may alias. T is the storage type; math runs in compute_t<T>.
template <class T, class TC>
inline void rotate_head(const T* in, T* out, const TC* cos, const TC* sin, int64_t head_dim, int64_t n_rot,
                        RopeStyle style) {
  using C = compute_t<T>;
  const int64_t half = n_rot / 2;
  const bool neox = style == RopeStyle::NeoX;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i1 = neox ? i : 2 * i;
    const int64_t i2 = neox ? i + half : 2 * i + 1;
    const C x1 = load(in[i1]);
    const C x2 = load(in[i2]);
    const C c = static_cast<C>(load(cos[i]));
    const C s = static_cast<C>(load(sin[i]));
    out[i1] = store<T>(x1 * c - x2 * s);
    out[i2] = store<T>(x2 * c + x1 * s);
  }
  if (in != out)
    for (int64_t i = n_rot; i < head_dim; ++i) out[i] = in[i];
}

// The key-padding mask (any dtype) as 0/1 bytes: nonzero (and NaN) keeps the key.
std::vector<uint8_t> keep_flags(const Tensor& mask);

// A read-only compute-type (float/double) copy of a float tensor of storage type T, or the
// tensor's own memory when T already is the compute type.
template <class T>
class ComputeBuf {
 public:
  using C = compute_t<T>;
  explicit ComputeBuf(const Tensor& t) {
    const T* src = t.data<T>();
    if constexpr (std::is_same_v<T, C>) {
      ptr_ = src;
    } else {
      const int64_t n = t.numel();
      buf_.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) buf_[static_cast<size_t>(i)] = load(src[i]);
      ptr_ = buf_.data();
    }
  }
  const C* get() const { return ptr_; }

 private:
  std::vector<C> buf_;
  const C* ptr_ = nullptr;
};

}  // namespace rlx::cpu::attn
