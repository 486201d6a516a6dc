#pragma once
// The shared list of op / model parity cases: each builds one or more graphs (with fixed inputs
// and tolerance overrides where the case needs them) that every registered test device
// (support/devices.h) must compute like the CPU oracle. test_parity.cpp runs devices x cases.
#include <functional>
#include <string>
#include <vector>

#include "support/parity.h"

namespace rlx::testing {

// One graph of a case; `label` tells variants of one case apart in a failure ("" when alone).
struct CaseGraph {
  std::string label;
  Graph graph;
  ParityOptions options;
};

struct ParityCase {
  std::string name;    // "softmax_axis1_f16": the test name's case part ([a-z0-9_])
  std::string family;  // "elementwise", "matmul", "rows", ...
  Precision precision = Precision::Fp32;  // the device side's policy
  // Dtypes the case needs besides those of its graphs' nodes (found by themselves).
  std::vector<DType> dtypes;
  std::function<std::vector<CaseGraph>()> build;
};

using CaseList = std::vector<ParityCase>;

// Every case, in family order.
const CaseList& parity_cases();

// Every dtype that a node of `g` produces or consumes.
std::vector<DType> graph_dtypes(const Graph& g);

// Helpers of the case files.
std::vector<CaseGraph> one(Graph g, ParityOptions o = {}, std::string label = "");
void add_case(CaseList& list, std::string family, std::string name, std::function<std::vector<CaseGraph>()> build,
              Precision precision = Precision::Fp32);

// The BERT encoder layer of src/models on [2, 40, 256] in dtype t, with its weights and a padding
// mask as fixed params / inputs (also used by the CUDA TF32-policy test).
CaseGraph bert_layer_case(DType t);

// One function per family (tests/parity/cases_<family>.cpp).
void add_elementwise_cases(CaseList& list);
void add_matmul_cases(CaseList& list);
void add_rows_cases(CaseList& list);
void add_reduce_cases(CaseList& list);
void add_shape_cases(CaseList& list);
void add_attention_cases(CaseList& list);
void add_conv_cases(CaseList& list);
void add_select_cases(CaseList& list);
void add_model_cases(CaseList& list);
void add_kv_cache_cases(CaseList& list);  // cases_kv_cache.cpp: CacheWrite, Attention's Positions mask
void add_exported_cases(CaseList& list);  // cases_exported.cpp: models spelled op by op, as exporters write them
void add_recurrent_cases(CaseList& list);  // cases_recurrent.cpp: RNN / GRU / LSTM layers

}  // namespace rlx::testing
