#pragma once
// Hoisting weight-only computations out of the per-run graph.
//
// Fusions create nodes that depend on params alone (the concatenated weights of
// fuse_shared_input_matmul / fuse_swiglu_dual_matmul, casts or transposes of weights). Such a
// node's value changes only when a param does, so it is computed once by a separate "prologue"
// graph and fed to the main graph as a derived param. The runtime reruns the prologue after
// set_param changes a value.
#include <string>
#include <vector>

#include "rlx/graph.h"

namespace rlx::passes {

struct HoistedGraph {
  Graph main;      // the per-run graph; derived values are Param nodes named `derived[i]`
  Graph prologue;  // params/constants -> one output per derived value (empty when none)
  std::vector<std::string> derived;
};

// Splits `g`. A node is hoisted when every operand is a Param, a Constant or a hoisted node
// (zero-operand generators such as RNG stay in the main graph). Derived params are named
// "__derived.<k>"; an existing name clash is an rlx::Error.
HoistedGraph hoist_param_computations(const Graph& g);

}  // namespace rlx::passes
