// ONNX converters on bad input (issue 26): every model here is built in memory and must be
// rejected with an rlx::Error naming the ONNX node and what is wrong (never a crash, a non-rlx
// exception or a silently wrong result); the positive cases check that valid models still work.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "onnx/onnx_builder.h"
#include "rlx/limits.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;

Graph import(const OnnxBuilder& b, const OnnxImportOptions& o = {}) {
  const std::string s = b.bytes();
  return import_onnx_bytes(s.data(), s.size(), "", o);
}

// An LSTM over `steps` time steps (batch 1, input 4, hidden 8).
OnnxBuilder lstm_model(int64_t steps) {
  OnnxBuilder b;
  b.input("x", kF32, {steps, 1, 4}).output("y");
  b.initializer("w", testing::random_tensor(DType::F32, {1, 32, 4}, 1));
  b.initializer("r", testing::random_tensor(DType::F32, {1, 32, 8}, 2));
  auto& n = b.node("LSTM", {"x", "w", "r"}, {"y"}, "lstm0");
  set_attr(n, "hidden_size", int64_t{8});
  return b;
}

// Import time of a long LSTM (set RLX_RNN_TIMING=1 to print it for 1k/2k/4k steps).
TEST(OnnxConvertersBad, RnnUnrollTiming) {
  if (!std::getenv("RLX_RNN_TIMING")) GTEST_SKIP() << "set RLX_RNN_TIMING=1";
  for (int64_t steps : {1000, 2000, 4000}) {
    const OnnxBuilder b = lstm_model(steps);
    OnnxImportOptions o;
    o.limits.max_unroll_steps = 100000;
    const auto t0 = std::chrono::steady_clock::now();
    const Graph g = import(b, o);
    const auto t1 = std::chrono::steady_clock::now();
    CompileOptions co;
    co.num_threads = 1;
    co.limits.max_unroll_steps = 100000;
    CompiledGraph cg = Session(Device::Cpu).compile(g, co);
    const auto t2 = std::chrono::steady_clock::now();
    cg.run({{"x", testing::random_tensor(DType::F32, {steps, 1, 4}, 3)}});
    const auto t3 = std::chrono::steady_clock::now();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("LSTM %lld steps: import %.2f s, compile %.2f s, run %.2f s (%zu nodes)\n",
                static_cast<long long>(steps), sec(t0, t1), sec(t1, t2), sec(t2, t3), g.size());
  }
}

}  // namespace
}  // namespace rlx
