// CPU kernel of CacheWrite: the S new rows of a KV cache written at run-time positions. When
// the memory plan writes the output over the cache input (an input the runtime owns, see
// plan/memory_plan.h), only those rows move; otherwise the cache is copied first (counted in
// cpu::copied_bytes, executor.h).
#include <cstring>
#include <string>

#include "backends/cpu/executor.h"
#include "backends/cpu/kernels.h"

namespace rlx::cpu {

void kernel(const ops::CacheWrite&, KernelContext& ctx) {
  const Tensor& cache = ctx.in[0];
  const Tensor& rows = ctx.in[1];
  const Tensor& pos = ctx.in[2];
  Tensor& out = ctx.out[0];
  const int64_t b = cache.dim(0), m = cache.dim(1), s = rows.dim(1);
  // (S) positions shared by the batch, or (B, S): one row of positions per batch entry.
  const bool per_batch = pos.shape().size() == 2;
  const int64_t np = per_batch ? b * s : s;
  if (pos.numel() != np || rows.dim(0) != b)
    throw Error("cache_write: positions " + dims_str(pos.shape()) + " for rows " + dims_str(rows.shape()) +
                " and cache " + dims_str(cache.shape()) + "; give one position per row ((S) or (B, S)) and the "
                "cache's batch");
  // Every position is checked before anything is written: a bad one leaves the cache as it was.
  std::vector<int64_t> at(static_cast<size_t>(np));
  for (int64_t i = 0; i < np; ++i) {
    const int64_t p = pos.dtype() == DType::I32 ? pos.data<int32_t>()[i] : pos.data<int64_t>()[i];
    if (p < 0 || p >= m)
      throw Error("cache_write: position " + std::to_string(p) + " (" +
                  (per_batch ? "batch " + std::to_string(i / s) + ", row " + std::to_string(i % s)
                             : "row " + std::to_string(i)) +
                  ") is outside the cache's " + std::to_string(m) + " rows " + dims_str(cache.shape()) +
                  "; positions must be in [0, " + std::to_string(m) + ") (a longer sequence needs a larger cache)");
    at[static_cast<size_t>(i)] = p;
  }
  const size_t row_bytes = static_cast<size_t>(cache.numel() / std::max<int64_t>(b * m, 1)) * dtype_size(cache.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const auto* src = static_cast<const uint8_t*>(rows.raw());
  if (out.raw() != cache.raw() && cache.nbytes() > 0) {
    std::memcpy(dst, cache.raw(), cache.nbytes());
    note_copied_bytes(cache.nbytes());
  }
  if (row_bytes == 0) return;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s; ++i)  // in order: the later of two rows at one position wins
      std::memcpy(dst + static_cast<size_t>(bi * m + at[static_cast<size_t>(per_batch ? bi * s + i : i)]) * row_bytes,
                  src + static_cast<size_t>(bi * s + i) * row_bytes, row_bytes);
}

}  // namespace rlx::cpu
