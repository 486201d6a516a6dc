// CPU kernels for the shape family: Reshape, Transpose, Narrow, Concat, Expand, Reverse,
// StopGradient. All are pure data movement, dispatched on the element size only.
// Strided ones (Transpose, Expand, Reverse) build a coalesced BroadcastPlan over the output
// with the input's (possibly permuted, zero or negative) strides and copy row by row.
#include <cstring>
#include <string>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/kernels.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kCopyGrainBytes = 1 << 20;

void copy_bytes(const void* src, void* dst, size_t nbytes) {
  if (nbytes == 0 || src == dst) return;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  parallel_for(static_cast<int64_t>(nbytes), kCopyGrainBytes, [&](int64_t b, int64_t e) {
    std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
  });
}

// out[i] = in[base + sum idx_d * strides[d]] over the output index space.
void strided_copy(const Tensor& in, Tensor& out, const std::vector<int64_t>& strides, int64_t base) {
  if (out.numel() == 0) return;
  const auto plan = make_plan_from_strides<1>(out.shape(), {strides});
  visit_elem_size(dtype_size(in.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(in.raw()) + base;
    U* dst = static_cast<U*>(out.raw());
    parallel_rows<1>(plan, [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st, int64_t pos,
                               int64_t cnt) { copy_row(src + off[0], st[0], dst + pos, cnt); });
  });
}

// Copies `rows` rows of `row_bytes` from src (row pitch src_pitch) to dst (row pitch dst_pitch).
void copy_rows(const uint8_t* src, int64_t src_pitch, uint8_t* dst, int64_t dst_pitch, int64_t rows,
               int64_t row_bytes) {
  if (rows == 0 || row_bytes == 0) return;
  const int64_t grain = std::max<int64_t>(1, kCopyGrainBytes / row_bytes);
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::memcpy(dst + r * dst_pitch, src + r * src_pitch, static_cast<size_t>(row_bytes));
  });
}

}  // namespace

void kernel(const ops::Reshape&, KernelContext& ctx) {
  copy_bytes(ctx.in[0].raw(), ctx.out[0].raw(), ctx.out[0].nbytes());
}

void kernel(const ops::StopGradient&, KernelContext& ctx) {
  copy_bytes(ctx.in[0].raw(), ctx.out[0].raw(), ctx.out[0].nbytes());
}

void kernel(const ops::Transpose& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const auto in_strides = contiguous_strides(x.shape());
  const int64_t r = x.rank();
  std::vector<int64_t> st(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t p = op.perm[static_cast<size_t>(d)] < 0 ? op.perm[static_cast<size_t>(d)] + r : op.perm[static_cast<size_t>(d)];
    st[static_cast<size_t>(d)] = in_strides.at(static_cast<size_t>(p));
  }
  strided_copy(x, ctx.out[0], st, 0);
}

void kernel(const ops::Expand&, KernelContext& ctx) {
  strided_copy(ctx.in[0], ctx.out[0], broadcast_strides(ctx.in[0].shape(), ctx.out[0].shape()), 0);
}

void kernel(const ops::Reverse& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  auto st = contiguous_strides(x.shape());
  int64_t base = 0;
  for (int64_t a : op.axes) {
    const int64_t ax = normalize_axis(a, x.rank(), "reverse");
    if (x.dim(ax) == 0) return;  // empty output
    base += (x.dim(ax) - 1) * st[static_cast<size_t>(ax)];
    st[static_cast<size_t>(ax)] = -st[static_cast<size_t>(ax)];
  }
  strided_copy(x, ctx.out[0], st, base);
}

void kernel(const ops::Narrow& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const int64_t ax = normalize_axis(op.axis, x.rank(), "narrow");
  const int64_t dim = x.dim(ax);
  const int64_t start = op.start < 0 ? op.start + dim : op.start;
  if (start < 0 || op.len < 0 || start + op.len > dim)
    throw Error("narrow: [" + std::to_string(op.start) + ", " + std::to_string(op.start) + "+" + std::to_string(op.len) +
                ") is out of range for axis " + std::to_string(op.axis) + " of size " + std::to_string(dim) +
                " (input " + x.shape_info().str() + ")");
  const AxisSplit s = split_at_axis(x.shape(), ax);
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  copy_rows(static_cast<const uint8_t*>(x.raw()) + start * s.inner * es, s.mid * s.inner * es,
            static_cast<uint8_t*>(ctx.out[0].raw()), op.len * s.inner * es, s.outer, op.len * s.inner * es);
}

void kernel(const ops::Concat& op, KernelContext& ctx) {
  Tensor& out = ctx.out[0];
  if (out.numel() == 0) return;
  const int64_t ax = normalize_axis(op.axis, out.rank(), "concat");
  const AxisSplit so = split_at_axis(out.shape(), ax);
  const auto es = static_cast<int64_t>(dtype_size(out.dtype()));
  const int64_t out_pitch = so.mid * so.inner * es;
  int64_t col = 0;  // byte offset of the current input's slab within an output row
  for (const Tensor& t : ctx.in) {
    const int64_t row = t.dim(ax) * so.inner * es;
    copy_rows(static_cast<const uint8_t*>(t.raw()), row, static_cast<uint8_t*>(out.raw()) + col, out_pitch, so.outer,
              row);
    col += row;
  }
}

}  // namespace rlx::cpu
