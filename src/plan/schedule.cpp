#include "plan/schedule.h"

namespace rlx::plan {
namespace {

TensorRef ref(const Graph& g, const MemoryPlan& mp, Value v) {
  const Shape& s = g.shape(v);
  return TensorRef{v, s.dtype, s.concrete(), mp.at(v)};
}

}  // namespace

int64_t TensorRef::numel() const { return product(dims); }

Schedule build_schedule(const Graph& g, const PlanOptions& options) {
  Schedule s;
  s.memory = plan_memory(g, options);
  for (const Node& n : g.nodes()) {
    if (is_leaf_op(n.op) || is_view_node(g, n, options)) continue;
    Step st;
    st.node = n.id;
    st.op = n.op;
    for (Value v : n.inputs) st.in.push_back(ref(g, s.memory, v));
    for (uint32_t p = 0; p < n.outputs.size(); ++p) st.out.push_back(ref(g, s.memory, Value{n.id, p}));
    try {
      st.geom = node_geometry(g, n);
    } catch (const Error& e) {
      throw Error(node_label(n) + ": " + e.what());
    }
    st.in_place_input = s.memory.in_place_input[n.id];
    s.steps.push_back(std::move(st));
  }
  for (Value v : g.outputs()) s.outputs.push_back(ref(g, s.memory, v));
  return s;
}

}  // namespace rlx::plan
