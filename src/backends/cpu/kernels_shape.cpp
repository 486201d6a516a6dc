// CPU kernels for the shape family: Reshape, Transpose, Narrow, Concat, Expand, Reverse,
// StopGradient. All are pure data movement, dispatched on the element size only.
// Strided ones (Transpose, Expand, Reverse) walk the step's CopyGeom (coalesced output dims
// with the input's permuted, zero or negative strides) row by row; Narrow and Concat copy
// rows as their AxisGeom / ConcatGeom say. Reshape and StopGradient are views in the memory
// plan and only run here when it plans them as copies.
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

// The plan's CopyGeom (coalesced output dims + input strides) as a one-operand walk.
BroadcastPlan<1> copy_plan(const plan::CopyGeom& g) {
  BroadcastPlan<1> p;
  p.dims = g.out_dims;
  for (int64_t s : g.in_strides) p.strides.push_back({s});
  p.numel = product(g.out_dims);
  return p;
}

// out[i] = in[base + sum idx_d * strides[d]] over the output index space.
void strided_copy(const Tensor& in, Tensor& out, const BroadcastPlan<1>& plan, int64_t base) {
  if (out.numel() == 0) return;
  visit_elem_size(dtype_size(in.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(in.raw()) + base;
    U* dst = static_cast<U*>(out.raw());
    parallel_rows<1>(plan, [&](const std::array<int64_t, 1>& off, const std::array<int64_t, 1>& st, int64_t pos,
                               int64_t cnt) { copy_row(src + off[0], st[0], dst + pos, cnt); });
  });
}

// Batched 2-d transpose: the plan's last two dims are (R, C) with input strides (1, sc): the
// output is row-major [.., R, C] and reads are contiguous along R. Copies 8x8 tiles so that
// both the reads and the writes stay within a few cache lines.
void tiled_transpose(const Tensor& in, Tensor& out, const BroadcastPlan<1>& p) {
  constexpr int64_t kTile = 8;  // larger tiles thrash L1 sets when the strides are powers of two
  const size_t r = p.dims.size();
  const int64_t R = p.dims[r - 2], C = p.dims[r - 1], sc = p.strides[r - 1][0];
  // Outer index space (everything but the last two dims) as its own plan.
  std::vector<int64_t> odims(p.dims.begin(), p.dims.end() - 2);
  std::vector<int64_t> ostr;
  for (size_t d = 0; d + 2 < r; ++d) ostr.push_back(p.strides[d][0]);
  const int64_t outer = product(odims);
  const int64_t tiles_r = (R + kTile - 1) / kTile;
  visit_elem_size(dtype_size(in.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(in.raw());
    U* dst = static_cast<U*>(out.raw());
    parallel_for(outer * tiles_r, std::max<int64_t>(1, kElementwiseGrain / (kTile * C)), [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t o = w / tiles_r, r0 = (w % tiles_r) * kTile, r1 = std::min(R, r0 + kTile);
        int64_t base = 0, rem = o;
        for (int64_t d = static_cast<int64_t>(odims.size()) - 1; d >= 0; --d) {
          base += (rem % odims[d]) * ostr[d];
          rem /= odims[d];
        }
        const U* s = src + base;
        U* t = dst + o * R * C;
        for (int64_t c0 = 0; c0 < C; c0 += kTile) {
          const int64_t c1 = std::min(C, c0 + kTile);
          for (int64_t c = c0; c < c1; ++c)
            for (int64_t i = r0; i < r1; ++i) t[i * C + c] = s[i + c * sc];
        }
      }
    });
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

void kernel(const ops::Transpose&, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& out = ctx.out[0];
  if (out.numel() == 0) return;
  const auto plan = copy_plan(std::get<plan::CopyGeom>(ctx.step.geom));
  const size_t pr = plan.dims.size();
  if (pr >= 2 && plan.strides[pr - 2][0] == 1 && plan.strides[pr - 1][0] != 1 && plan.dims[pr - 1] >= 8 &&
      plan.dims[pr - 2] >= 8) {
    tiled_transpose(x, out, plan);
    return;
  }
  strided_copy(x, out, plan, 0);
}

void kernel(const ops::Expand&, KernelContext& ctx) {
  strided_copy(ctx.in[0], ctx.out[0], copy_plan(std::get<plan::CopyGeom>(ctx.step.geom)), 0);
}

void kernel(const ops::Reverse&, KernelContext& ctx) {
  const auto& g = std::get<plan::CopyGeom>(ctx.step.geom);
  strided_copy(ctx.in[0], ctx.out[0], copy_plan(g), g.in_offset);
}

void kernel(const ops::Narrow& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const auto& g = std::get<plan::AxisGeom>(ctx.step.geom);
  if (g.start < 0 || g.out_axis < 0 || g.start + g.out_axis > g.axis)
    throw Error("narrow: [" + std::to_string(op.start) + ", " + std::to_string(op.start) + "+" + std::to_string(op.len) +
                ") is out of range for axis " + std::to_string(op.axis) + " of size " + std::to_string(g.axis) +
                " (input " + x.shape_info().str() + ")");
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  copy_rows(static_cast<const uint8_t*>(x.raw()) + g.start * g.inner * es, g.axis * g.inner * es,
            static_cast<uint8_t*>(ctx.out[0].raw()), g.out_axis * g.inner * es, g.outer, g.out_axis * g.inner * es);
}

void kernel(const ops::Concat&, KernelContext& ctx) {
  Tensor& out = ctx.out[0];
  if (out.numel() == 0) return;
  const auto& g = std::get<plan::ConcatGeom>(ctx.step.geom);
  const auto es = static_cast<int64_t>(dtype_size(out.dtype()));
  const int64_t out_pitch = g.out_axis * g.inner * es;
  for (size_t i = 0; i < ctx.in.size(); ++i) {
    const int64_t row = g.in_axis[i] * g.inner * es;
    copy_rows(static_cast<const uint8_t*>(ctx.in[i].raw()), row, static_cast<uint8_t*>(out.raw()) + g.col[i] * es,
              out_pitch, g.outer, row);
  }
}

}  // namespace rlx::cpu
