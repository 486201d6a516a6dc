// Binary, Compare, Where, Activation, Cast and ElementwiseRegion steps: one generated kernel each.
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "rlx/error.h"

namespace rlx::cuda {

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
  const ElementwiseKernel k = make_elementwise_kernel(steps, in_dtypes, out_dtype, geom, max_vec);
  auto launch = std::make_shared<KernelLaunch>(what, get_kernel(k.entry, k.source), grid_for(k.items, 256), 256);
  launch->pdl();
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
