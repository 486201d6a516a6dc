// Binary, Compare, Where, Activation, Cast and ElementwiseRegion steps: one generated kernel each.
#include <atomic>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "rlx/error.h"

namespace rlx::cuda {

namespace {
constexpr unsigned kBlock = 256;         // threads per block
constexpr int64_t kTinyGridBlocks = 4;   // grids this small launch early (see add_elementwise)
std::atomic<uint64_t> g_early{0};
}  // namespace

uint64_t elementwise_early_launches() { return g_early.load(std::memory_order_relaxed); }

void add_elementwise(LowerContext& cx, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     DType out_dtype, const plan::ElementwiseGeom& geom, uint8_t* out,
                     const std::vector<const uint8_t*>& ins, const std::string& what) {
  if (geom.numel == 0) return;
  // The widest vector every pointer's alignment allows.
  int max_vec = 8;
  auto fits = [&](const void* p, size_t elem, int v) { return reinterpret_cast<uintptr_t>(p) % (elem * v) == 0; };
  for (; max_vec > 1; max_vec /= 2) {
    bool ok = fits(out, dtype_size(out_dtype), max_vec);
    for (size_t k = 0; k < ins.size(); ++k) ok = ok && fits(ins[k], dtype_size(in_dtypes[k]), max_vec);
    if (ok) break;
  }
  // A kernel of a few blocks launches early (after another rlx kernel) and lets the next one
  // launch before its own wait: it holds at most a few multiprocessors while it waits, and a chain
  // of such kernels then no longer holds back the next kernel's work before its wait (at the start
  // of a decode step: the RoPE tables, then the first QKV product, whose weight loads now overlap
  // the tables; measured in docs/benchmarks.md, session 18). RLX_CUDA_TINY_EARLY=0: off.
  const int64_t early_max_items = cx.knobs().cuda_tiny_early() ? kTinyGridBlocks * kBlock : 0;
  const ElementwiseKernel k = make_elementwise_kernel(steps, in_dtypes, out_dtype, geom, max_vec, early_max_items);
  auto launch = std::make_shared<KernelLaunch>(what, get_kernel(k.entry, k.source), grid_for(k.items, kBlock), kBlock);
  if (k.early_dependents) {
    launch->pdl_prefetch();
    g_early.fetch_add(1, std::memory_order_relaxed);
  } else {
    launch->pdl();
  }
  launch->arg(out);
  for (const uint8_t* p : ins) launch->arg(p);
  if (k.error_flag) launch->arg(cx.error_flag());
  cx.add([launch](cudaStream_t s) { launch->launch(s); });
}

void lower_elementwise(LowerContext& cx, const plan::Step& st) {
  const auto& geom = std::get<plan::ElementwiseGeom>(st.geom);
  std::vector<DType> in_dtypes;
  std::vector<const uint8_t*> ins;
  for (const auto& r : st.in) {
    in_dtypes.push_back(r.dtype);
    ins.push_back(cx.ptr(r));
  }
  add_elementwise(cx, single_step_chain(st.op), in_dtypes, st.out.at(0).dtype, geom, cx.ptr(st.out.at(0)), ins,
                  step_label(st));
}

}  // namespace rlx::cuda
