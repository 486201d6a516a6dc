// The per-step CPU profile (backends/cpu/executor.h, `rlx run --profile`): each top-level step's
// wall time summed per op kind, registered as the CPU's device profile; control-flow bodies are
// inside their step, not counted again; taking the table clears it.
#include <gmock/gmock.h>
#include <algorithm>
#include <gtest/gtest.h>

#include "backends/cpu/executor.h"
#include "runtime/device_profile.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct ProfileOff {
  ~ProfileOff() { cpu::set_step_profile(false); }
};

TEST(CpuProfile, StepTimesPerOpKind) {
  ProfileOff off;
  Graph g;
  Value x = g.input("x", Shape::of({64, 64}));
  Value w = g.input("w", Shape::of({64, 64}));
  Value h = g.matmul(x, w);
  g.add_output(g.softmax(g.matmul(h, w), -1), "y");
  CompileOptions o;
  o.optimize = false;  // the two matmuls and the softmax stay three steps
  CompiledGraph cg = Session(Device::Cpu).compile(g, o);
  const NamedTensors in{{"x", testing::random_tensor(DType::F32, {64, 64}, 1)},
                        {"w", testing::random_tensor(DType::F32, {64, 64}, 2)}};
  take_device_step_profile(Device::Cpu, 0);  // (rows another test may have left)
  cg.run(in);
  EXPECT_EQ(take_device_profile(Device::Cpu), "");  // off: nothing timed
  EXPECT_EQ(take_device_step_profile(Device::Cpu, 10), "");
  enable_device_profile(Device::Cpu);
  for (int i = 0; i < 3; ++i) cg.run(in);
  const std::string table = take_device_profile(Device::Cpu);
  // "  <kind> <ms> ms <share>% <count> steps", slowest first.
  EXPECT_THAT(table, AllOf(::testing::ContainsRegex("matmul +[0-9.]+ ms +[0-9.]+% +6 steps"),
                           ::testing::ContainsRegex("softmax +[0-9.]+ ms +[0-9.]+% +3 steps")));
  EXPECT_EQ(take_device_profile(Device::Cpu), "");  // taken: cleared
  // The slowest steps: each of the three once, with its shapes; the products with their rate
  // (64 x 64 x 64 multiply-adds), the softmax without one.
  const std::string steps = take_device_step_profile(Device::Cpu, 10);
  EXPECT_THAT(steps, AllOf(::testing::ContainsRegex(
                               "#0 +[0-9.]+ ms +[0-9.]+% +[0-9.]+ GMAC/s  matmul -> f32\\[64,64\\] from f32\\[64,64\\]"),
                           ::testing::ContainsRegex("#1 +[0-9.]+ ms +[0-9.]+% +[0-9.]+ GMAC/s  matmul"),
                           ::testing::ContainsRegex("#2 +[0-9.]+ ms +[0-9.]+% +softmax -> f32\\[64,64\\]"),
                           Not(HasSubstr("more steps"))));
  for (int i = 0; i < 2; ++i) cg.run(in);
  const std::string top1 = take_device_step_profile(Device::Cpu, 1);
  EXPECT_THAT(top1, HasSubstr("... 2 more steps (--profile-steps shows more)"));
  EXPECT_EQ(std::count(top1.begin(), top1.end(), '#'), 1);
  EXPECT_EQ(take_device_step_profile(Device::Cpu, 10), "");  // taken: cleared
  take_device_profile(Device::Cpu);
}

TEST(CpuProfile, ControlFlowBodiesAreNotCountedTwice) {
  ProfileOff off;
  auto body = std::make_shared<Graph>();
  Value bx = body->input("bx", Shape::of({8}));
  body->add_output(body->exp(bx));
  Graph g;
  Value c = g.input("c", Shape({}, DType::Bool));
  Value x = g.input("x", Shape::of({8}));
  g.add_output(g.apply(ops::If{body, body}, {c, x}), "y");
  CompiledGraph cg = Session(Device::Cpu).compile(g);
  enable_device_profile(Device::Cpu);
  const uint8_t yes = 1;
  cg.run({{"c", Tensor::boolean({}, {&yes, 1})}, {"x", testing::random_tensor(DType::F32, {8}, 3)}});
  const std::string table = take_device_profile(Device::Cpu);
  EXPECT_THAT(table, AllOf(HasSubstr("if"), Not(HasSubstr("activation"))));
}

}  // namespace
}  // namespace rlx
