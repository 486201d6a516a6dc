// Every elementwise chain the WGSL capability table accepts compiles as WGSL in Dawn's compiler
// (Tint), with the bind group layout the WebGPU backend gives it: each activation and binary for
// every dtype, compares, where, the casts between every pair of dtypes WGSL holds, regions with
// error flags. (The GLSL printer gets the same in tests/codegen with glslang.)
#include <gtest/gtest.h>

#include "codegen/chain_test_util.h"
#include "codegen/elementwise.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/wgpu_pipelines.h"
#endif

namespace rlx::codegen {
namespace {

#ifdef RLX_HAVE_WEBGPU
using namespace chain_test;

int g_kernel = 0;

void wgsl_compiles(const std::vector<RegionStep>& steps, const std::vector<DType>& in, const plan::ElementwiseGeom& g) {
  const auto dts = chain_step_dtypes(steps, in);
  const auto p = plan_elementwise(steps, in, dts.back(), g, 1);
  const std::string src = print_wgsl_elementwise(p);
  std::vector<webgpu::BindingKind> kinds{webgpu::BindingKind::ReadWrite};
  for (size_t k = 0; k < in.size(); ++k) kinds.push_back(webgpu::BindingKind::Read);
  if (wgsl_error_flag(p)) kinds.push_back(webgpu::BindingKind::ReadWrite);
  kinds.push_back(webgpu::BindingKind::Uniform);
  try {
    webgpu::pipeline_for("codegen_test_" + std::to_string(g_kernel++), src, kinds);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what() << "\n" << src;
  }
}

TEST(WebGpuCodegen, ActivationsCompileForEveryDtypeTheTableAccepts) {
  RLX_REQUIRE_WEBGPU();
  int compiled = 0;
  for (int k = 0; k <= static_cast<int>(ActKind::Not); ++k)
    for (DType t : kAllDTypes) {
      const std::vector<RegionStep> chain = {act(static_cast<ActKind>(k), 0)};
      if (!chain_supported(wgsl_language(), chain, {t})) continue;
      SCOPED_TRACE(std::string(enum_name(static_cast<ActKind>(k))) + " " + dtype_name(t));
      wgsl_compiles(chain, {t}, geom({37}, {{1}}));
      ++compiled;
    }
  EXPECT_GT(compiled, 25 * 3 + 4 * 5);
}

TEST(WebGpuCodegen, BinariesComparesAndWhereCompileForEveryDtype) {
  RLX_REQUIRE_WEBGPU();
  int compiled = 0;
  for (DType t : kAllDTypes) {
    if (!wgsl_language().storage_dtype(t)) continue;
    for (int k = 0; k <= static_cast<int>(BinaryKind::Xor); ++k) {
      const std::vector<RegionStep> chain = {bin(static_cast<BinaryKind>(k), 0, 1)};
      if (!chain_supported(wgsl_language(), chain, {t, t})) continue;
      SCOPED_TRACE(std::string(enum_name(static_cast<BinaryKind>(k))) + " " + dtype_name(t));
      wgsl_compiles(chain, {t, t}, geom({5, 7}, {{7, 1}, {0, 1}}));  // broadcast: strided path
      ++compiled;
    }
    for (int k = 0; k <= static_cast<int>(CompareKind::Ge); ++k)
      wgsl_compiles({cmp(static_cast<CompareKind>(k), 0, 1)}, {t, t}, geom({16}, {{1}, {1}}));
    wgsl_compiles({where(0, 1, 2)}, {DType::Bool, t, t}, geom({4, 4}, {{4, 1}, {0, 0}, {4, 1}}));
  }
  EXPECT_GT(compiled, 40);
}

TEST(WebGpuCodegen, CastsCompileBetweenEveryPairOfDtypesWgslHolds) {
  RLX_REQUIRE_WEBGPU();
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      if (!wgsl_language().storage_dtype(from) || !wgsl_language().storage_dtype(to)) continue;
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      wgsl_compiles({cast(to, 0)}, {from}, geom({64}, {{1}}));
    }
}

TEST(WebGpuCodegen, RegionsWithErrorFlagsCompile) {
  RLX_REQUIRE_WEBGPU();
  wgsl_compiles({bin(BinaryKind::Mul, 0, 1), bin(BinaryKind::Add, -1, 2), act(ActKind::Gelu, -2)},
                {DType::BF16, DType::BF16, DType::BF16}, geom({128}, {{1}, {0}, {1}}));
  wgsl_compiles({bin(BinaryKind::Mod, 0, 1), cmp(CompareKind::Gt, -1, 1), where(-2, 0, 1)}, {DType::I64, DType::I64},
                geom({3, 4, 5}, {{20, 5, 1}, {0, 1, 0}}));
  wgsl_compiles({bin(BinaryKind::Mul, 0, 1), bin(BinaryKind::Pow, -1, 1)}, {DType::I64, DType::I64},
                geom({8}, {{1}, {1}}));
}
#endif

}  // namespace
}  // namespace rlx::codegen
