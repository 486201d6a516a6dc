// WebGPU runtime behaviour: the adapter and its limits, the library's ABI checked at start-up, a
// schedule encoded on every run from bind groups made once, new inputs and params read by every
// run, storage dtypes converted at the host boundary (i64 held as i32 words, f16 as f32 words),
// bad data reported through the error flag, and a missing library or adapter as a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/variant.h"
#include "backends/webgpu/wgpu_context.h"
#include "backends/webgpu/wgpu_pipelines.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::random_tensor;

TEST(WebGpuRuntime, UnavailableIsAClearError) {
  const std::string reason = rlx::testing::webgpu_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a WebGPU adapter is present: the missing-device error cannot be observed";
#ifdef RLX_HAVE_WEBGPU
  EXPECT_EQ(reason.rfind("no WebGPU device: ", 0), 0u) << reason;
#else
  EXPECT_NE(reason.find("not available in this build"), std::string::npos) << reason;
#endif
}

#ifdef RLX_HAVE_WEBGPU
TEST(WebGpuRuntime, AdapterIsNamedWithItsLimits) {
  RLX_REQUIRE_WEBGPU();
  const auto& info = webgpu::context().info;
  EXPECT_NE(info.backend, "Null");
  EXPECT_GE(info.limits.max_storage_buffer_binding_size, 128ull << 20);
  EXPECT_GE(info.limits.max_compute_invocations_per_workgroup, 256u);
  std::cout << "[ webgpu   ] " << info.name << " (" << info.backend << ", " << info.adapter_type << ")"
            << (info.driver.empty() ? "" : ", driver " + info.driver) << ": f16 " << info.shader_f16 << ", subgroups "
            << info.subgroups << " (" << info.subgroup_min << "-" << info.subgroup_max << "), timestamps "
            << info.timestamps << ", max binding " << info.limits.max_storage_buffer_binding_size << " B, workgroup "
            << info.limits.max_compute_workgroup_storage_size << " B\n";
}

Graph chain_graph() {
  Graph g;
  const Value x = g.input("x", Shape::of({3, 1000}));
  const Value b = g.param("b", Shape::of({1000}));
  const Value h = g.gelu(g.add(x, b));
  g.add_output(g.mul(h, g.sigmoid(x)));
  return g;
}

TEST(WebGpuRuntime, NewInputsAndParamsEveryRun) {
  RLX_REQUIRE_WEBGPU();
  CompileOptions unfused;
  unfused.optimize = false;  // several kernels, each reading the previous one's output
  for (const CompileOptions& o : {CompileOptions{}, unfused}) {
    auto cg = Session(Device::WebGpu).compile(chain_graph(), o);
    auto cpu = Session(Device::Cpu).compile(chain_graph(), o);
    const auto before = webgpu::webgpu_stats();
    for (uint64_t seed : {1u, 2u, 3u}) {
      const Tensor b = random_tensor(DType::F32, {1000}, seed + 10);
      cg.set_param("b", b);
      cpu.set_param("b", b);
      const Tensor x = random_tensor(DType::F32, {3, 1000}, seed);
      const Tensor got = cg.run({{"x", x}})[0];
      EXPECT_TRUE(rlx::testing::all_close(got, {3, 1000}, rlx::testing::to_doubles(cpu.run({{"x", x}})[0]),
                                          rlx::testing::parity_tolerance(DType::F32)));
    }
    const auto after = webgpu::webgpu_stats();
    EXPECT_EQ(after.submits - before.submits, 3u);
    EXPECT_EQ(after.variants - before.variants, 0u) << "no variant prepared at run time";
  }
}

TEST(WebGpuRuntime, StorageDtypesConvertAtTheBoundary) {
  RLX_REQUIRE_WEBGPU();
  // i64 is held as i32 words, f16 as f32 words rounded to f16, bool and u8 as u32 words.
  Graph g;
  const Value a = g.input("a", Shape::of({5}, DType::I64));
  const Value h = g.input("h", Shape::of({4}, DType::F16));
  const Value m = g.input("m", Shape::of({4}, DType::Bool));
  g.add_output(g.add(a, a));
  g.add_output(g.where(m, g.mul(h, h), h));
  auto cg = Session(Device::WebGpu).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  const std::vector<int64_t> va{1, -2, 3, 1 << 20, -(1 << 29)};
  const Tensor ta = Tensor::i64({5}, va);
  const Tensor th = random_tensor(DType::F16, {4}, 7);
  const std::vector<uint8_t> vm{1, 0, 1, 0};
  const Tensor tm = Tensor::boolean({4}, vm);
  const auto got = cg.run({{"a", ta}, {"h", th}, {"m", tm}});
  const auto want = cpu.run({{"a", ta}, {"h", th}, {"m", tm}});
  ASSERT_EQ(got[0].dtype(), DType::I64);
  EXPECT_EQ(rlx::testing::to_doubles(got[0]), rlx::testing::to_doubles(want[0]));
  ASSERT_EQ(got[1].dtype(), DType::F16);
  EXPECT_EQ(rlx::testing::to_doubles(got[1]), rlx::testing::to_doubles(want[1]));
  // A value i32 words cannot hold is an error naming the input, not a wrap.
  const std::vector<int64_t> vbig{1, 2, 3, int64_t{1} << 40, 5};
  const Tensor big = Tensor::i64({5}, vbig);
  try {
    cg.run({{"a", big}, {"h", th}, {"m", tm}});
    FAIL() << "an i64 beyond i32 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
}

TEST(WebGpuRuntime, IntegerDivisionByZeroIsAnError) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value a = g.input("a", Shape::of({4}, DType::I32));
  const Value b = g.input("b", Shape::of({4}, DType::I32));
  g.add_output(g.div(a, b));
  auto cg = Session(Device::WebGpu).compile(g);
  const std::vector<int32_t> va{7, 8, 9, 10}, vok{1, 2, 3, 4}, vzero{1, 0, 3, 4};
  const Tensor ta = Tensor::i32({4}, va), ok = Tensor::i32({4}, vok), zero = Tensor::i32({4}, vzero);
  EXPECT_EQ(rlx::testing::to_doubles(cg.run({{"a", ta}, {"b", ok}})[0]), (std::vector<double>{7, 4, 3, 2}));
  try {
    cg.run({{"a", ta}, {"b", zero}});
    FAIL() << "division by zero was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WebGPU"), std::string::npos) << e.what();
  }
  // The flag is cleared for the next run.
  EXPECT_EQ(rlx::testing::to_doubles(cg.run({{"a", ta}, {"b", ok}})[0]), (std::vector<double>{7, 4, 3, 2}));
}

TEST(WebGpuRuntime, BadWgslIsAnErrorNamingTheKernel) {
  RLX_REQUIRE_WEBGPU();
  try {
    webgpu::pipeline_for("broken", "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
                         {webgpu::BindingKind::Uniform});
    FAIL() << "invalid WGSL was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'broken'"), std::string::npos) << m;
    EXPECT_NE(m.find("WGSL"), std::string::npos) << m;
  }
}

TEST(WebGpuRuntime, AValueLargerThanABindingIsAnErrorAtCompile) {
  RLX_REQUIRE_WEBGPU();
  // One value just above the adapter's largest binding: the plan refuses it, naming the limit,
  // before anything is allocated.
  const uint64_t limit = webgpu::context().info.limits.max_storage_buffer_binding_size;
  const int64_t n = static_cast<int64_t>(limit / 4 + 1024);
  Graph g;
  g.add_output(g.relu(g.input("x", Shape::of({n}))));
  try {
    Session(Device::WebGpu).compile(g);
    FAIL() << "a value of " << n * 4 << " bytes was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("WebGPU"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(limit)), std::string::npos) << m;
  }
}

TEST(WebGpuRuntime, UnclaimedOpIsAClearError) {
  RLX_REQUIRE_WEBGPU();
  // RngNormal (the CPU's double-precision Box-Muller) is not claimed: compiling names the node,
  // the op, WebGPU and why.
  Graph g;
  ops::RngNormal n;
  n.shape = Shape::of({2, 8}, DType::F32);
  g.add_output(g.apply(n, {}));
  try {
    Session(Device::WebGpu).compile(g);
    FAIL() << "rng_normal compiled for WebGPU, which does not claim it";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("WebGPU"), std::string::npos) << m;
    EXPECT_NE(m.find("rng_normal"), std::string::npos) << m;
    EXPECT_NE(m.find("double"), std::string::npos) << m;
  }
}
#endif

}  // namespace
