#pragma once
// Helpers for pass tests: op counts and "same numbers before and after a pass" through the
// shared parity harness (both sides compiled with optimize=false, so only the pass differs).
#include <functional>
#include <string>

#include "passes/pass.h"
#include "support/parity.h"

namespace rlx::testing {

inline size_t count_op(const Graph& g, const std::string& kind) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += op_name(node.op) == kind;
  return n;
}

inline CompileOptions unoptimized() {
  CompileOptions o;
  o.optimize = false;
  return o;
}

// Runs `g` and `transform(g)` on the CPU with the same random inputs/params; f32 within 1e-5
// relative unless `rtol` says otherwise.
inline ::testing::AssertionResult same_numbers(const Graph& g, const std::function<Graph(const Graph&)>& transform,
                                               double rtol = 1e-5, ParityOptions po = {}) {
  RunConfig a{"reference", Device::Cpu, unoptimized(), {}};
  RunConfig b{"transformed", Device::Cpu, unoptimized(), transform};
  if (!po.tolerance) po.tolerance = [rtol](DType t) {
    Tolerance tol = parity_tolerance(t);
    if (t == DType::F32) tol = {rtol, rtol * 0.1};
    return tol;
  };
  const ParityReport r = compare_configs(g, a, b, po);
  if (r.pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.text;
}

// Wraps a pass with the default context.
inline std::function<Graph(const Graph&)> pass_fn(Graph (*fn)(const Graph&, const passes::PassContext&),
                                                  passes::PassContext ctx = {}) {
  return [fn, ctx](const Graph& g) { return fn(g, ctx); };
}

}  // namespace rlx::testing
