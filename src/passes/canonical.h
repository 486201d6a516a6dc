#pragma once
// Canonical (backend-independent) passes.
#include "passes/pass.h"

namespace rlx::passes {

// Dead-code elimination: keeps what the outputs need, plus every Input and Param node (the
// graph's interface).
Graph dce(const Graph& g, const PassContext& ctx = {});
// Common-subexpression elimination: nodes with equal ops (kind + attributes; constants by
// bytes) and identical operands are merged. Deterministic ops only, which in rlx is all of
// them (RNG ops are counter-based: equal seed and operands give equal values).
Graph cse(const Graph& g, const PassContext& ctx = {});
// Constant folding: a node whose operands are all constants is evaluated with the CPU kernels
// and replaced by constants, when its outputs are no larger than max(its inputs, 1 MiB).
// Zero-input generators (RNG), control flow and nodes whose evaluation fails at compile time
// (e.g. an out-of-range constant index: the error is kept for run time) are left alone.
Graph fold_constants(const Graph& g, const PassContext& ctx = {});
// Trivial-op removal: reshape/expand/cast to the same shape and dtype, identity transpose,
// full narrow, one-input concat, empty reverse, stop_gradient (inference), x+0, x-0, x*1, x/1
// with a constant that does not broadcast x; reshape(reshape) and transpose(transpose) merge.
Graph remove_trivial_ops(const Graph& g, const PassContext& ctx = {});

}  // namespace rlx::passes
