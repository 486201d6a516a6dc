// CacheWrite on CUDA (kernels/cache.h): the cache copied to the output unless the plan writes the
// output over it, then the new rows written at their positions.
#include <algorithm>

#include "backends/cuda/cuda_types.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/kernels/cache.h"
#include "backends/cuda/select_lower.h"
#include "backends/cuda/status.h"
#include "plan/absorb_plans.h"
#include "rlx/error.h"

namespace rlx::cuda {

static_assert(codegen::kErrCachePosition == 9, "kernels/cache.h writes error 9");

namespace {
// The cache copied to the output unless the plan writes the output over it; returns the rows
// of `inner` values to write and their dims (batch B x S rows).
struct CacheRows {
  const uint8_t* rows = nullptr;
  uint8_t* out = nullptr;
  int64_t s = 0, m = 0, inner = 0, nrows = 0;
};
CacheRows prepare_cache_write(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::TensorRef &cache = st.in.at(0), &rows = st.in.at(1), &pos = st.in.at(2);
  if (rows.dtype != cache.dtype) throw Error(what + ": CUDA cache_write needs rows of the cache's dtype");
  if (pos.dtype != DType::I32 && pos.dtype != DType::I64)
    throw Error(what + ": CUDA cache_write takes i32 or i64 positions, not " + std::string(dtype_name(pos.dtype)));
  CacheRows c;
  const int64_t b = cache.dims.at(0);
  c.m = cache.dims.at(1), c.s = rows.dims.at(1);
  c.inner = b * c.m > 0 ? cache.numel() / (b * c.m) : 0;
  const uint8_t* src = cx.ptr(cache);
  c.out = cx.ptr(st.out.at(0));
  const size_t bytes = static_cast<size_t>(cache.numel()) * dtype_size(cache.storage());
  if (bytes > 0 && src != c.out)
    cx.add([src, out = c.out, bytes](cudaStream_t strm) {
      RLX_CUDA_CHECK(cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, strm));
    });
  if (rows.numel() == 0) return c;
  c.rows = cx.ptr(rows);
  c.nrows = rows.dims.at(0) * c.s;  // (B, S) rows of `inner` values (the cache's row size)
  if (c.inner != rows.numel() / c.nrows && b * c.m > 0)
    throw Error(what + ": CUDA cache_write needs rows of the cache's row size (it should have been verified)");
  return c;
}

// The step of op kind Op that `st` absorbed, or null: the paired first CacheWrite
// (plan::plan_cache_write_pairs) or the Rope of its rows (plan::plan_cache_write_ropes).
template <class Op>
const plan::Step* absorbed(LowerContext& cx, const plan::Step& st) {
  for (const plan::Step* p : cx.absorbed_producers(st))
    if (std::holds_alternative<Op>(p->op)) return p;
  return nullptr;
}
}  // namespace

// One launch for the step and, when the variant paired it with an earlier CacheWrite of the
// same positions and shapes (plan::plan_cache_write_pairs), that one's rows too (grid.y = 2).
// Rows that are an absorbed RoPE's result (plan::plan_cache_write_ropes) are read from the
// rope's input and rotated as they are written; of two such ropes with different tables, the
// first one's step runs before.
void lower_cache_write(LowerContext& cx, const plan::Step& st) {
  const plan::Step* first = absorbed<ops::CacheWrite>(cx, st);
  const plan::Step* rope_c = absorbed<ops::Rope>(cx, st);
  const plan::Step* rope_a = first ? absorbed<ops::Rope>(cx, *first) : nullptr;
  if (rope_a && rope_c && !plan::same_rotation(*rope_a, *rope_c)) {
    lower_step(cx, *rope_a);
    rope_a = nullptr;
  }
  CacheRows a = first ? prepare_cache_write(cx, *first) : CacheRows{};
  CacheRows c = prepare_cache_write(cx, st);
  if (c.nrows == 0) return;
  if (rope_a) a.rows = cx.ptr(rope_a->in.at(0));
  if (rope_c) c.rows = cx.ptr(rope_c->in.at(0));
  const plan::Step* rope = rope_c ? rope_c : rope_a;
  const int rot = (rope_a ? 2 : 0) | (rope_c ? 1 : 0);
  const plan::TensorRef &cache = st.in.at(0), &pos = st.in.at(2);
  const DType tc = rope ? rope->in.at(1).dtype : cache.dtype;
  const std::string kernel_src = kernel_source(
      ksrc::kCacheWrite, {{"T", storage_type(cache.dtype)}, {"I", storage_type(pos.dtype)}, {"TC", storage_type(tc)}},
      rope ? "#define ROPE 1\n" : "#define ROPE 0\n");
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(c.nrows, 65535));
  auto l = std::make_shared<KernelLaunch>(step_label(st), get_kernel("cache_write", kernel_src), blocks, 128u, 0u,
                                          first ? 2u : 1u);
  // blockIdx.y 0 writes c, 1 writes a: bit 0 of rot is c's rope, bit 1 a's.
  l->arg(cx.ptr(pos)).arg(c.rows).arg(c.out).arg(first ? a.rows : c.rows).arg(first ? a.out : c.out).arg(c.s).arg(c.m)
      .arg(c.inner).arg(c.nrows).arg(cx.error_flag()).arg(pos.dims.size() == 2 ? 1 : 0);
  if (rope) {
    const auto& rg = std::get<plan::RopeGeom>(rope->geom);
    l->arg(cx.ptr(rope->in.at(1))).arg(cx.ptr(rope->in.at(2))).arg(rg.head_dim).arg(rg.n_rot)
        .arg(rg.per_batch ? 1 : 0).arg(std::get<ops::Rope>(rope->op).style == RopeStyle::NeoX ? 1 : 0).arg(rot);
  } else {
    l->arg(static_cast<const uint8_t*>(nullptr)).arg(static_cast<const uint8_t*>(nullptr)).arg(int64_t{1})
        .arg(int64_t{0}).arg(0).arg(0).arg(0);
  }
  push_launch(cx, l);
}

}  // namespace rlx::cuda
