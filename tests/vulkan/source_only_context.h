#pragma once
// A Vulkan LowerContext without a device, for tests of kernels lavapipe cannot run (cooperative
// matrices): operands at offset 0, the lowered kernels collected so that the test compiles their
// GLSL (expect_glsl_compiles). `dev` says what the pretended device has; the NVIDIA constructor
// pretends NVIDIA's (subgroups of 32, 48 KiB of shared memory, f16, shuffles,
// VK_NV_cooperative_matrix when `coopmat`), compiling for `precision` with the knob
// vulkan_coopmat set to `coopmat_knob`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "backends/vulkan/vk_context.h"
#include "runtime/knobs.h"

namespace rlx::testing {

class SourceOnlyContext : public vulkan::LowerContext {
 public:
  explicit SourceOnlyContext(const CompileOptions& o) : options_(o), knobs_(resolve_knobs(o)) {}
  SourceOnlyContext(Precision precision, bool coopmat, bool coopmat_knob)
      : SourceOnlyContext(nvidia_options(precision, coopmat_knob)) {
    dev.float16 = dev.storage16 = dev.int16 = true;
    dev.subgroup_size = 32;
    dev.subgroup_shuffle = dev.subgroup_arith = true;
    dev.max_invocations = 1024;
    dev.max_shared_bytes = 49152;
    dev.max_groups[0] = dev.max_groups[1] = dev.max_groups[2] = 0x7fffffffu;
    dev.storage_alignment = 16;
    dev.coopmat_nv = coopmat;
  }
  vulkan::DeviceInfo dev;
  std::vector<vulkan::Kernel> kernels;
  const CompileOptions& options() const override { return options_; }
  const ResolvedKnobs& knobs() const override { return knobs_; }
  const vulkan::DeviceInfo& info() const override { return dev; }
  vulkan::Operand in(const plan::TensorRef& r) override { return window(r.numel() * dtype_size(r.dtype), false); }
  vulkan::Operand out(const plan::TensorRef& r) override { return window(r.numel() * dtype_size(r.dtype), true); }
  vulkan::Operand scratch(size_t bytes, const std::string&) override { return window(bytes, true); }
  vulkan::Operand table(const std::vector<uint32_t>& words, const std::string&) override {
    return window(words.size() * 4, false);
  }
  vulkan::Operand error_flag() override { return window(4, true); }
  void dispatch(const vulkan::Kernel& k, const std::vector<vulkan::Operand>&, const std::vector<uint32_t>&, uint32_t,
                uint32_t, uint32_t) override {
    kernels.push_back(k);
  }
  void copy(const vulkan::Operand&, const vulkan::Operand&, uint64_t) override {}
  void fill(const vulkan::Operand&, uint64_t, uint32_t) override {}

 private:
  static CompileOptions nvidia_options(Precision precision, bool coopmat_knob) {
    CompileOptions o;
    o.precision = precision;
    o.tuning.vulkan_coopmat = coopmat_knob;
    return o;
  }
  static vulkan::Operand window(uint64_t bytes, bool write) {
    vulkan::Operand o;
    o.range = o.bytes = std::max<uint64_t>(bytes, 4);
    o.write = write;
    return o;
  }
  CompileOptions options_;
  ResolvedKnobs knobs_;
};

// EXPECT that kernel k's GLSL compiles to SPIR-V (the source in the message when it does not).
inline void expect_glsl_compiles(const vulkan::Kernel& k) {
  std::vector<uint32_t> words;
  std::string error;
  EXPECT_TRUE(vulkan::compile_glsl(k.source, &words, &error)) << error << "\n" << k.source;
}

// EXPECT that kernel k asks for the KHR rewrite `want` (spirv_coopmat.h), that its GLSL compiles
// and that its SPIR-V takes the rewrite.
inline void expect_khr_rewrite(const vulkan::Kernel& k, vulkan::KhrRewrite want) {
  EXPECT_EQ(vulkan::khr_rewrite_of(k.source), want) << k.name;
  std::vector<uint32_t> words;
  std::string error;
  ASSERT_TRUE(vulkan::compile_glsl(k.source, &words, &error)) << error << "\n" << k.source;
  EXPECT_NO_THROW(vulkan::coopmat_nv_to_khr(words, k.name, want == vulkan::KhrRewrite::Bf16));
}

}  // namespace rlx::testing
