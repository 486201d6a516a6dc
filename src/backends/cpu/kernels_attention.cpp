// CPU kernels: Rope and Attention. The attention math (and its exact score order:
// scale, softcap, bias / mask, softmax) lives in attention_core.{h,cpp}.
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_core.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"

namespace rlx::cpu {
namespace {

// Strides of `dims` (right-aligned, rank <= 4) read as broadcast to a rank-4 target; size-1
// and missing dims get stride 0.
void broadcast_strides4(const std::vector<int64_t>& dims, int64_t out[4]) {
  const int64_t r = static_cast<int64_t>(dims.size());
  int64_t stride = 1;
  for (int64_t i = 3; i >= 0; --i) {
    const int64_t src = i - (4 - r);
    if (src < 0) {
      out[i] = 0;
      continue;
    }
    const int64_t d = dims[static_cast<size_t>(src)];
    out[i] = d == 1 ? 0 : stride;
    stride *= d;
  }
}

template <class T>
void attention_typed(const ops::Attention& op, KernelContext& ctx) {
  using C = compute_t<T>;
  const Tensor& q = ctx.in[0];
  const Tensor& k = ctx.in[1];
  Tensor& out = ctx.out[0];
  const bool bshd = op.layout == AttnLayout::BSHD;
  const int64_t b = q.dim(0), hq = op.num_heads, hkv = op.num_kv_heads, d = op.head_dim;
  const int64_t sq = bshd ? q.dim(1) : q.dim(2);
  const int64_t skv = bshd ? k.dim(1) : k.dim(2);
  if (out.numel() == 0) return;

  const attn::ComputeBuf<T> qc(ctx.in[0]), kc(ctx.in[1]), vc(ctx.in[2]);
  std::vector<C> out_buf;
  C* o = nullptr;
  if constexpr (std::is_same_v<T, C>) {
    o = out.data<T>();
  } else {
    out_buf.resize(static_cast<size_t>(out.numel()));
    o = out_buf.data();
  }
  auto view = [&](auto* data, int64_t s, int64_t h) {
    using P = std::remove_reference_t<decltype(*data)>;
    attn::View<P> v;
    v.data = data;
    if (bshd) {
      v.batch = s * h * d, v.seq = h * d, v.head = d;
    } else {
      v.batch = h * s * d, v.head = s * d, v.seq = d;
    }
    return v;
  };

  attn::Problem<C> p;
  p.batch = b, p.num_heads = hq, p.num_kv_heads = hkv, p.q_len = sq, p.kv_len = skv, p.head_dim = d;
  p.q = view(qc.get(), sq, hq);
  p.k = view(kc.get(), skv, hkv);
  p.v = view(vc.get(), skv, hkv);
  p.out = view(o, sq, hq);
  p.scale = static_cast<C>(op.score_scale != 0.0 ? op.score_scale : 1.0 / std::sqrt(static_cast<double>(d)));
  p.softcap = static_cast<C>(op.softcap);
  p.mask = op.mask_kind;
  p.window = op.window;

  std::vector<uint8_t> keep;
  std::optional<attn::ComputeBuf<T>> bias;
  if (op.mask_kind == MaskKind::Custom) {
    keep = attn::keep_flags(ctx.in[3]);
    p.keep = keep.data();
    p.keep_batch = skv;
  } else if (op.mask_kind == MaskKind::Bias) {
    bias.emplace(ctx.in[3]);
    p.bias = bias->get();
    broadcast_strides4(ctx.in[3].shape(), p.bias_strides);
  }
  attn::run(p);

  if constexpr (!std::is_same_v<T, C>) {
    T* dst = out.data<T>();
    const int64_t n = out.numel();
    parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) dst[i] = store<T>(out_buf[static_cast<size_t>(i)]);
    });
  }
}

template <class T>
void rope_typed(const ops::Rope& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const Tensor& cos_t = ctx.in[1];
  Tensor& out = ctx.out[0];
  const int64_t s = x.dim(1), h = x.dim(2), hd = op.head_dim, half = op.n_rot / 2;
  const bool per_batch = cos_t.rank() == 3;
  const T* src = x.data<T>();
  const T* cs = cos_t.data<T>();
  const T* sn = ctx.in[2].data<T>();
  T* dst = out.data<T>();
  const int64_t rows = x.numel() / hd;
  parallel_for(rows, std::max<int64_t>(1, (1 << 14) / hd), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bs = r / h;  // b * S + s
      const int64_t off = (per_batch ? bs : bs % s) * half;
      attn::rotate_head(src + r * hd, dst + r * hd, cs + off, sn + off, hd, op.n_rot, op.style);
    }
  });
}

}  // namespace

void kernel(const ops::Rope& op, KernelContext& ctx) {
  if (ctx.out[0].numel() == 0) return;
  visit_dtype(ctx.in[0].dtype(), [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F64 || D == DType::F16 || D == DType::BF16)
      rope_typed<typename dtype_storage<D>::type>(op, ctx);
    else
      throw Error(std::string("rope: unsupported dtype ") + dtype_name(D));
  });
}

void kernel(const ops::Attention& op, KernelContext& ctx) {
  visit_dtype(ctx.in[0].dtype(), [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F64 || D == DType::F16 || D == DType::BF16)
      attention_typed<typename dtype_storage<D>::type>(op, ctx);
    else
      throw Error(std::string("attention: unsupported dtype ") + dtype_name(D));
  });
}

}  // namespace rlx::cpu
