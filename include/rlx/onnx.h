#pragma once
// ONNX import: ModelProto (.onnx) -> rlx::Graph.
//
// Initializers become Param nodes with weights carried by the graph (small ones become
// Constants); Constant nodes and every node whose operands are all known at import time are
// folded, so shape-computing chains (Shape -> Gather -> Concat -> Reshape, ConstantOfShape,
// Range, ...) disappear when the input shapes are static. A dim_param becomes a symbolic Dim
// of that name and a dim without value or name gets a generated symbol ("<input>_d<i>").
// An op the importer cannot map raises rlx::Error naming the op, its opset and the node.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/graph.h"
#include "rlx/limits.h"
#include "rlx/tensor.h"

namespace rlx {

struct OnnxImportOptions {
  // Values of graph inputs known at import time. The importer uses them only where the IR
  // needs a value at import time (Reshape's shape, Slice's starts, TopK's k, ...); every
  // other use still reads the run-time input, which must then be fed the same value. Their
  // shapes also fix the input's declared symbolic dims.
  std::map<std::string, Tensor> known_inputs;
  // Overrides for symbolic input dims, by symbol name (e.g. {"batch", 1}).
  std::map<std::string, int64_t> dims;
  // Initializers with at most this many bytes become Constants; larger ones Params.
  int64_t max_constant_bytes = 4096;
  // The size policy for the import (tensor sizes, subgraph nesting, recurrent unrolling).
  Limits limits;
};

// Model-level facts, for `rlx inspect` and `rlx conformance`.
struct OnnxModelInfo {
  struct Io {
    std::string name;
    std::string type;  // "float32", "int64", "seq(float32)", "opt(...)", "map", "?"
    std::vector<Dim> dims;  // tensors with a declared shape
    bool has_shape = false;
  };
  int64_t ir_version = 0;
  std::vector<Io> inputs, outputs;  // inputs exclude initializers
  std::vector<std::pair<std::string, int64_t>> opsets;  // (domain, version); "" = ai.onnx
  std::string producer;
  std::map<std::string, int64_t> op_histogram;  // ONNX op types of the top-level graph
  int64_t initializer_bytes = 0;
};

// Reads and imports a model file. External data files are resolved relative to its folder.
Graph import_onnx(const std::string& path, const OnnxImportOptions& options = {});
// Imports a serialized ModelProto; `base_dir` resolves external data ("" = none allowed).
Graph import_onnx_bytes(const void* data, size_t size, const std::string& base_dir,
                        const OnnxImportOptions& options = {});
OnnxModelInfo onnx_model_info(const std::string& path);

// Reads a serialized onnx.TensorProto file (the conformance suite's input_<i>.pb).
Tensor load_onnx_tensor(const std::string& path);
// The numpy-style name of an ONNX element type code ("float32", "int64", "float8e4m3fn", ...).
std::string onnx_elem_type_name(int32_t code);

}  // namespace rlx
