// The shared elementwise kernel plan and its printers: the plan's decisions, each language's
// capability table, GLSL output compiled (and validated) as Vulkan SPIR-V with glslang, and
// WGSL output held to golden files (tests/codegen/golden; RLX_UPDATE_GOLDEN=1 rewrites them).
#include <fstream>
#include <sstream>

#include "codegen/chain_test_util.h"
#include "codegen/elementwise.h"
#include "support/shader_compile.h"
#include "support/test_util.h"

namespace rlx::codegen {
namespace {

using namespace chain_test;

TEST(ElementwisePlan, ClassifiesInputsAndPicksTheVectorWidth) {
  const std::vector<RegionStep> add = {bin(BinaryKind::Add, 0, 1)};
  auto p = plan_elementwise(add, {DType::F32, DType::F32}, DType::F32, geom({8, 8}, {{8, 1}, {0, 0}}), 8);
  EXPECT_EQ(p.access, (std::vector<InputAccess>{InputAccess::Contiguous, InputAccess::Scalar}));
  EXPECT_TRUE(p.dense);
  EXPECT_EQ(p.vec, 4);  // 16 bytes of f32
  EXPECT_EQ(p.items, 16);
  p = plan_elementwise(add, {DType::F32, DType::F32}, DType::F32, geom({8, 8}, {{8, 1}, {0, 1}}), 8);
  EXPECT_EQ(p.access[1], InputAccess::Strided);
  EXPECT_FALSE(p.dense);
  EXPECT_EQ(p.vec, 1);
  p = plan_elementwise(add, {DType::F32, DType::F32}, DType::F32, geom({6}, {{1}, {1}}), 8);
  EXPECT_EQ(p.vec, 2);  // the largest width dividing 6
  p = plan_elementwise(add, {DType::F32, DType::F32}, DType::F32, geom({64}, {{1}, {1}}), 1);
  EXPECT_EQ(p.vec, 1);
  EXPECT_FALSE(p.wide_index);
  p = plan_elementwise(add, {DType::F32, DType::F32}, DType::F32, geom({int64_t(1) << 31}, {{1}, {0}}), 1);
  EXPECT_TRUE(p.wide_index);
  EXPECT_THROW(plan_elementwise(add, {DType::F32, DType::F32}, DType::F16, geom({4}, {{1}, {1}}), 1), Error);
  EXPECT_THROW(plan_elementwise(add, {DType::F32}, DType::F32, geom({4}, {{1}}), 1), Error);  // reads input 1
}

TEST(ElementwisePlan, FlagsIntegerDivisionForErrorReporting) {
  const std::vector<RegionStep> div = {bin(BinaryKind::Div, 0, 1)};
  EXPECT_TRUE(plan_elementwise(div, {DType::I32, DType::I32}, DType::I32, geom({4}, {{1}, {1}}), 1).error_flag);
  EXPECT_FALSE(plan_elementwise(div, {DType::F32, DType::F32}, DType::F32, geom({4}, {{1}, {1}}), 1).error_flag);
}

TEST(LanguageCaps, SayWhatEachLanguageCannotDo) {
  std::string why;
  const std::vector<RegionStep> exp = {act(ActKind::Exp, 0)}, relu = {act(ActKind::Relu, 0)};
  EXPECT_TRUE(chain_supported(cuda_language(), exp, {DType::F64}, &why)) << why;
  EXPECT_FALSE(chain_supported(glsl_language(), exp, {DType::F64}, &why));
  EXPECT_NE(why.find("needs exp"), std::string::npos) << why;
  EXPECT_TRUE(chain_supported(glsl_language(), relu, {DType::F64}, &why)) << why;
  EXPECT_FALSE(chain_supported(wgsl_language(), relu, {DType::F64}, &why));
  EXPECT_NE(why.find("WGSL kernels cannot hold f64"), std::string::npos) << why;
  EXPECT_EQ(wgsl_language().storage_dtype(DType::Bool), DType::U32);
  EXPECT_EQ(wgsl_language().storage_dtype(DType::I64), DType::I32);
  EXPECT_EQ(wgsl_language().storage_dtype(DType::F16), DType::F32);
  for (LangId l : {LangId::Cuda, LangId::Glsl, LangId::Wgsl}) {
    EXPECT_FALSE(chain_supported(language(l), exp, {DType::I32}, &why)) << lang_name(l);
    EXPECT_FALSE(chain_supported(language(l), {bin(BinaryKind::Add, 0, 1)}, {DType::Bool, DType::Bool}, &why));
    EXPECT_TRUE(chain_supported(language(l), {bin(BinaryKind::Xor, 0, 1)}, {DType::Bool, DType::Bool}, &why)) << why;
  }
}

// ---- GLSL: every chain the capability table accepts compiles to valid Vulkan SPIR-V ----

void glsl_compiles(const std::vector<RegionStep>& steps, const std::vector<DType>& in, const plan::ElementwiseGeom& g,
                   int max_vec = 1) {
  const auto dts = chain_step_dtypes(steps, in);
  const auto p = plan_elementwise(steps, in, dts.back(), g, max_vec);
  const std::string src = print_glsl_elementwise(p);
  std::string err;
  EXPECT_TRUE(testing::glsl_compiles_to_valid_spirv(src, &err)) << err << "\n" << src;
}

TEST(GlslElementwise, ActivationsCompileForEveryDtypeTheTableAccepts) {
  if (!testing::have_glsl_compiler()) GTEST_SKIP() << testing::no_glsl_compiler_reason();
  int compiled = 0;
  for (int k = 0; k <= static_cast<int>(ActKind::Not); ++k)
    for (DType t : kAllDTypes) {
      const std::vector<RegionStep> chain = {act(static_cast<ActKind>(k), 0)};
      if (!chain_supported(glsl_language(), chain, {t})) continue;
      SCOPED_TRACE(std::string(enum_name(static_cast<ActKind>(k))) + " " + dtype_name(t));
      glsl_compiles(chain, {t}, geom({37}, {{1}}));
      ++compiled;
    }
  EXPECT_GT(compiled, 25 * 3 + 4 * 5);  // every float formula on f32/f16/bf16, integer ones on every int
}

TEST(GlslElementwise, BinariesComparesAndWhereCompileForEveryDtype) {
  if (!testing::have_glsl_compiler()) GTEST_SKIP() << testing::no_glsl_compiler_reason();
  int compiled = 0;
  for (DType t : kAllDTypes) {
    if (!glsl_language().storage_dtype(t)) continue;  // u16, u64, float8, int4, ...: CPU only
    for (int k = 0; k <= static_cast<int>(BinaryKind::Xor); ++k) {
      const std::vector<RegionStep> chain = {bin(static_cast<BinaryKind>(k), 0, 1)};
      if (!chain_supported(glsl_language(), chain, {t, t})) continue;
      SCOPED_TRACE(std::string(enum_name(static_cast<BinaryKind>(k))) + " " + dtype_name(t));
      glsl_compiles(chain, {t, t}, geom({5, 7}, {{7, 1}, {0, 1}}));  // broadcast: strided path
      ++compiled;
    }
    for (int k = 0; k <= static_cast<int>(CompareKind::Ge); ++k)
      glsl_compiles({cmp(static_cast<CompareKind>(k), 0, 1)}, {t, t}, geom({16}, {{1}, {1}}));
    glsl_compiles({where(0, 1, 2)}, {DType::Bool, t, t}, geom({4, 4}, {{4, 1}, {0, 0}, {4, 1}}));
  }
  EXPECT_GT(compiled, 40);
}

TEST(GlslElementwise, CastsCompileBetweenEveryPairOfDtypes) {
  if (!testing::have_glsl_compiler()) GTEST_SKIP() << testing::no_glsl_compiler_reason();
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      if (!glsl_language().storage_dtype(from) || !glsl_language().storage_dtype(to)) continue;
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      glsl_compiles({cast(to, 0)}, {from}, geom({64}, {{1}}), 4);
    }
}

TEST(GlslElementwise, RegionsWithVectorsAndErrorFlagsCompile) {
  if (!testing::have_glsl_compiler()) GTEST_SKIP() << testing::no_glsl_compiler_reason();
  // gelu(a * b + c) rounded through bf16 steps, four elements per invocation.
  glsl_compiles({bin(BinaryKind::Mul, 0, 1), bin(BinaryKind::Add, -1, 2), act(ActKind::Gelu, -2)},
                {DType::BF16, DType::BF16, DType::BF16}, geom({128}, {{1}, {0}, {1}}), 4);
  // An integer Mod (error flag) feeding a compare and a where.
  glsl_compiles({bin(BinaryKind::Mod, 0, 1), cmp(CompareKind::Gt, -1, 1), where(-2, 0, 1)},
                {DType::I64, DType::I64}, geom({3, 4, 5}, {{20, 5, 1}, {0, 1, 0}}));
  EXPECT_THROW(print_glsl_elementwise(plan_elementwise({act(ActKind::Relu, 0)}, {DType::F32}, DType::F32,
                                                       geom({int64_t(1) << 32}, {{1}}), 1)),
               Error);
}

// ---- WGSL: golden files (the WebGPU backend will validate them with its compiler) ----

void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(RLX_SOURCE_DIR) + "/tests/codegen/golden/" + name;
  if (const char* u = std::getenv("RLX_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden file " << path << " (run with RLX_UPDATE_GOLDEN=1 to write it)";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(text, ss.str()) << "golden " << name << " differs (RLX_UPDATE_GOLDEN=1 rewrites it after review)";
}

std::string wgsl(const std::vector<RegionStep>& steps, const std::vector<DType>& in, const plan::ElementwiseGeom& g,
                 const std::vector<int>& binding_of = {}) {
  const auto dts = chain_step_dtypes(steps, in);
  return print_wgsl_elementwise(plan_elementwise(steps, in, dts.back(), g, 1), binding_of);
}

TEST(WgslElementwise, MatchesGoldenFiles) {
  check_golden("gelu_f32.wgsl", wgsl({act(ActKind::Gelu, 0)}, {DType::F32}, geom({1000}, {{1}})));
  check_golden("add_broadcast_i32.wgsl",
               wgsl({bin(BinaryKind::Add, 0, 1)}, {DType::I32, DType::I32}, geom({3, 5}, {{5, 1}, {1, 0}})));
  check_golden("where_f16_bool.wgsl", wgsl({cmp(CompareKind::Lt, 0, 1), where(-1, 0, 1)}, {DType::F16, DType::F16},
                                           geom({64}, {{1}, {0}})));
  check_golden("div_u8_error_flag.wgsl",
               wgsl({bin(BinaryKind::Div, 0, 1)}, {DType::U8, DType::U8}, geom({32}, {{1}, {1}})));
  // In place: the output and input 0 share one read_write binding.
  check_golden("silu_bf16_in_place.wgsl",
               wgsl({act(ActKind::Silu, 0), bin(BinaryKind::Max, -1, 1)}, {DType::BF16, DType::BF16},
                    geom({256}, {{1}, {1}}), {0, 0, 1}));
}

TEST(WgslElementwise, RejectsWhatWgslCannotHold) {
  EXPECT_THROW(wgsl({act(ActKind::Relu, 0)}, {DType::F64}, geom({4}, {{1}})), Error);
  EXPECT_THROW(wgsl({act(ActKind::Relu, 0)}, {DType::F32}, geom({4}, {{1}}), {0}), Error);     // one entry short
  EXPECT_THROW(wgsl({act(ActKind::Relu, 0)}, {DType::F32}, geom({4}, {{1}}), {0, 2}), Error);  // binding 1 unused
}

}  // namespace
}  // namespace rlx::codegen
