#pragma once
// Use analysis: who consumes each value, and whether it is a graph output. Fusion passes
// may only absorb an intermediate value when it has exactly one consumer and is not an output.
#include <vector>

#include "rlx/graph.h"

namespace rlx::passes {

struct Use {
  NodeId node = 0;
  size_t input = 0;  // operand index within the consumer
};

class Uses {
 public:
  explicit Uses(const Graph& g);
  const std::vector<Use>& of(Value v) const;
  bool is_output(Value v) const;
  // Exactly one consumer and not a graph output: the value may be absorbed by a fusion.
  bool single_use(Value v) const { return !is_output(v) && of(v).size() == 1; }
  // The only consumer of `v` (requires single_use(v)).
  const Node& sole_user(Value v) const { return g_.node(of(v).front().node); }

 private:
  const Graph& g_;
  std::vector<std::vector<std::vector<Use>>> uses_;  // per node, per port
  std::vector<std::vector<bool>> output_;
};

// Convenience pattern helpers.
template <class T>
const T* op_as(const Node& n) { return std::get_if<T>(&n.op); }
template <class T>
const T* op_as(const Graph& g, Value v) { return std::get_if<T>(&g.node(v.node).op); }

// Node kind tests used by the fusion patterns.
inline bool is_binary(const Node& n, BinaryKind k) {
  const auto* b = op_as<ops::Binary>(n);
  return b && b->kind == k;
}
inline bool is_activation(const Node& n, ActKind k) {
  const auto* a = op_as<ops::Activation>(n);
  return a && a->kind == k;
}

// True when `axis` (possibly negative) names the last axis of a rank-`rank` tensor.
inline bool is_last_axis(int64_t axis, int64_t rank) { return rank > 0 && (axis == -1 || axis == rank - 1); }

// True when `perm` maps every axis to itself.
inline bool is_identity_perm(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// True when `op` accepts operands of these shapes (its infer does not throw) and produces
// exactly `expect` (when given): the last check before a fusion emits a node.
bool infer_ok(const Op& op, const Graph& g, const std::vector<Value>& operands, const Shape* expect = nullptr);

}  // namespace rlx::passes
