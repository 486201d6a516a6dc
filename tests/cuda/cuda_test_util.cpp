#include "cuda/cuda_test_util.h"

#include <gtest/gtest.h>


namespace rlx::testing {

std::string cuda_unavailable_reason() {
  static const std::string reason = [] {
    try {
      Graph g;
      g.add_output(g.relu(g.input("x", Shape::of({4}))));
      Session(Device::Cuda).compile(g);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

void expect_cuda_parity(const Graph& g, Precision precision, ParityOptions opts) {
  const auto rep = cuda_parity(g, precision, opts);
  EXPECT_TRUE(rep.pass) << rep.text << "\n" << g.to_text();
}

ParityReport cuda_parity(const Graph& g, Precision precision, ParityOptions opts) {
  RunConfig cpu;
  cpu.label = "cpu";
  RunConfig gpu;
  gpu.label = std::string("cuda/") + precision_name(precision);
  gpu.device = Device::Cuda;
  gpu.options.precision = precision;
  return compare_configs(g, cpu, gpu, opts);
}

}  // namespace rlx::testing
