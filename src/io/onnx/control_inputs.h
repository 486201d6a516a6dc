#pragma once
// What the control flow of a model (If conditions, trip counts and conditions of Loops that must
// be unrolled) is computed from, read from the ModelProto before any import: rlx::OnnxModel
// specializes a model on the values of the graph inputs they read (so only the taken branches
// are imported and such loops unroll), and the importer names those inputs when a branch of a
// run-time If cannot be built.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rlx::onnx_io {

struct IfCondition {
  // Top-level graph inputs whose values (not only shapes) the condition reads, in the order of
  // the graph's inputs; only inputs declared with a static shape of at most
  // kMaxValueInputElements elements count (others make the condition a run-time value).
  std::vector<std::string> inputs;
  // The condition is computed from those inputs, input shapes, initializers and constants only
  // (no larger or dynamic input's value, loop-carried or iteration value, subgraph result or
  // random op): knowing the inputs' values and shapes at import time makes it known.
  bool from_inputs = false;
  // The If is imported into the graph that holds the values it reads (the top-level graph, the
  // taken branch of such an If, an unrolled Loop / Scan body), so a value given at import time
  // reaches its condition. Ifs inside the branches of a run-time If are built in their own graph.
  bool reachable = false;
};

// The most elements a graph input may have (declared statically) for OnnxModel to specialize on
// its value.
inline constexpr int64_t kMaxValueInputElements = 64;

// Every If node of the model (nested bodies included), by its first output name (ONNX names
// each value once, so the name identifies the node).
std::map<std::string, IfCondition> if_conditions(const onnx::GraphProto& main);

// The top-level inputs whose values decide a reachable If condition computed from inputs only,
// or the trip count / condition of a reachable Loop with scan outputs (unrolled at import; with
// `unroll_loops`, of every such Loop: for devices that run no While), in input order: what
// rlx::OnnxModel specializes on.
std::vector<std::string> value_inputs(const onnx::GraphProto& main, bool unroll_loops = false);

}  // namespace rlx::onnx_io
