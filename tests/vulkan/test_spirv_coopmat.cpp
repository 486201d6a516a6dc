// The NV -> KHR cooperative-matrix rewrite, with and without bf16 A / B operands (spirv_coopmat.h). No SPIR-V
// tool in Debian 12 knows the KHR matrices or bf16 (and lavapipe runs no cooperative matrices), so
// the rewritten modules are checked here by their words: every NV instruction gone, each matrix
// type's Use read off the products, the A / B components the bf16 type, loads and stores with the
// layout of their column-major flag, the capabilities and extensions; the kernels run on GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "rlx/error.h"
#endif

namespace {

#ifdef RLX_HAVE_VULKAN

using namespace rlx;

std::vector<uint32_t> compile(const std::string& body) {
  const std::string src = std::string(vulkan::kKhrBf16Directive) +
                          "#version 450\n#extension GL_NV_cooperative_matrix : require\n"
                          "#extension GL_KHR_memory_scope_semantics : require\n"
                          "#extension GL_EXT_shader_explicit_arithmetic_types : require\n"
                          "layout(local_size_x = 32) in;\n" +
                          vulkan::kCoopmatBTypeDecl +
                          "layout(set = 0, binding = 0) buffer In { uint16_t data[]; } X;\n"
                          "layout(set = 0, binding = 1) buffer Out { float data[]; } Y;\n"
                          "shared uint16_t S[1024];\n"
                          "#define MA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>\n"
                          "#define MB fcoopmatNV<16, gl_ScopeSubgroup, CM_B16, CM_B16>\n"
                          "#define MC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>\n"
                          "void main() {\n  S[gl_LocalInvocationID.x] = X.data[gl_LocalInvocationID.x];\n  barrier();\n" +
                          body + "}\n";
  EXPECT_EQ(vulkan::khr_rewrite_of(src), vulkan::KhrRewrite::Bf16);
  std::vector<uint32_t> words;
  std::string error;
  EXPECT_TRUE(vulkan::compile_glsl(src, &words, &error)) << error << "\n" << src;
  return words;
}

struct Module {
  std::vector<std::vector<uint32_t>> insts;
  std::map<uint32_t, size_t> count;  // opcode -> instructions
  std::map<uint32_t, std::vector<uint32_t>> by_id;  // result id (word 1 of types, 2 of constants) -> instruction
  std::vector<std::string> extensions;
  std::vector<uint32_t> capabilities;
};

Module parse(const std::vector<uint32_t>& w) {
  Module m;
  for (size_t p = 5; p < w.size();) {
    const uint32_t wc = w[p] >> 16, op = w[p] & 0xffffu;
    EXPECT_GT(wc, 0u);
    if (wc == 0 || p + wc > w.size()) break;
    std::vector<uint32_t> i(w.begin() + static_cast<std::ptrdiff_t>(p), w.begin() + static_cast<std::ptrdiff_t>(p + wc));
    ++m.count[op];
    if (op == 21 || op == 22 || op == 4456) m.by_id[i[1]] = i;  // OpTypeInt, OpTypeFloat, OpTypeCooperativeMatrixKHR
    if (op == 43) m.by_id[i[2]] = i;                            // OpConstant
    if (op == 17) m.capabilities.push_back(i[1]);
    if (op == 10) m.extensions.emplace_back(reinterpret_cast<const char*>(&i[1]));
    m.insts.push_back(std::move(i));
    p += wc;
  }
  return m;
}

uint32_t constant_value(const Module& m, uint32_t id) {
  auto it = m.by_id.find(id);
  EXPECT_NE(it, m.by_id.end());
  return it == m.by_id.end() ? ~0u : it->second.at(3);
}

TEST(SpirvCoopmat, RewritesProductsLoadsAndStores) {
  const auto nv = compile(
      "  MA a; MB b; MC c = MC(0.0);\n"
      "  coopMatLoadNV(a, S, 0u, 16u, false);\n"
      "  coopMatLoadNV(b, S, 256u, 16u, true);\n"
      "  c = coopMatMulAddNV(a, b, c);\n"
      "  c = coopMatMulAddNV(a, b, c);\n"
      "  coopMatStoreNV(c, Y.data, 0u, 16u, true);\n");
  ASSERT_FALSE(nv.empty());
  const Module before = parse(nv);
  ASSERT_EQ(before.count.count(5358), 1u);
  EXPECT_EQ(before.count.at(5358), 3u);  // three NV matrix types

  const std::vector<uint32_t> khr = vulkan::coopmat_nv_to_khr(nv, "test", true);
  EXPECT_EQ(khr[0], nv[0]);
  EXPECT_EQ(khr[1], nv[1]);                // SPIR-V version kept
  EXPECT_EQ(khr[3], nv[3] + 4);            // three Use / layout constants and the bf16 type
  const Module m = parse(khr);
  for (uint32_t op : {5358u, 5359u, 5360u, 5361u, 5362u}) EXPECT_EQ(m.count.count(op), 0u) << "NV opcode " << op;
  EXPECT_EQ(m.count.at(4456), 3u);  // types
  EXPECT_EQ(m.count.at(4457), 2u);  // loads
  EXPECT_EQ(m.count.at(4458), 1u);  // store
  EXPECT_EQ(m.count.at(4459), 2u);  // products
  // Each type: A and B of bf16 (OpTypeFloat 16 with encoding 0), the accumulator f32.
  std::map<uint32_t, int> uses;
  for (const auto& [id, t] : m.by_id) {
    if ((t[0] & 0xffffu) != 4456) continue;
    const uint32_t use = constant_value(m, t[6]);
    ++uses[use];
    const auto& comp = m.by_id.at(t[2]);
    ASSERT_EQ(comp[0] & 0xffffu, 22u);
    if (use == 2) {
      EXPECT_EQ(comp.size(), 3u);
      EXPECT_EQ(comp[2], 32u);
    } else {
      ASSERT_EQ(comp.size(), 4u) << "A / B component without the bf16 encoding";
      EXPECT_EQ(comp[2], 16u);
      EXPECT_EQ(comp[3], 0u);
    }
  }
  EXPECT_EQ(uses, (std::map<uint32_t, int>{{0, 1}, {1, 1}, {2, 1}}));
  // Loads: (type, id, pointer, layout, stride, ...): the A load row-major, the B load column-major;
  // the store (pointer, object, layout, stride, ...) column-major.
  std::vector<uint32_t> load_layouts;
  for (const auto& i : m.insts) {
    if ((i[0] & 0xffffu) == 4457) load_layouts.push_back(constant_value(m, i[4]));
    if ((i[0] & 0xffffu) == 4458) {
      EXPECT_EQ(constant_value(m, i[3]), 1u);
    }
  }
  EXPECT_EQ(load_layouts, (std::vector<uint32_t>{0, 1}));
  // Capabilities and extensions.
  auto has_cap = [&](uint32_t c) { return std::find(m.capabilities.begin(), m.capabilities.end(), c) != m.capabilities.end(); };
  EXPECT_TRUE(has_cap(6022));
  EXPECT_TRUE(has_cap(5116));
  EXPECT_TRUE(has_cap(5118));
  EXPECT_FALSE(has_cap(5357));
  EXPECT_NE(std::find(m.extensions.begin(), m.extensions.end(), "SPV_KHR_cooperative_matrix"), m.extensions.end());
  EXPECT_NE(std::find(m.extensions.begin(), m.extensions.end(), "SPV_KHR_bfloat16"), m.extensions.end());
  EXPECT_EQ(std::find(m.extensions.begin(), m.extensions.end(), "SPV_NV_cooperative_matrix"), m.extensions.end());
  // Every instruction but the new ones kept its words.
  EXPECT_EQ(m.insts.size(), before.insts.size() + 3 + 1 + 2 + 1);  // constants, bf16, capabilities, extension
}

// An f32 accumulator converted to an A matrix (attention's P) is allowed: f32 -> bf16.
TEST(SpirvCoopmat, ConvertsAccumulatorsToOperands) {
  const auto nv = compile(
      "  MC c = MC(0.0); MB b;\n"
      "  coopMatLoadNV(c, Y.data, 0u, 16u, false);\n"
      "  coopMatLoadNV(b, S, 0u, 16u, false);\n"
      "  MA p = MA(c);\n"
      "  c = coopMatMulAddNV(p, b, c);\n"
      "  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n");
  EXPECT_NO_THROW(vulkan::coopmat_nv_to_khr(nv, "convert", true));
}

// Components of values that are not matrices (a vector shuffle's, an extended instruction's)
// are read freely beside bf16 matrices.
TEST(SpirvCoopmat, Bf16AllowsComponentsOfOtherValues) {
  const auto nv = compile(
      "  MA a; MB b; MC c = MC(0.0);\n"
      "  coopMatLoadNV(a, S, 0u, 16u, false);\n"
      "  coopMatLoadNV(b, S, 256u, 16u, true);\n"
      "  c = coopMatMulAddNV(a, b, c);\n"
      "  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n"
      "  vec2 v = vec2(Y.data[1], Y.data[2]).yx;\n"
      "  Y.data[3] = v.x + normalize(vec2(Y.data[4], 1.0)).y;\n");
  EXPECT_NO_THROW(vulkan::coopmat_nv_to_khr(nv, "components", true));
}

void expect_refused(const std::vector<uint32_t>& words, const std::string& part) {
  try {
    vulkan::coopmat_nv_to_khr(words, "bad kernel", true);
    ADD_FAILURE() << "no error (expected one saying '" << part << "')";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad kernel"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(SpirvCoopmat, RefusesWhatBf16CannotMean) {
  // A and B of one GLSL type: one SPIR-V type in two roles.
  expect_refused(compile("  MA a; MC c = MC(0.0);\n  coopMatLoadNV(a, S, 0u, 16u, false);\n"
                         "  c = coopMatMulAddNV(a, a, c);\n  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n"),
                 "both");
  // An A matrix computed on as f16.
  expect_refused(compile("  MA a; MB b; MC c = MC(0.0);\n  coopMatLoadNV(a, S, 0u, 16u, false);\n"
                         "  coopMatLoadNV(b, S, 0u, 16u, false);\n  a = a * float16_t(2.0);\n"
                         "  c = coopMatMulAddNV(a, b, c);\n  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n"),
                 "computed");
  // A constant A matrix (f16 zeros are not bf16 zeros by type).
  expect_refused(compile("  MA a = MA(0.0); MB b; MC c = MC(0.0);\n  coopMatLoadNV(b, S, 0u, 16u, false);\n"
                         "  c = coopMatMulAddNV(a, b, c);\n  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n"),
                 "computed");
  // A component of a B matrix read as f16.
  expect_refused(compile("  MA a; MB b; MC c = MC(0.0);\n  coopMatLoadNV(a, S, 0u, 16u, false);\n"
                         "  coopMatLoadNV(b, S, 0u, 16u, false);\n  c = coopMatMulAddNV(a, b, c);\n"
                         "  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n  Y.data[400] = float(b[0]);\n"),
                 "component");
  // A matrix type in no product.
  expect_refused(compile("  MC c;\n  coopMatLoadNV(c, Y.data, 0u, 16u, false);\n"
                         "  coopMatStoreNV(c, Y.data, 256u, 16u, false);\n"),
                 "no product");
  // Not SPIR-V; truncated.
  expect_refused({1, 2, 3}, "not a SPIR-V module");
  auto ok = compile("  MA a; MB b; MC c = MC(0.0);\n  coopMatLoadNV(a, S, 0u, 16u, false);\n"
                    "  coopMatLoadNV(b, S, 0u, 16u, false);\n  c = coopMatMulAddNV(a, b, c);\n"
                    "  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n");
  ok.back() = 0xffff0000u | (ok.back() & 0xffffu);  // the last instruction claims 65535 words
  expect_refused(ok, "truncated");
}

// Without bf16 operands: the same KHR types and instructions with the f16 components kept (and
// f16 arithmetic on A / B allowed); nothing bf16 in the module.
TEST(SpirvCoopmat, KeepsF16ComponentsWithoutBf16) {
  const auto nv = compile(
      "  MA a; MB b; MC c = MC(0.0);\n"
      "  coopMatLoadNV(a, S, 0u, 16u, false);\n"
      "  coopMatLoadNV(b, S, 256u, 16u, true);\n"
      "  a = a * float16_t(2.0);\n"
      "  c = coopMatMulAddNV(a, b, c);\n"
      "  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n");
  const std::vector<uint32_t> khr = vulkan::coopmat_nv_to_khr(nv, "f16", false);
  EXPECT_EQ(khr[3], nv[3] + 3);  // the three Use / layout constants only
  const Module before = parse(nv), m = parse(khr);
  for (uint32_t op : {5358u, 5359u, 5360u, 5361u}) EXPECT_EQ(m.count.count(op), 0u) << "NV opcode " << op;
  EXPECT_EQ(m.count.at(4456), 3u);
  EXPECT_EQ(m.count.at(4459), 1u);
  std::map<uint32_t, int> uses;
  for (const auto& [id, t] : m.by_id) {
    if ((t[0] & 0xffffu) != 4456) continue;
    ++uses[constant_value(m, t[6])];
    const auto& comp = m.by_id.at(t[2]);
    EXPECT_EQ(comp.size(), 3u) << "a component with an encoding";
    EXPECT_EQ(comp[2], constant_value(m, t[6]) == 2 ? 32u : 16u);
  }
  EXPECT_EQ(uses, (std::map<uint32_t, int>{{0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(std::find(m.capabilities.begin(), m.capabilities.end(), 5116u), m.capabilities.end());
  EXPECT_NE(std::find(m.capabilities.begin(), m.capabilities.end(), 6022u), m.capabilities.end());
  EXPECT_EQ(std::find(m.extensions.begin(), m.extensions.end(), "SPV_KHR_bfloat16"), m.extensions.end());
  EXPECT_EQ(m.insts.size(), before.insts.size() + 3);
  // One type in two roles is refused without bf16 too.
  try {
    vulkan::coopmat_nv_to_khr(compile("  MA a; MC c = MC(0.0);\n  coopMatLoadNV(a, S, 0u, 16u, false);\n"
                                      "  c = coopMatMulAddNV(a, a, c);\n  coopMatStoreNV(c, Y.data, 0u, 16u, false);\n"),
                              "two roles", false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("both"), std::string::npos) << e.what();
  }
}

TEST(SpirvCoopmat, DirectivesAreReadFromTheFirstLine) {
  using vulkan::KhrRewrite;
  EXPECT_EQ(vulkan::khr_rewrite_of("#version 450\nvoid main() {}\n"), KhrRewrite::None);
  EXPECT_EQ(vulkan::khr_rewrite_of(std::string("#version 450\n") + vulkan::kKhrBf16Directive), KhrRewrite::None);
  EXPECT_EQ(vulkan::khr_rewrite_of(std::string(vulkan::kKhrDirective) + "#version 450\n"), KhrRewrite::F16);
  EXPECT_EQ(vulkan::khr_rewrite_of(std::string(vulkan::kKhrBf16Directive) + "#version 450\n"), KhrRewrite::Bf16);
}

#endif  // RLX_HAVE_VULKAN

}  // namespace
