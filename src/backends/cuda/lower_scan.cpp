// Cumsum on CUDA (kernels/scan.h): a block scan per row, a reduce-then-scan over blocks for a
// few long rows, or one thread per column when the axis has many columns beside it.
#include <algorithm>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/scan.h"
#include "backends/cuda/select_lower.h"
#include "rlx/error.h"

namespace rlx::cuda {
namespace {

// Columns beside the axis from which one thread per column beats a block per column.
constexpr int64_t kColumnThreads = 1024;
// Elements per tile of the block scans (SCAN_TILE in kernels/scan.h).
constexpr int64_t kScanTile = 2048;

}  // namespace

// The accumulator of dtype t (the CPU's: double for f32 and f64, float for f16/bf16, 64-bit wrapping
// integers) and its conversions.
std::string scan_source(DType t) {
  const bool half = t == DType::F16 || t == DType::BF16;
  const char* a = half ? "float" : is_float(t) ? "double" : "unsigned long long";
  return kernel_source(ksrc::kScan, {{"T", storage_type(t)}, {"A", a}}, acc_conversion_defines(half));
}

void lower_cumsum(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& op = std::get<ops::Cumsum>(st.op);
  const auto& g = std::get<plan::AxisGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  if (t == DType::Bool) throw Error(what + ": cumsum does not take bool input");
  if (st.out.at(0).numel() == 0) return;
  const std::string src = scan_source(t);
  const int64_t cols = g.outer * g.inner;
  const int64_t tiles = (g.axis + kScanTile - 1) / kScanTile;
  const uint8_t* x = cx.ptr(st.in.at(0));
  uint8_t* y = cx.ptr(st.out.at(0));
  if (!(g.inner > 1 && cols >= kColumnThreads) && cols < device().sm_count && tiles >= 4) {
    // Few long rows: reduce-then-scan with every tile in its own block.
    const size_t acc = t == DType::F16 || t == DType::BF16 ? 4 : 8;
    uint8_t* sums = cx.scratch(static_cast<size_t>(cols * tiles) * acc, what + " tile sums");
    const int excl = op.exclusive ? 1 : 0, rev = op.reverse ? 1 : 0;
    auto a = std::make_shared<KernelLaunch>(what, get_kernel("cumsum_tile_sums", src), static_cast<unsigned>(tiles),
                                            512, 0, static_cast<unsigned>(cols));
    a->arg(x).arg(sums).arg(g.outer).arg(g.axis).arg(g.inner).arg(rev);
    auto b = std::make_shared<KernelLaunch>(what, get_kernel("cumsum_tile_offsets", src), static_cast<unsigned>(cols), 512);
    b->arg(sums).arg(cols).arg(tiles);
    auto c = std::make_shared<KernelLaunch>(what, get_kernel("cumsum_tiles", src), static_cast<unsigned>(tiles), 512, 0,
                                            static_cast<unsigned>(cols));
    c->arg(x).arg(y).arg(static_cast<const uint8_t*>(sums)).arg(g.outer).arg(g.axis).arg(g.inner).arg(excl).arg(rev);
    push_launch(cx, a);
    push_launch(cx, b);
    push_launch(cx, c);
    return;
  }
  std::shared_ptr<KernelLaunch> l;
  if (g.inner > 1 && cols >= kColumnThreads) {
    l = std::make_shared<KernelLaunch>(what, get_kernel("cumsum_cols", src), grid_for(cols, 256), 256);
  } else {
    const auto grid = static_cast<unsigned>(std::clamp<int64_t>(cols, 1, int64_t(device().sm_count) * 16));
    l = std::make_shared<KernelLaunch>(what, get_kernel("cumsum_rows", src), grid, 512);
  }
  l->arg(x).arg(y).arg(g.outer).arg(g.axis).arg(g.inner);
  l->arg(op.exclusive ? 1 : 0).arg(op.reverse ? 1 : 0);
  push_launch(cx, l);
}

}  // namespace rlx::cuda
