#pragma once
// The host side of the attention kernels' AttnArgs (kernels/attention.h: field for field), and
// the pieces of the attention lowering that the decode kernels share (lower_attention.cpp,
// lower_decode_qkv.cpp).
#include <cstdint>

#include "backends/cuda/lower.h"

namespace rlx::cuda {

// The kernels' AttnArgs, passed by value.
struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const void* mask;
  float* part;
  int64_t qs_b, qs_s, qs_h, ks_b, ks_s, ks_h, vs_b, vs_s, vs_h, os_b, os_s, os_h;
  int64_t batch, q_len, kv_len, heads, group;
  float scale, softcap;
  int32_t mask_kind;
  int64_t window, mask_batch;
  int64_t bias_s[4];
  int64_t split_len;
  const void* k2 = nullptr;
  const void* v2 = nullptr;
  int64_t k2s_b = 0, k2s_s = 0, k2s_h = 0, v2s_b = 0, v2s_s = 0, v2s_h = 0;
  int64_t k_split = INT64_MAX, v_split = INT64_MAX;  // no second part
  unsigned* tickets = nullptr;
  const void* rope_cos = nullptr;
  const void* rope_sin = nullptr;
  int64_t rope_rot = 0;
  int32_t rope_per_batch = 0, rope_neox = 0;
};

// A KV operand read in place from two parts (what an absorbed concat would have joined): rows
// [0, split) of `first`, the rest of `second`, each with its own (batch, seq, head) strides.
struct SplitKv {
  const void* first = nullptr;
  const void* second = nullptr;
  plan::AttnStrides first_strides, second_strides;
  int64_t split = 0;
  bool first_static = false;  // the first part is a leaf (a param: no kernel writes it)
};

// The seq axis of a rank-4 attention operand in this layout.
int64_t seq_axis(AttnLayout layout);
// The concat `c` (two dense parts along the seq axis) as a SplitKv.
SplitKv split_kv(LowerContext& cx, const plan::Step& c, AttnLayout layout);
// The rotation of an absorbed Rope step (its tables, rotated dims, style) into `a`.
void set_rope_args(LowerContext& cx, AttnArgs& a, const plan::Step& rope);
// Attention step `st`'s operands, strides and attributes (no split, no second KV part, no RoPE).
AttnArgs attention_args(LowerContext& cx, const plan::Step& st);

}  // namespace rlx::cuda
