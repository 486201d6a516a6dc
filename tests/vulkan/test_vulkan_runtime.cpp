// Vulkan runtime behaviour: the device and its features, a schedule recorded once and
// re-submitted (counted), barriers only between dependent commands, new inputs and params read
// by every run, bad data reported through the error flag, and the validation layer silent.
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/glsl_compile.h"
#include "backends/vulkan/variant.h"
#include "backends/vulkan/vk_context.h"
#include "runtime/device_api.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::random_tensor;

TEST(VulkanRuntime, UnavailableIsAClearError) {
  const std::string reason = rlx::testing::vulkan_unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a Vulkan device is present: the missing-device error cannot be observed";
#ifdef RLX_HAVE_VULKAN
  EXPECT_EQ(reason.rfind("no Vulkan device: ", 0), 0u) << reason;
#else
  EXPECT_NE(reason.find("not available in this build"), std::string::npos) << reason;
#endif
}

#ifdef RLX_HAVE_VULKAN
TEST(VulkanRuntime, DeviceIsListedWithItsFeatures) {
  RLX_REQUIRE_VULKAN();
  const auto& info = vulkan::context().info;
  const auto devices = vulkan::list_devices();
  ASSERT_FALSE(devices.empty());
  bool used = false;
  for (const auto& d : devices) used = used || d.find("(used)") != std::string::npos;
  EXPECT_TRUE(used);
  EXPECT_GT(info.max_storage_range, 0u);
  EXPECT_GE(info.subgroup_size, 1u);
  std::cout << "[ vulkan   ] " << info.name << ": subgroup " << info.subgroup_size << ", f16 " << info.float16
            << ", int64 " << info.int64 << ", f64 " << info.float64 << ", 8-bit storage " << info.storage8
            << ", max binding " << info.max_storage_range << " B, shared " << info.max_shared_bytes
            << " B, coopmat KHR/NV/NV2 " << info.coopmat_khr << "/" << info.coopmat_nv << "/" << info.coopmat2_nv << ", bf16 matrices " << info.coopmat_bf16
            << ", timestamps " << (info.timestamp_ns > 0) << "\n";
}

Graph chain_graph() {
  Graph g;
  const Value x = g.input("x", Shape::of({3, 1000}));
  const Value b = g.param("b", Shape::of({1000}));
  const Value h = g.gelu(g.add(x, b));        // one kernel
  g.add_output(g.mul(h, g.sigmoid(x)));        // fused or not, it reads h
  return g;
}

TEST(VulkanRuntime, RecordedOnceAndResubmitted) {
  RLX_REQUIRE_VULKAN();
  auto cg = Session(Device::Vulkan).compile(chain_graph());
  auto cpu = Session(Device::Cpu).compile(chain_graph());
  const auto before = vulkan::vulkan_stats();
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Tensor b = random_tensor(DType::F32, {1000}, seed + 10);
    cg.set_param("b", b);
    cpu.set_param("b", b);
    const Tensor x = random_tensor(DType::F32, {3, 1000}, seed);
    const Tensor got = cg.run({{"x", x}})[0];
    EXPECT_TRUE(rlx::testing::all_close(got, {3, 1000}, rlx::testing::to_doubles(cpu.run({{"x", x}})[0]),
                                        rlx::testing::parity_tolerance(DType::F32)));
  }
  const auto after = vulkan::vulkan_stats();
  EXPECT_EQ(after.recordings - before.recordings, 0u) << "compiled before `before`: no new recording at run time";
  EXPECT_EQ(after.submits - before.submits, 3u);
}

TEST(VulkanRuntime, IndependentCommandsShareNoBarrier) {
  RLX_REQUIRE_VULKAN();
  // Two independent elementwise ops then one reading both: one barrier (before the third).
  Graph g;
  const Value x = g.input("x", Shape::of({256}));
  const Value y = g.input("y", Shape::of({256}));
  const Value a = g.exp(x);
  const Value b = g.sub(g.scalar(0.0), y);
  g.add_output(a);
  g.add_output(b);
  g.add_output(g.sub(a, b));
  CompileOptions o;
  o.optimize = false;
  const auto before = vulkan::vulkan_stats();
  auto cg = Session(Device::Vulkan).compile(g, o);
  const auto after = vulkan::vulkan_stats();
  EXPECT_EQ(after.recordings - before.recordings, 1u);
  EXPECT_EQ(after.barriers - before.barriers, 1u);
  const Tensor xt = random_tensor(DType::F32, {256}, 1), yt = random_tensor(DType::F32, {256}, 2);
  const auto r = cg.run({{"x", xt}, {"y", yt}});
  for (int i = 0; i < 256; ++i) {
    const float want = std::exp(xt.data<float>()[i]) + yt.data<float>()[i];
    EXPECT_NEAR(r[2].data<float>()[i], want, 1e-5f * std::max(1.0f, std::fabs(want)));
  }
}

TEST(VulkanRuntime, IntegerDivisionByZeroIsAnError) {
  RLX_REQUIRE_VULKAN();
  Graph g;
  const Value a = g.input("a", Shape::of({4}, DType::I32));
  const Value b = g.input("b", Shape::of({4}, DType::I32));
  g.add_output(g.div(a, b));
  auto cg = Session(Device::Vulkan).compile(g);
  const std::vector<int32_t> av = {7, 8, 9, 10}, okv = {1, 2, 3, 4}, badv = {1, 0, 3, 4};
  const Tensor a1 = Tensor::i32({4}, av), ok = Tensor::i32({4}, okv), bad = Tensor::i32({4}, badv);
  EXPECT_EQ(cg.run({{"a", a1}, {"b", ok}})[0].data<int32_t>()[1], 4);
  try {
    cg.run({{"a", a1}, {"b", bad}});
    ADD_FAILURE() << "division by zero ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Vulkan"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cg.run({{"a", a1}, {"b", ok}})[0].data<int32_t>()[3], 2);  // the next run is clean
}

TEST(VulkanRuntime, ShadersAreCachedPerProcess) {
  RLX_REQUIRE_VULKAN();
  auto c1 = Session(Device::Vulkan).compile(chain_graph());
  const auto s1 = vulkan::shader_cache_stats();
  auto c2 = Session(Device::Vulkan).compile(chain_graph());
  const auto s2 = vulkan::shader_cache_stats();
  EXPECT_EQ(s2.compiled, s1.compiled);
  EXPECT_EQ(s2.disk_hits, s1.disk_hits);
}

TEST(VulkanRuntime, NoValidationErrors) {
  RLX_REQUIRE_VULKAN();
  // Meaningful under RLX_VULKAN_VALIDATION=1 (the ctest entry vulkan_validation sets it): every
  // Vulkan test of this process ran with the layer, and it reported nothing.
  for (const auto& m : vulkan::validation_messages()) ADD_FAILURE() << m;
  EXPECT_EQ(vulkan::validation_error_count(), 0u);
}
#endif

}  // namespace

namespace {
using namespace rlx;

// f32 -> f16 -> f32 in one fused kernel at the edges of f16 rounding: ties to even, the
// largest finite value and the first that rounds to inf, subnormals, signed zeros, NaN.
TEST(VulkanRuntime, HalfRoundingAtTheEdgesMatchesTheCpu) {
  RLX_REQUIRE_VULKAN();
  const std::vector<float> v = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                                6.0e-8f, 2.98e-8f, 2.99e-8f, 1.0e-5f, -0.0f, 0.0f, 3.0e38f,
                                std::numeric_limits<float>::quiet_NaN(), 0.1f, -1234.567f};
  Graph g;
  const Value x = g.input("x", Shape::of({static_cast<int64_t>(v.size())}));
  g.add_output(g.mul(g.cast(g.cast(x, DType::F16), DType::F32), g.scalar(1.0)));
  const NamedTensors in = {{"x", Tensor::f32({static_cast<int64_t>(v.size())}, v)}};
  const auto got = Session(Device::Vulkan).compile(g).run(in)[0].to_f32();
  const auto want = Session(Device::Cpu).compile(g).run(in)[0].to_f32();
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &got[i], 4), std::memcpy(&b, &want[i], 4);
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << v[i];
    else EXPECT_EQ(a, b) << "x = " << v[i] << ": vulkan " << got[i] << ", cpu " << want[i];
  }
}
}  // namespace
