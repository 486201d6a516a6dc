#include "backends/webgpu/packed_weights.h"

#include <variant>

namespace rlx::webgpu {

bool reads_packed(const Node& n, size_t j) {
  if (std::holds_alternative<ops::MatMul>(n.op) || std::holds_alternative<ops::FusedMatMulBiasAct>(n.op)) return j <= 1;
  if (std::holds_alternative<ops::GroupedMatMul>(n.op)) return j == 1;
  if (std::holds_alternative<ops::Gather>(n.op)) return j == 0;  // an embedding table
  return false;
}

namespace {

// Is the weight input `j` of `n` read by a skinny product (the GEMV kernel: x has at most
// kGemvRows static rows), or by a Gather? The GEMM kernels unpack too, but slower than they read
// f32 words (BERT-base b1 bf16 on an H100: 7.08 ms packed, 5.30 ms in words), so under
// PackWeights::Gemv weights that only GEMMs read stay in words.
constexpr int64_t kGemvRows = 4;  // lower_matmul.cpp's gemv_rows limit

bool packing_pays(const Graph& g, const Node& n, size_t j) {
  if (std::holds_alternative<ops::Gather>(n.op)) return true;
  if (j != 1) return false;
  const Shape& x = g.shape(n.inputs.at(0));
  if (!x.is_static() || x.rank() == 0) return false;
  const int64_t k = x.dims.back().value;
  return k > 0 && x.numel() / k <= kGemvRows;
}

}  // namespace

std::vector<NodeId> packed_weights(const Graph& g, const plan::PlanOptions& plan, PackWeights mode) {
  std::vector<NodeId> out;
  if (mode == PackWeights::Off) return out;
  // readers[v]: the (node, input index) pairs reading value v (output 0 of a node).
  std::vector<std::vector<std::pair<NodeId, size_t>>> readers(g.size());
  for (const Node& n : g.nodes())
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (n.inputs[j].port == 0) readers[n.inputs[j].node].emplace_back(n.id, j);
  std::vector<bool> is_output(g.size(), false);
  for (Value v : g.outputs()) is_output[v.node] = true;
  for (const Node& p : g.nodes()) {
    const DType t = p.outputs.at(0).dtype;
    const bool weight = std::holds_alternative<ops::Param>(p.op) || std::holds_alternative<ops::Constant>(p.op);
    if (!weight || (t != DType::F16 && t != DType::BF16)) continue;
    if (plan.device.storage.storage(t) == t) continue;  // already held as itself
    // Walk the param and its views; every other reader must unpack.
    bool ok = true, read = false;
    std::vector<NodeId> todo{p.id};
    while (ok && !todo.empty()) {
      const NodeId v = todo.back();
      todo.pop_back();
      if (is_output[v]) ok = false;
      for (const auto& [r, j] : readers[v]) {
        const Node& rn = g.node(r);
        if (j == 0 && plan::is_view_node(g, rn, plan)) {
          todo.push_back(r);
        } else if (reads_packed(rn, j)) {
          read = read || mode == PackWeights::All || packing_pays(g, rn, j);
        } else {
          ok = false;
        }
      }
    }
    if (ok && read) out.push_back(p.id);
  }
  return out;
}

}  // namespace rlx::webgpu
