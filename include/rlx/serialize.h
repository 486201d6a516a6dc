#pragma once
// Graph JSON format (round-trips every op and attribute) and NumPy .npy tensor files.
#include <string>

#include "rlx/graph.h"
#include "rlx/tensor.h"

namespace rlx {

struct JsonOptions {
  // Tensor data (constants, weights) inline as base64, or in a side file "<path>.bin" with
  // offsets recorded in the JSON. Side files only apply to save_graph_json.
  bool inline_data = true;
};

std::string graph_to_json(const Graph& g);  // always inline data
Graph graph_from_json(const std::string& json, const std::string& base_dir = ".");
void save_graph_json(const Graph& g, const std::string& path, const JsonOptions& opts = {});
Graph load_graph_json(const std::string& path);

Tensor load_npy(const std::string& path);
void save_npy(const Tensor& t, const std::string& path);

}  // namespace rlx
