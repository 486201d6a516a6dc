// The CUDA side of generated elementwise kernels: the shared kernel plan (codegen/elementwise.h)
// printed in CUDA C++, behind the CUDA prelude and its elementwise helpers.
#include "backends/cuda/elementwise_codegen.h"

#include "backends/cuda/cuda_types.h"
#include "codegen/elementwise.h"
#include "rlx/error.h"

namespace rlx::cuda {

std::vector<RegionStep> single_step_chain(const Op& op) { return codegen::single_step_chain(op); }

bool elementwise_supported(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes, std::string* why) {
  return codegen::chain_supported(codegen::cuda_language(), steps, in_dtypes, why);
}

ElementwiseKernel make_elementwise_kernel(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                          DType out_dtype, const plan::ElementwiseGeom& geom, int max_vec,
                                          int64_t early_max_items) {
  const codegen::ElementwisePlan p = codegen::plan_elementwise(steps, in_dtypes, out_dtype, geom, max_vec);
  ElementwiseKernel k;
  k.entry = "rlx_elementwise";
  k.early_dependents = p.items <= early_max_items;
  k.source = std::string(kernel_prelude()) + "#define RLX_ERR_INT_DIV_ZERO " + std::to_string(kErrIntDivZero) +
             "\n#define RLX_ERR_INT_POW_ZERO " + std::to_string(kErrIntPowZero) + "\n" + kElementwiseHelpers +
             codegen::print_cuda_elementwise(p, k.early_dependents);
  k.error_flag = p.error_flag;
  k.vec = p.vec;
  k.items = p.items;
  return k;
}

std::string float_activation_expr(ActKind k, const std::string& x) {
  codegen::Helpers unused;  // CUDA spells every function natively
  return codegen::print_activation(k, *codegen::cuda_language().float_printer(DType::F32, unused), x);
}

std::string elementwise_error_message(int code) { return codegen::kernel_error_message(code, "CUDA"); }

}  // namespace rlx::cuda
