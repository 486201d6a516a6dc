// bind_state on every GPU backend of the parity registry (tests/support/devices.h): carried
// values stay in device memory (rlx::device_stats counts every copy between host and device) and
// agree with the CPU, also when two carried values trade places and when the carried value
// changes shape (then it moves through the host once per change).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "runtime/device_api.h"
#include "support/devices.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using rlx::testing::TestDevice;

class DeviceState : public ::testing::TestWithParam<std::string> {
 protected:
  const TestDevice& dev() const {
    for (const TestDevice& d : rlx::testing::test_devices())
      if (d.name == GetParam()) return d;
    throw Error("no test device " + GetParam());
  }
  Device device() const { return dev().device; }
};

Graph cache_step(int64_t t, int64_t d);

// Why a device whose op coverage is still growing (TestDevice::skip_unclaimed) cannot compile
// these tests' graphs ("" when it can).
std::string unclaimed(const TestDevice& d) {
  if (!d.skip_unclaimed) return "";
  try {
    Session(d.device).compile(cache_step(4, 8));
  } catch (const Error& e) {
    if (std::string(e.what()).find("cannot run") != std::string::npos) return e.what();
  }
  return "";
}

// Skips (printing why) when the device cannot run here.
#define RLX_REQUIRE_DEVICE()                                                                \
  do {                                                                                      \
    const std::string rlx_why_ = dev().unavailable ? dev().unavailable() : std::string();   \
    if (!rlx_why_.empty()) GTEST_SKIP() << dev().name << " is not available: " << rlx_why_; \
    const std::string rlx_gap_ = unclaimed(dev());                                          \
    if (!rlx_gap_.empty()) GTEST_SKIP() << dev().name << " does not run these graphs yet: " << rlx_gap_; \
  } while (0)

// One decode step over a fixed-size cache [t, d]: the new row k = tanh(x @ wk) is written at the
// one-hot position `pos` ([t, 1]); the output attends from k over the updated cache.
Graph cache_step(int64_t t, int64_t d) {
  Graph g;
  const Value cache = g.input("cache", Shape::of({t, d}));
  const Value x = g.input("x", Shape::of({1, d}));
  const Value pos = g.input("pos", Shape::of({t, 1}));
  const Value wk = g.param("wk", Shape::of({d, d}));
  const Value k = g.tanh(g.matmul(x, wk));
  const Value next = g.add(cache, g.mul(pos, g.sub(k, cache)));
  g.add_output(next, "cache_next");
  const Value att = g.softmax(g.matmul(k, g.transpose(next, {1, 0})));
  g.add_output(g.matmul(att, next), "out");
  return g;
}

Tensor one_hot(int64_t t, int64_t i) {
  std::vector<float> v(static_cast<size_t>(t), 0.0f);
  v[static_cast<size_t>(i % t)] = 1.0f;
  return Tensor::f32({t, 1}, v);
}

constexpr rlx::testing::Tolerance kLoose{1e-3, 1e-4};  // a few steps of f32 products

TEST_P(DeviceState, DecodeLoopMovesNoCarriedStateThroughTheHost) {
  RLX_REQUIRE_DEVICE();
  const int64_t t = 256, d = 128;
  const Graph g = cache_step(t, d);
  auto gpu = Session(device()).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  const Tensor wk = rlx::testing::random_tensor(DType::F32, {d, d}, 11, -0.2, 0.2);
  gpu.set_param("wk", wk);
  cpu.set_param("wk", wk);
  gpu.bind_state("cache", 0);
  cpu.bind_state("cache", 0);
  const Tensor cache0 = Tensor::zeros(DType::F32, {t, d});
  const Tensor x0 = rlx::testing::random_tensor(DType::F32, {1, d}, 100);
  auto expect_close = [](const Tensor& got, const Tensor& want, const char* what, int step) {
    EXPECT_TRUE(rlx::testing::all_close(got, want.shape(), rlx::testing::to_doubles(want), kLoose)) << what << " step " << step;
  };
  expect_close(gpu.run({{"cache", cache0}, {"x", x0}, {"pos", one_hot(t, 0)}}, {1})[0],
               cpu.run({{"cache", cache0}, {"x", x0}, {"pos", one_hot(t, 0)}}, {1})[0], "out", 0);

  const int steps = 16;
  const size_t x_bytes = static_cast<size_t>(d) * 4, pos_bytes = static_cast<size_t>(t) * 4;
  const size_t out_bytes = static_cast<size_t>(d) * 4, cache_bytes = static_cast<size_t>(t * d) * 4;
  const DeviceStats before = device_stats();
  for (int i = 1; i <= steps; ++i) {
    const Tensor x = rlx::testing::random_tensor(DType::F32, {1, d}, 100 + static_cast<uint64_t>(i));
    const Tensor got = gpu.run({{"x", x}, {"pos", one_hot(t, i)}}, {1})[0];
    const DeviceStats mid = device_stats();
    expect_close(got, cpu.run({{"x", x}, {"pos", one_hot(t, i)}}, {1})[0], "out", i);
    EXPECT_EQ(device_stats().uploads, mid.uploads) << "the CPU run moved nothing on the device";
  }
  const DeviceStats after = device_stats();
  // Per step: x and pos go up, `out` comes back, the cache moves once on the device.
  EXPECT_EQ(after.uploads - before.uploads, 2u * steps);
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, steps * (x_bytes + pos_bytes));
  EXPECT_EQ(after.downloads - before.downloads, 1u * steps);
  EXPECT_EQ(after.download_bytes - before.download_bytes, steps * out_bytes);
  EXPECT_EQ(after.device_copy_bytes - before.device_copy_bytes, steps * cache_bytes);
  EXPECT_EQ(after.param_uploads, before.param_uploads);
  std::printf("[ decode  ] %d steps: %llu bytes up, %llu bytes down, %llu bytes carried on the device\n", steps,
              static_cast<unsigned long long>(after.upload_bytes - before.upload_bytes),
              static_cast<unsigned long long>(after.download_bytes - before.download_bytes),
              static_cast<unsigned long long>(after.device_copy_bytes - before.device_copy_bytes));

  // The carried cache comes back only when asked for, and matches the CPU's.
  const Tensor x = rlx::testing::random_tensor(DType::F32, {1, d}, 999);
  const DeviceStats last = device_stats();
  const Tensor cache = gpu.run({{"x", x}, {"pos", one_hot(t, steps + 1)}}, {0})[0];
  EXPECT_EQ(device_stats().download_bytes - last.download_bytes, cache_bytes);
  expect_close(cache, cpu.run({{"x", x}, {"pos", one_hot(t, steps + 1)}}, {0})[0], "cache", steps + 1);
}

TEST_P(DeviceState, CarriedValuesTradingPlacesMatchTheCpu) {
  RLX_REQUIRE_DEVICE();
  // a_next = b (the input as it came in), b_next = a + 1: a's value sits in b's buffer, which
  // b's own carry overwrites (double-buffered on the device).
  Graph g;
  const Value a = g.input("a", Shape::of({1000}));
  const Value b = g.input("b", Shape::of({1000}));
  g.add_output(b, "a_next");
  g.add_output(g.add(a, g.scalar(1.0)), "b_next");
  g.add_output(g.mul(a, b), "y");
  auto gpu = Session(device()).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  for (auto* cg : {&gpu, &cpu}) {
    cg->bind_state("a", 0);
    cg->bind_state("b", 1);
  }
  const Tensor a0 = rlx::testing::random_tensor(DType::F32, {1000}, 1), b0 = rlx::testing::random_tensor(DType::F32, {1000}, 2);
  NamedTensors first = {{"a", a0}, {"b", b0}};
  for (int i = 0; i < 6; ++i) {
    const NamedTensors in = i == 0 ? first : NamedTensors{};
    const DeviceStats before = device_stats();
    const auto got = gpu.run(in, {2});
    if (i > 0) {
      EXPECT_EQ(device_stats().upload_bytes, before.upload_bytes) << "step " << i;
    }
    const auto want = cpu.run(in, {2});
    EXPECT_TRUE(rlx::testing::all_close(got[0], {1000}, rlx::testing::to_doubles(want[0]), rlx::testing::parity_tolerance(DType::F32)))
        << "step " << i;
  }
}

TEST_P(DeviceState, ShapeChangesCarryBetweenVariantsAndMatchTheCpu) {
  RLX_REQUIRE_DEVICE();
  // acc_next = x + sum(acc) has x's length: with x's length alternating, every run binds
  // another (n, m) than the run before, so the carried value leaves its variant each time.
  Graph g;
  const Value acc = g.input("acc", Shape({Dim::symbol("n")}));
  const Value x = g.input("x", Shape({Dim::symbol("m")}));
  g.add_output(g.add(x, g.sum(acc, {0})), "acc_next");
  auto gpu = Session(device()).compile(g);
  auto cpu = Session(Device::Cpu).compile(g);
  gpu.bind_state("acc", 0);
  cpu.bind_state("acc", 0);
  auto full = [](int64_t n, float v) { return Tensor::f32({n}, std::vector<float>(static_cast<size_t>(n), v)); };
  const NamedTensors first = {{"acc", full(1, 1)}, {"x", full(2, 1)}};
  EXPECT_EQ(gpu.run(first)[0].to_f32(), cpu.run(first)[0].to_f32());
  for (int i = 1; i < 7; ++i) {
    const NamedTensors in = {{"x", full(i % 2 ? 3 : 2, 0.25f * float(i))}};
    const DeviceStats before = device_stats();
    const Tensor got = gpu.run(in)[0];
    // The carried value leaves its variant: device to device on CUDA (which takes device
    // tensors), else one download; plus the result's download.
    const bool device_hop = device() == Device::Cuda;
    EXPECT_EQ(device_stats().downloads - before.downloads, device_hop ? 1u : 2u) << "step " << i;
    if (device_hop) {
      EXPECT_GE(device_stats().device_copies - before.device_copies, 2u) << "step " << i;
    }
    EXPECT_EQ(got.to_f32(), cpu.run(in)[0].to_f32()) << "step " << i;
  }
  // Two runs at one binding: the second carries on the device.
  const NamedTensors in = {{"x", full(2, 1)}};
  EXPECT_EQ(gpu.run(in)[0].to_f32(), cpu.run(in)[0].to_f32());
  const DeviceStats before = device_stats();
  EXPECT_EQ(gpu.run(in)[0].to_f32(), cpu.run(in)[0].to_f32());
  EXPECT_EQ(device_stats().downloads - before.downloads, 1u);
  EXPECT_EQ(device_stats().device_copies - before.device_copies, 1u);
}

// The per-step time of a decode loop with the cache carried on the device, and with the old
// protocol (the cache downloaded after every step and passed back in), measured in one run.
TEST_P(DeviceState, PrintsPerStepTimeWithAndWithoutHostRoundTrip) {
  RLX_REQUIRE_DEVICE();
  if (dev().cpu_adapter && dev().cpu_adapter())
    GTEST_SKIP() << dev().name << " runs on a CPU adapter here: its per-step time says nothing about a GPU";
  const int64_t t = 2048, d = 512;  // a 4 MiB cache
  const Graph g = cache_step(t, d);
  auto gpu = Session(device()).compile(g);
  gpu.set_param("wk", rlx::testing::random_tensor(DType::F32, {d, d}, 11, -0.2, 0.2));
  const Tensor x = rlx::testing::random_tensor(DType::F32, {1, d}, 5);
  std::vector<Tensor> pos;
  for (int64_t i = 0; i < 64; ++i) pos.push_back(one_hot(t, i));
  const int steps = 200;
  using Clock = std::chrono::steady_clock;
  // Old protocol: the carried output comes back every step and goes up again.
  Tensor cache = Tensor::zeros(DType::F32, {t, d});
  for (int i = 0; i < 5; ++i) cache = gpu.run({{"cache", cache}, {"x", x}, {"pos", pos[0]}}, {0, 1})[0];
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) cache = gpu.run({{"cache", cache}, {"x", x}, {"pos", pos[i % 64]}}, {0, 1})[0];
  const double host_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  // bind_state: the cache stays on the device.
  gpu.bind_state("cache", 0);
  gpu.run({{"cache", cache}, {"x", x}, {"pos", pos[0]}}, {1});
  for (int i = 0; i < 5; ++i) gpu.run({{"x", x}, {"pos", pos[0]}}, {1});
  t0 = Clock::now();
  for (int i = 0; i < steps; ++i) gpu.run({{"x", x}, {"pos", pos[i % 64]}}, {1});
  const double device_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  std::printf("[ decode  ] per step, %lld x %lld f32 cache: %.3f ms through the host, %.3f ms carried on the device\n",
              static_cast<long long>(t), static_cast<long long>(d), host_ms, device_ms);
}

// The GPU backends of the registry (the CPU keeps state on the host: nothing to count).
std::vector<std::string> gpu_devices() {
  std::vector<std::string> v;
  for (const TestDevice& d : rlx::testing::test_devices())
    if (d.device != Device::Cpu) v.push_back(d.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceState, ::testing::ValuesIn(gpu_devices()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;  // "web-limits" -> "web_limits"
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
