#pragma once
// The CPU executor: runs a graph whose shapes are all static, node by node, with every
// intermediate value placed in one arena laid out by a simple memory plan.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "rlx/graph.h"
#include "rlx/tensor.h"

namespace rlx::cpu {

class Executor {
 public:
  // `g` must be verified and fully static. `params` resolves Param nodes of subgraphs that
  // are not in the subgraph's own weights.
  explicit Executor(Graph g);

  // leaves: a tensor for every Input and Param node, by node id (borrowed, not modified).
  // Returns the graph outputs listed in `which` (owning copies), in that order.
  std::vector<Tensor> run(const std::unordered_map<NodeId, Tensor>& leaves, const std::vector<size_t>& which,
                          const std::map<std::string, Tensor>* outer_params = nullptr);

  const Graph& graph() const { return graph_; }
  size_t arena_bytes() const { return arena_bytes_; }

 private:
  std::vector<Tensor> run_subgraph(const Graph& sub, const std::vector<Tensor>& inputs,
                                   const std::map<std::string, Tensor>* outer_params);

  Graph graph_;
  std::vector<std::vector<int64_t>> offsets_;  // per node, per port: byte offset in the arena (-1 = leaf)
  size_t arena_bytes_ = 0;
  std::unique_ptr<uint8_t[]> arena_storage_;
  uint8_t* arena_ = nullptr;
  std::map<const Graph*, std::unique_ptr<Executor>> sub_executors_;
};

// Graph with every symbolic dim replaced by its bound size, re-inferred and verified.
Graph specialize(const Graph& g, const std::map<std::string, int64_t>& binding);

}  // namespace rlx::cpu
