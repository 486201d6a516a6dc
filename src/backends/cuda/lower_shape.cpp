// Data movement: Transpose / Expand / Reverse / Reshape copies (CopyGeom), Narrow, Concat (one
// launch for up to 16 inputs), Gather, Pad, and Rope.
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/shape.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

struct CopyDims {
  int64_t dims[8];
  int64_t strides[8];
  int32_t rank;
};

CUfunction copy_kernel(const char* entry, size_t elem, const std::string& index_type = "int") {
  return get_kernel(entry, kernel_source(ksrc::kCopy, {{"E", word_type(elem)}, {"I", index_type}}));
}

void push(LowerContext& cx, std::shared_ptr<KernelLaunch> l) {
  cx.add([l](cudaStream_t s) { l->launch(s); });
}

void add_copy(LowerContext& cx, const std::string& what, const uint8_t* in, uint8_t* out, size_t elem,
              const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t in_offset) {
  if (dims.size() > 8) throw Error(what + ": CUDA copies support at most 8 (coalesced) dims");
  CopyDims g{};
  g.rank = static_cast<int32_t>(dims.size());
  int64_t total = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    g.dims[i] = dims[i];
    g.strides[i] = strides.at(i);
    total *= dims[i];
  }
  if (total == 0) return;
  auto l = std::make_shared<KernelLaunch>(what, copy_kernel("strided_copy", elem), grid_for(total, 256), 256);
  l->pdl();
  l->arg(in).arg(out).arg(g).arg(in_offset).arg(total);
  push(cx, l);
}


// Pad: the input index feeding each output index per axis (-1: the constant; PadGeom, resolved
// as the CPU kernel does), uploaded once; one gather launch.
void lower_pad(LowerContext& cx, const plan::Step& st, const ops::Pad& op) {
  const std::string what = step_label(st);
  const auto& pg = std::get<plan::PadGeom>(st.geom);
  const plan::TensorRef& x = st.in.at(0);
  const plan::TensorRef& out = st.out.at(0);
  const size_t r = x.dims.size();
  if (out.numel() == 0) return;
  if (r > 8) throw Error(what + ": CUDA pad supports rank <= 8");
  struct PadDims {
    int64_t out_dims[8], in_strides[8], map_off[8];
    int32_t rank;
  } g{};
  g.rank = static_cast<int32_t>(r);
  for (size_t a = 0; a < r; ++a) {
    g.out_dims[a] = pg.out_dims[a];
    g.in_strides[a] = pg.in_strides[a];
    g.map_off[a] = pg.source_offset[a];
  }
  const std::vector<int64_t>& maps = pg.source;
  auto* table = reinterpret_cast<int64_t*>(cx.scratch(maps.size() * 8, what + " index maps"));
  if (!maps.empty()) RLX_CUDA_CHECK(cudaMemcpy(table, maps.data(), maps.size() * 8, cudaMemcpyHostToDevice));
  const size_t elem = dtype_size(out.dtype);
  auto l = std::make_shared<KernelLaunch>(what, copy_kernel("pad", elem), grid_for(out.numel(), 256), 256);
  l->pdl();
  l->arg(static_cast<const uint8_t*>(cx.ptr(x))).arg(cx.ptr(out)).arg(static_cast<const int64_t*>(table)).arg(g);
  const uint64_t fill = op.mode == PadMode::Constant ? plan::pad_fill_bits(out.dtype, op.value) : 0;
  switch (elem) {
    case 1: l->arg(static_cast<uint8_t>(fill)); break;
    case 2: l->arg(static_cast<uint16_t>(fill)); break;
    case 4: l->arg(static_cast<uint32_t>(fill)); break;
    default: l->arg(fill); break;
  }
  l->arg(out.numel());
  push(cx, l);
}

}  // namespace

void lower_shape(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef& out = st.out.at(0);
  uint8_t* y = cx.ptr(out);
  const size_t elem = dtype_size(out.dtype);

  if (const auto* cg = std::get_if<plan::CopyGeom>(&st.geom)) {
    add_copy(cx, what, cx.ptr(st.in.at(0)), y, elem, cg->out_dims, cg->in_strides, cg->in_offset);
    return;
  }
  if (std::holds_alternative<ops::Narrow>(st.op)) {
    const auto& g = std::get<plan::AxisGeom>(st.geom);
    add_copy(cx, what, cx.ptr(st.in.at(0)), y, elem, {g.outer, g.out_axis, g.inner}, {g.axis * g.inner, g.inner, 1},
             g.start * g.inner);
    return;
  }
  if (std::holds_alternative<ops::Concat>(st.op)) {
    const auto& g = std::get<plan::ConcatGeom>(st.geom);
    struct ConcatArgs {
      const uint8_t* in[16];
      int64_t col[16];
      int64_t cols[16];
      int32_t count;
    };
    const int64_t width = g.out_axis * g.inner;
    if (g.outer * width == 0) return;
    for (size_t first = 0; first < st.in.size(); first += 16) {
      ConcatArgs a{};
      const size_t n = std::min<size_t>(16, st.in.size() - first);
      a.count = static_cast<int32_t>(n);
      for (size_t i = 0; i < n; ++i) {
        a.in[i] = cx.ptr(st.in[first + i]);
        a.col[i] = g.col[first + i];
        a.cols[i] = g.in_axis[first + i] * g.inner;
      }
      // Columns of this launch: [col[0], col[n-1] + cols[n-1]); the kernel writes only those.
      auto l = std::make_shared<KernelLaunch>(what, copy_kernel("concat", elem), grid_for(g.outer * width, 256), 256);
      l->pdl();
      l->arg(a).arg(y).arg(g.outer).arg(width);
      push(cx, l);
    }
    return;
  }
  if (std::holds_alternative<ops::Gather>(st.op)) {
    const auto& g = std::get<plan::AxisGeom>(st.geom);
    const plan::TensorRef& idx = st.in.at(1);
    if (idx.dtype != DType::I32 && idx.dtype != DType::I64)
      throw Error(what + ": CUDA gather needs i32 or i64 indices, got " + dtype_name(idx.dtype));
    if (out.numel() == 0) return;
    auto l = std::make_shared<KernelLaunch>(what, copy_kernel("gather", elem, storage_type(idx.dtype)),
                                            grid_for(out.numel(), 256), 256);
    l->pdl();
    l->arg(cx.ptr(st.in.at(0))).arg(cx.ptr(idx)).arg(y).arg(g.outer).arg(g.axis).arg(g.out_axis).arg(g.inner)
        .arg(cx.error_flag());
    push(cx, l);
    return;
  }
  if (const auto* op = std::get_if<ops::Pad>(&st.op)) {
    lower_pad(cx, st, *op);
    return;
  }
  if (const auto* op = std::get_if<ops::Rope>(&st.op)) {
    const auto& g = std::get<plan::RopeGeom>(st.geom);
    const DType tc = st.in.at(1).dtype;
    if (st.in.at(2).dtype != tc) throw Error(what + ": CUDA rope needs cos and sin of one dtype");
    if (out.numel() == 0) return;
    const CUfunction fn = get_kernel(
        "rope", kernel_source(ksrc::kRope, {{"T", storage_type(out.dtype)}, {"TC", storage_type(tc)}}));
    const int64_t per_head = g.n_rot / 2 + (g.head_dim - g.n_rot);
    // The Rope step just before, paired with this one by plan_rope_pairs, runs in this launch.
    const plan::Step* first = cx.absorbed_producer(st);
    const int64_t heads1 = first ? std::get<plan::RopeGeom>(first->geom).heads : 0;
    auto l = std::make_shared<KernelLaunch>(what, fn, grid_for(g.batch * g.seq * (g.heads + heads1) * per_head, 256),
                                            256);
    l->pdl();
    l->arg(cx.ptr(st.in.at(0))).arg(cx.ptr(st.in.at(1))).arg(cx.ptr(st.in.at(2))).arg(y).arg(g.batch).arg(g.seq)
        .arg(g.heads).arg(g.head_dim).arg(g.n_rot).arg(g.per_batch ? 1 : 0).arg(op->style == RopeStyle::NeoX ? 1 : 0)
        .arg(first ? static_cast<const uint8_t*>(cx.ptr(first->in.at(0))) : nullptr)
        .arg(first ? cx.ptr(first->out.at(0)) : nullptr).arg(heads1);
    push(cx, l);
    return;
  }
  throw Error(what + ": not a data-movement op of the CUDA backend");
}

}  // namespace rlx::cuda
