// CacheWrite on CUDA (kernels/cache.h): the cache copied to the output unless the plan writes the
// output over it, then the new rows written at their positions.
#include <algorithm>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/cache.h"
#include "backends/cuda/select_lower.h"
#include "backends/cuda/status.h"
#include "rlx/error.h"

namespace rlx::cuda {

static_assert(codegen::kErrCachePosition == 9, "kernels/cache.h writes error 9");

void lower_cache_write(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef &cache = st.in.at(0), &rows = st.in.at(1), &pos = st.in.at(2);
  if (rows.dtype != cache.dtype) throw Error(what + ": CUDA cache_write needs rows of the cache's dtype");
  if (pos.dtype != DType::I32 && pos.dtype != DType::I64)
    throw Error(what + ": CUDA cache_write takes i32 or i64 positions, not " + std::string(dtype_name(pos.dtype)));
  const int64_t b = cache.dims.at(0), m = cache.dims.at(1), s = rows.dims.at(1);
  const int64_t inner = b * m > 0 ? cache.numel() / (b * m) : 0;
  const uint8_t* src = cx.ptr(cache);
  uint8_t* out = cx.ptr(st.out.at(0));
  const size_t bytes = static_cast<size_t>(cache.numel()) * dtype_size(cache.storage());
  if (bytes > 0 && src != out)
    cx.add([src, out, bytes](cudaStream_t strm) {
      RLX_CUDA_CHECK(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, strm));
    });
  if (rows.numel() == 0) return;
  const int64_t nrows = rows.dims.at(0) * s;  // (B, S) rows of `inner` values (the cache's row size)
  const int64_t row_values = rows.numel() / nrows;
  if (inner != row_values && b * m > 0)
    throw Error(what + ": CUDA cache_write needs rows of the cache's row size (it should have been verified)");
  const std::string kernel_src =
      kernel_source(ksrc::kCacheWrite, {{"T", storage_type(cache.dtype)}, {"I", storage_type(pos.dtype)}});
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(nrows, 65535));
  auto l = std::make_shared<KernelLaunch>(what, get_kernel("cache_write", kernel_src), blocks, 128u);
  l->arg(cx.ptr(pos)).arg(cx.ptr(rows)).arg(out).arg(s).arg(m).arg(row_values).arg(nrows).arg(cx.error_flag());
  push_launch(cx, l);
}

}  // namespace rlx::cuda
