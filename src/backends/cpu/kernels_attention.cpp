// CPU kernels: Rope and Attention. The attention math (and its exact score order:
// scale, softcap, bias / mask, softmax) lives in attention_core.{h,cpp}; the layout strides,
// GQA shape, resolved scale and mask strides come from the step's AttentionGeom.
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

template <class T>
void attention_typed(KernelContext& ctx) {
  using C = compute_t<T>;
  const auto& g = std::get<plan::AttentionGeom>(ctx.step.geom);
  Tensor& out = ctx.out[0];
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
  auto view = [](auto* data, const plan::AttnStrides& s) {
    using P = std::remove_reference_t<decltype(*data)>;
    attn::View<P> v;
    v.data = data;
    v.batch = s.batch, v.seq = s.seq, v.head = s.head;
    return v;
  };

  attn::Problem<C> p;
  p.batch = g.batch, p.num_heads = g.num_heads, p.num_kv_heads = g.num_kv_heads, p.q_len = g.q_len;
  p.kv_len = g.kv_len, p.head_dim = g.head_dim;
  p.q = view(qc.get(), g.q);
  p.k = view(kc.get(), g.k);
  p.v = view(vc.get(), g.v);
  p.out = view(o, g.out);
  p.scale = static_cast<C>(g.scale);
  p.softcap = static_cast<C>(g.softcap);
  p.mask = g.mask;
  p.window = g.window;

  std::vector<uint8_t> keep;
  std::optional<attn::ComputeBuf<T>> bias;
  std::vector<int64_t> positions;
  if (g.mask == MaskKind::Custom) {
    keep = attn::keep_flags(ctx.in[3]);
    p.keep = keep.data();
    p.keep_batch = g.mask_batch_stride;
  } else if (g.mask == MaskKind::Bias) {
    bias.emplace(ctx.in[3]);
    p.bias = bias->get();
    for (int i = 0; i < 4; ++i) p.bias_strides[i] = g.bias_strides[i];
  } else if (g.mask == MaskKind::Positions) {
    const Tensor& pt = ctx.in[3];
    positions.resize(static_cast<size_t>(pt.numel()));
    for (int64_t i = 0; i < pt.numel(); ++i)
      positions[static_cast<size_t>(i)] = pt.dtype() == DType::I32 ? pt.data<int32_t>()[i] : pt.data<int64_t>()[i];
    p.positions = positions.data();
    p.positions_batch = g.mask_batch_stride;
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

void kernel(const ops::Attention&, KernelContext& ctx) {
  visit_dtype(ctx.in[0].dtype(), [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F64 || D == DType::F16 || D == DType::BF16)
      attention_typed<typename dtype_storage<D>::type>(ctx);
    else
      throw Error(std::string("attention: unsupported dtype ") + dtype_name(D));
  });
}

}  // namespace rlx::cpu
