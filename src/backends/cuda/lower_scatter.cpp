// ScatterAdd and GroupedMatMul on CUDA (kernels/scatter.h).
#include <algorithm>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/scatter.h"
#include "backends/cuda/select_lower.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {

void lower_scatter_add(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& sg = std::get<plan::ScatterAddGeom>(st.geom);
  const plan::TensorRef &data = st.in.at(0), &idx = st.in.at(1), &upd = st.in.at(2);
  const size_t rank = sg.idx_dims.size();
  if (data.dtype == DType::Bool || upd.dtype != data.dtype)
    throw Error(what + ": CUDA scatter_add needs non-bool data and updates of one dtype");
  if (rank > 8) throw Error(what + ": CUDA scatter_add supports rank <= 8");

  // out = data, then the atomic additions.
  const uint8_t* src = cx.ptr(data);
  uint8_t* out = cx.ptr(st.out.at(0));
  const size_t bytes = static_cast<size_t>(data.numel()) * dtype_size(data.dtype);
  if (bytes > 0 && src != out)
    cx.add([src, out, bytes](cudaStream_t s) {
      RLX_CUDA_CHECK(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
  const int64_t n = sg.count;
  if (n == 0) return;
  struct ScatterDims {
    int64_t idx_dims[8];
    int64_t data_strides[8];
    int32_t rank;
    int32_t axis;
    int64_t axis_size;
  } g{};
  g.rank = static_cast<int32_t>(rank);
  g.axis = static_cast<int32_t>(sg.axis);
  g.axis_size = sg.axis_size;
  for (size_t d = 0; d < rank; ++d) {
    g.idx_dims[d] = sg.idx_dims[d];
    g.data_strides[d] = sg.data_strides[d];
  }
  const std::string kernel_src =
      kernel_source(ksrc::kScatterAdd, {{"T", storage_type(data.dtype)}, {"I", storage_type(idx.dtype)}});
  auto l = std::make_shared<KernelLaunch>(what, get_kernel("scatter_add", kernel_src), grid_for(n, 256), 256);
  l->arg(cx.ptr(idx)).arg(cx.ptr(upd)).arg(out).arg(g).arg(n).arg(cx.error_flag());
  push_launch(cx, l);
}

void lower_grouped_matmul(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::GroupedMatMulGeom>(st.geom);
  const plan::TensorRef &x = st.in.at(0), &w = st.in.at(1), &idx = st.in.at(2);
  const DType t = x.dtype;
  if (!cuda_float(t) || w.dtype != t) throw Error(what + ": CUDA grouped_matmul needs x and w of one float dtype");
  if (g.m == 0) return;
  const uint8_t* wp = cx.ptr(w);
  // 16-byte weight loads when every weight row starts 16-byte aligned.
  const int64_t vw16 = 16 / static_cast<int64_t>(dtype_size(t));
  const bool vec = (g.n * static_cast<int64_t>(dtype_size(t))) % 16 == 0 && reinterpret_cast<uintptr_t>(wp) % 16 == 0;
  const int64_t vw = vec ? vw16 : 1;
  const std::string src = kernel_source(ksrc::kGroupedMatMul, {{"T", storage_type(t)}, {"I", storage_type(idx.dtype)}},
                                        "#define VW " + std::to_string(vw) + "\n");
  const int64_t gx = std::max<int64_t>(1, (g.n + 32 * vw - 1) / (32 * vw));
  const int64_t gy = std::min<int64_t>(g.m, 65535);
  // Split k over blocks until about two waves of blocks are busy (decode-sized m).
  const int64_t want = 2 * int64_t(device().sm_count);
  int64_t chunks = std::clamp<int64_t>((want + gx * gy - 1) / (gx * gy), 1, std::max<int64_t>(1, g.k / 64));
  const int64_t kchunk = std::max<int64_t>(1, (g.k + chunks - 1) / chunks);
  chunks = std::max<int64_t>(1, (g.k + kchunk - 1) / kchunk);
  float* part = nullptr;
  if (chunks > 1)
    part = reinterpret_cast<float*>(
        cx.scratch(static_cast<size_t>(chunks * g.m * g.n) * sizeof(float), what + " k-split partial sums"));
  auto l = std::make_shared<KernelLaunch>(what, get_kernel("grouped_gemv", src), static_cast<unsigned>(gx), 256, 0,
                                          static_cast<unsigned>(gy), static_cast<unsigned>(chunks));
  l->arg(cx.ptr(x)).arg(wp).arg(cx.ptr(idx)).arg(cx.ptr(st.out.at(0))).arg(part).arg(g.m).arg(g.k).arg(g.n)
      .arg(g.experts).arg(kchunk).arg(cx.error_flag());
  push_launch(cx, l);
  if (part && g.n > 0) {
    auto f = std::make_shared<KernelLaunch>(what, get_kernel("grouped_finish", src), grid_for(g.m * g.n, 256), 256);
    f->arg(static_cast<const float*>(part)).arg(cx.ptr(st.out.at(0))).arg(g.m).arg(g.n).arg(chunks);
    push_launch(cx, f);
  }
}

}  // namespace rlx::cuda
