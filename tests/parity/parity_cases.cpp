#include "parity/parity_cases.h"

#include <set>

namespace rlx::testing {

const CaseList& parity_cases() {
  static const CaseList list = [] {
    CaseList l;
    add_elementwise_cases(l);
    add_matmul_cases(l);
    add_rows_cases(l);
    add_reduce_cases(l);
    add_shape_cases(l);
    add_attention_cases(l);
    add_kv_cache_cases(l);
    add_conv_cases(l);
    add_select_cases(l);
    add_model_cases(l);
    add_exported_cases(l);
    add_recurrent_cases(l);
    return l;
  }();
  return list;
}

std::vector<DType> graph_dtypes(const Graph& g) {
  std::set<DType> seen;
  for (const Node& n : g.nodes())
    for (const Shape& s : n.outputs) seen.insert(s.dtype);
  return {seen.begin(), seen.end()};
}

std::vector<CaseGraph> one(Graph g, ParityOptions o, std::string label) {
  std::vector<CaseGraph> v;
  v.push_back(CaseGraph{std::move(label), std::move(g), std::move(o)});
  return v;
}

void add_case(CaseList& list, std::string family, std::string name, std::function<std::vector<CaseGraph>()> build,
              Precision precision) {
  ParityCase c;
  c.name = std::move(name), c.family = std::move(family), c.build = std::move(build), c.precision = precision;
  list.push_back(std::move(c));
}

}  // namespace rlx::testing
