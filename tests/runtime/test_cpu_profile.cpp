// The per-step CPU profile (backends/cpu/executor.h, `rlx run --profile`): each top-level step's
// wall time summed per op kind, registered as the CPU's device profile; control-flow bodies are
// inside their step, not counted again; taking the table clears it.
#include <gmock/gmock.h>
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
  cg.run(in);
  EXPECT_EQ(take_device_profile(Device::Cpu), "");  // off: nothing timed
  enable_device_profile(Device::Cpu);
  for (int i = 0; i < 3; ++i) cg.run(in);
  const std::string table = take_device_profile(Device::Cpu);
  // "  <kind> <ms> ms <share>% <count> steps", slowest first.
  EXPECT_THAT(table, AllOf(::testing::ContainsRegex("matmul +[0-9.]+ ms +[0-9.]+% +6 steps"),
                           ::testing::ContainsRegex("softmax +[0-9.]+ ms +[0-9.]+% +3 steps")));
  EXPECT_EQ(take_device_profile(Device::Cpu), "");  // taken: cleared
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
