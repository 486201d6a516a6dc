#pragma once
// Binding symbolic dims to concrete sizes.
#include <cstdint>
#include <map>
#include <string>

#include "rlx/graph.h"

namespace rlx::passes {

// The graph with every symbolic dim (in shapes and Dim-list attributes) replaced by its bound
// size, re-inferred node by node. A symbol without a value -> rlx::Error naming it.
Graph specialize(const Graph& g, const std::map<std::string, int64_t>& binding);

}  // namespace rlx::passes
