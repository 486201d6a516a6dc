#pragma once
// Helpers for rlx tests: random tensors, running a graph on the CPU, and comparisons.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlx/rlx.h"

namespace rlx::testing {

// Uniform values in [lo, hi) of any dtype (ints are rounded; bool is 0/1), reproducible by seed.
Tensor random_tensor(DType dtype, std::vector<int64_t> shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
// Converts any tensor to doubles (bool -> 0/1).
std::vector<double> to_doubles(const Tensor& t);
// Builds a tensor of `dtype` from doubles (rounded/converted like Cast).
Tensor from_doubles(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values);

// Compiles `g` for the CPU, sets `params`, runs with `inputs`, returns every output.
std::vector<Tensor> run_cpu(const Graph& g, const NamedTensors& inputs, const NamedTensors& params = {});
// Same, single output.
Tensor run_cpu1(const Graph& g, const NamedTensors& inputs, const NamedTensors& params = {});

// Builds a one-node graph feeding `ins` as graph inputs in0, in1, ... into `op`; runs it on
// the CPU and returns its single output.
Tensor run_op(const Op& op, const std::vector<Tensor>& ins);
// Builds `op` on graph inputs of the given shapes and returns its inferred output shape
// (throws rlx::Error like the graph builder does).
Shape infer_node(const Op& op, const std::vector<Shape>& shapes);

// Sets an environment variable for one scope and restores its previous value (or unsets it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

// Tolerances used when comparing against a double reference, by dtype of the result:
// f64 1e-10, f32 1e-5 rel / 1e-6 abs, f16 2e-3 rel, bf16 1.6e-2 rel, ints/bool exact.
struct Tolerance {
  double rtol = 0, atol = 0;
};
Tolerance default_tolerance(DType t);

// gtest assertion: |actual - expected| <= atol + rtol*|expected| for every element; shape
// checked too; NaN matches NaN. Reports the count of mismatches and the worst element.
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<int64_t>& expected_shape,
                                     const std::vector<double>& expected, Tolerance tol);
inline ::testing::AssertionResult all_close(const Tensor& actual, const std::vector<int64_t>& expected_shape,
                                            const std::vector<double>& expected) {
  return all_close(actual, expected_shape, expected, default_tolerance(actual.dtype()));
}

// Runs `fn` and returns the rlx::Error message; fails the test when it does not throw
// rlx::Error (or throws anything else).
std::string error_message(const std::function<void()>& fn);

// The `rlx` tool the CLI tests run: the one next to this test binary when there is one (a copy of
// the binaries elsewhere, e.g. on a GPU machine), else the build tree's (RLX_CLI_PATH).
std::string cli_path();

// Row-major multi-index helpers for references.
std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& dims);
int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims);

}  // namespace rlx::testing
