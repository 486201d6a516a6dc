#pragma once
// The one graph rewriter every pass uses.
//
// A pass walks the source graph in node order and, for each node, either copies it or emits a
// replacement into the output graph, recording old value -> new value. Operands are mapped on
// demand: `map` copies a not-yet-mapped operand's node (and, recursively, its operands) first,
// so a fused node may use values the walk has not reached yet (e.g. a weight declared after the
// first matmul of a group). Copying is idempotent. `finish` remaps the graph outputs and weights.
#include <optional>
#include <vector>

#include "rlx/graph.h"

namespace rlx::passes {

class Rewriter {
 public:
  explicit Rewriter(const Graph& src);

  const Graph& src() const { return src_; }
  Graph& out() { return out_; }
  const Shape& shape(Value old) const { return src_.shape(old); }

  bool mapped(NodeId old) const { return mapped_[old]; }
  // The new value of `old`, copying its node (and unmapped operands) first when needed.
  Value map(Value old);
  std::vector<Value> map(const std::vector<Value>& olds);
  // Copies node `old` with its operands mapped; no-op when it is already mapped.
  void copy(NodeId old);
  // Records that every output port of node `old` is now `values[port]`.
  void replace(NodeId old, std::vector<Value> values);
  void replace(Value old, Value nv);
  // Marks node `old` as absorbed by a fusion: the walk skips it. If something still maps one of
  // its values later, it is copied then (so a wrong use check costs speed, never correctness).
  void absorb(NodeId old) { absorbed_[old] = true; }
  bool handled(NodeId old) const { return mapped_[old] || absorbed_[old]; }

  // Appends a node to the output graph (inputs are new values) and returns its outputs.
  Value emit(Op op, std::vector<Value> inputs) { return out_.apply(std::move(op), std::move(inputs)); }
  std::vector<Value> emit_multi(Op op, std::vector<Value> inputs) {
    return out_.apply_multi(std::move(op), std::move(inputs));
  }

  // Copies every Input/Param node not mapped yet (so the graph's interface is kept), maps the
  // outputs (names kept) and weights, and returns the new graph. Nodes never mapped are dropped.
  Graph finish();

 private:
  const Graph& src_;
  Graph out_;
  std::vector<std::vector<Value>> new_values_;  // per old node, per port
  std::vector<bool> mapped_, absorbed_;
};

// Copies a whole graph through a per-node callback: `fn(rw, node)` returns true when it handled
// the node (emitted a replacement and called rw.replace); otherwise the node is copied.
template <class F>
Graph rewrite_each(const Graph& g, F&& fn) {
  Rewriter rw(g);
  for (const Node& n : g.nodes()) {
    if (rw.handled(n.id)) continue;
    if (!fn(rw, n)) rw.copy(n.id);
  }
  return rw.finish();
}

}  // namespace rlx::passes
