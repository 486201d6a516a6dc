#include "backends/cpu/executor.h"

#include <cstring>

#include "backends/cpu/kernels.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Substitutes bound symbols in every Shape / Dim-list attribute of an op.
struct DimBinder {
  const std::map<std::string, int64_t>& binding;
  void bind(Dim& d) {
    if (d.is_symbolic()) {
      auto it = binding.find(d.sym);
      if (it == binding.end())
        throw Error("symbolic dim '" + d.sym + "' has no value; it must be determined by an input's shape");
      d = Dim(it->second);
    }
  }
  void operator()(const char*, Shape& s) {
    for (Dim& d : s.dims) bind(d);
  }
  void operator()(const char*, std::vector<Dim>& v) {
    for (Dim& d : v) bind(d);
  }
  template <class T>
  void operator()(const char*, T&) {}
};

}  // namespace

Graph specialize(const Graph& g, const std::map<std::string, int64_t>& binding) {
  Graph out;
  for (const Node& n : g.nodes()) {
    Op op = n.op;
    std::visit([&](auto& o) { o.visit(DimBinder{binding}); }, op);
    out.add_node(std::move(op), n.inputs);
  }
  out.set_outputs(g.outputs(), g.output_names());
  for (const auto& [name, t] : g.weights()) out.set_weight(name, t);
  return out;
}

Executor::Executor(Graph g) : graph_(std::move(g)) {
  int64_t cursor = 0;
  offsets_.resize(graph_.size());
  for (const Node& n : graph_.nodes()) {
    const bool leaf = std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op) ||
                      std::holds_alternative<ops::Constant>(n.op);
    for (const Shape& s : n.outputs) {
      if (leaf) {
        offsets_[n.id].push_back(-1);
        continue;
      }
      if (!s.is_static()) throw Error(node_label(n) + ": output shape " + s.str() + " is not static at execution");
      offsets_[n.id].push_back(cursor);
      cursor = align_up(cursor + s.nbytes());
    }
  }
  arena_bytes_ = static_cast<size_t>(cursor);
  arena_storage_.reset(new uint8_t[arena_bytes_ + kAlign]());
  auto base = reinterpret_cast<uintptr_t>(arena_storage_.get());
  arena_ = arena_storage_.get() + (align_up(static_cast<int64_t>(base)) - static_cast<int64_t>(base));
}

std::vector<Tensor> Executor::run_subgraph(const Graph& sub, const std::vector<Tensor>& inputs,
                                           const std::map<std::string, Tensor>* outer_params) {
  auto& ex = sub_executors_[&sub];
  if (!ex) ex = std::make_unique<Executor>(sub);
  const Graph& sg = ex->graph();
  std::unordered_map<NodeId, Tensor> leaves;
  auto in_nodes = sg.input_nodes();
  if (in_nodes.size() != inputs.size())
    throw Error("subgraph expects " + std::to_string(in_nodes.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < in_nodes.size(); ++i) leaves[in_nodes[i]] = inputs[i];
  for (NodeId p : sg.param_nodes()) {
    const auto& name = std::get<ops::Param>(sg.node(p).op).name;
    auto it = sg.weights().find(name);
    if (it != sg.weights().end()) { leaves[p] = it->second; continue; }
    if (outer_params) {
      auto jt = outer_params->find(name);
      if (jt != outer_params->end()) { leaves[p] = jt->second; continue; }
    }
    throw Error("subgraph param '" + name + "' has no value (neither in the subgraph's weights nor the graph's params)");
  }
  std::vector<size_t> all(sg.outputs().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ex->run(leaves, all, outer_params);
}

std::vector<Tensor> Executor::run(const std::unordered_map<NodeId, Tensor>& leaves, const std::vector<size_t>& which,
                                  const std::map<std::string, Tensor>* outer_params) {
  std::vector<std::vector<Tensor>> values(graph_.size());
  SubgraphRunner runner = [this, outer_params](const Graph& sub, const std::vector<Tensor>& ins) {
    return run_subgraph(sub, ins, outer_params);
  };
  for (const Node& n : graph_.nodes()) {
    auto& outs = values[n.id];
    if (auto* c = std::get_if<ops::Constant>(&n.op)) {
      Tensor v = c->value;  // shares storage; kernels never write their inputs
      outs.push_back(v);
      continue;
    }
    if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) {
      auto it = leaves.find(n.id);
      if (it == leaves.end()) throw Error(node_label(n) + ": no value was bound");
      outs.push_back(it->second);
      continue;
    }
    std::vector<Tensor> ins;
    ins.reserve(n.inputs.size());
    for (Value v : n.inputs) ins.push_back(values[v.node][v.port]);
    for (size_t p = 0; p < n.outputs.size(); ++p)
      outs.push_back(Tensor::borrow(n.outputs[p].dtype, n.outputs[p].concrete(), arena_ + offsets_[n.id][p]));
    KernelContext ctx{n, ins, outs, runner};
    try {
      std::visit([&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, ops::Input> || std::is_same_v<T, ops::Param> ||
                      std::is_same_v<T, ops::Constant>) {
          // handled above
        } else {
          kernel(o, ctx);
        }
      }, n.op);
    } catch (const Error& e) {
      throw Error(node_label(n) + ": " + e.what());
    }
  }
  std::vector<Tensor> result;
  result.reserve(which.size());
  for (size_t k : which) {
    if (k >= graph_.outputs().size())
      throw Error("output index " + std::to_string(k) + " is out of range (the graph has " +
                  std::to_string(graph_.outputs().size()) + " outputs)");
    const Value v = graph_.outputs()[k];
    result.push_back(values[v.node][v.port].clone());
  }
  return result;
}

}  // namespace rlx::cpu
