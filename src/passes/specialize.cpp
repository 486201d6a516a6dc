#include "passes/specialize.h"

namespace rlx::passes {
namespace {

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

}  // namespace rlx::passes
