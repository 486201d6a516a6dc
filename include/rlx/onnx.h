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
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rlx/error.h"
#include "rlx/graph.h"
#include "rlx/limits.h"
#include "rlx/session.h"
#include "rlx/tensor.h"

namespace rlx {

struct OnnxImportOptions {
  // Values of graph inputs known at import time. The importer uses them only where the IR
  // needs a value at import time (Reshape's shape, Slice's starts, TopK's k, ...); every
  // other use still reads the run-time input, which must then be fed the same value; an If whose
  // condition they decide is replaced by its taken branch (the other is not imported). Their
  // shapes also fix the input's declared symbolic dims.
  std::map<std::string, Tensor> known_inputs;
  // Overrides for symbolic input dims, by symbol name (e.g. {"batch", 1}). An unnamed dim
  // (neither dim_value nor dim_param) is named "<input>_d<axis>".
  std::map<std::string, int64_t> dims;
  // Shapes of graph inputs that declare none (the importer needs at least their rank).
  std::map<std::string, std::vector<int64_t>> input_shapes;
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

// The import stopped at a node that needs a static value where the model has a symbolic input
// dim: an output size (Conv, Pad, pooling on a symbolic spatial dim), a Slice's ends or a
// Range's limit computed from a symbolic shape, a shape value with symbolic entries used as a
// tensor (Equal, Add, Cast on it), ... Binding the dims (OnnxImportOptions::dims, or OnnxModel,
// which binds them from the tensors of each run) imports the model. what() names the node.
class OnnxDimsError : public Error {
 public:
  OnnxDimsError(const std::string& what, std::string node) : Error(what), node_(std::move(node)) {}
  // "ONNX node 'conv0' (Conv, opset 17)": the node that needs the static value.
  const std::string& node() const { return node_; }

 private:
  std::string node_;
};

// Reads and imports a model file. External data files are resolved relative to its folder.
Graph import_onnx(const std::string& path, const OnnxImportOptions& options = {});
// Imports a serialized ModelProto; `base_dir` resolves external data ("" = none allowed).
Graph import_onnx_bytes(const void* data, size_t size, const std::string& base_dir,
                        const OnnxImportOptions& options = {});
OnnxModelInfo onnx_model_info(const std::string& path);

// ---- Shape specialization ----------------------------------------------------------------
// An ONNX model run by input shapes: the ModelProto is parsed and its initializers are read
// once; each run takes every symbolic input dim from the tensors it is given, and the first run
// of each input-shape signature imports the model with those dims bound (so shape computations
// fold: Conv/Pad output sizes, Slice ends from Shape -> Gather, Range limits, Equal on shapes)
// and compiles it for the device. The compiled graphs of the `max_signatures` most recently
// used signatures are kept; the least recently used one is dropped when a new one comes.
//
// If nodes whose condition is computed from graph input values (a sample rate, a use-cache
// flag: value_inputs()) are specialized the same way: the values of those inputs (at most 64
// elements each) are part of the signature and are given to the import as known values, so the
// condition is evaluated on the host, only the taken branch is imported and inlined, and the
// other one is never built. Conditions computed from other run-time values stay If nodes that
// run the taken branch when the model runs (CPU). The trip count and condition of a Loop with
// scan outputs (unrolled at import) are value inputs too, and those of every Loop when the
// device is not the CPU (which runs the others as a While).
struct OnnxModelOptions {
  Device device = Device::Cpu;
  CompileOptions compile;
  // known_inputs, limits, max_constant_bytes as for import_onnx; `dims` fixes symbolic dims
  // for every run (a run's tensors must agree with them; `rlx run --dim`).
  OnnxImportOptions import;
  size_t max_signatures = 8;  // compiled graphs kept (>= 1)
};

class OnnxModel {
 public:
  // One declared graph input (initializers excluded): its dtype and dims, symbolic dims as
  // declared ("<input>_d<axis>" for unnamed ones) unless fixed by OnnxImportOptions::dims.
  struct Input {
    std::string name;
    Shape shape;
    bool has_shape = true;  // false: the model declares no shape (any rank is taken)
  };
  struct Stats {
    int64_t runs = 0;       // run() / compiled() calls
    int64_t imports = 0;    // signatures imported and compiled (cache misses)
    int64_t hits = 0;       // calls that found their signature compiled
    int64_t evictions = 0;  // compiled graphs dropped for newer signatures
    size_t cached = 0;      // compiled graphs kept now
  };

  // Reads and parses a model file (rlx::Error as import_onnx). Names in options.import.dims
  // must be symbolic dims of the model's inputs.
  explicit OnnxModel(const std::string& path, OnnxModelOptions options = {});
  // A serialized ModelProto; `base_dir` resolves external data ("" = none allowed).
  OnnxModel(const void* data, size_t size, const std::string& base_dir, OnnxModelOptions options = {});
  OnnxModel(OnnxModel&&) noexcept;
  OnnxModel& operator=(OnnxModel&&) noexcept;
  ~OnnxModel();

  const std::vector<Input>& inputs() const;
  std::vector<std::string> output_names() const;
  // Symbolic dims of the inputs that options.import.dims leaves unbound.
  std::set<std::string> symbols() const;
  const OnnxModelOptions& options() const;
  // The inputs whose values decide If conditions (or the trip count of a Loop with scan outputs),
  // in input order: a run's values of them are part of its signature (each distinct value is
  // imported and compiled once).
  const std::vector<std::string>& value_inputs() const;

  // The dims binding of a run with `inputs`: options.import.dims plus every symbolic input dim
  // read from the tensors. rlx::Error naming the input (expected vs given) for an unknown or
  // repeated name, a dtype, rank or static dim that disagrees with the declaration, and naming
  // both inputs and axes for a symbol given two sizes. Inputs not given are allowed here.
  std::map<std::string, int64_t> bind(const NamedTensors& inputs) const;
  // Imports the model with `dims` bound (on top of options.import.dims), from the parsed model
  // (initializers are not read again). Nothing is cached.
  Graph import(const std::map<std::string, int64_t>& dims = {}) const;

  // The compiled graph of the inputs' signature (shapes, and the values of value_inputs()):
  // imported and compiled at its first use (every input must be given then). The reference stays valid until a later call evicts it.
  CompiledGraph& compiled(const NamedTensors& inputs);
  // compiled(inputs).run(inputs).
  std::vector<Tensor> run(const NamedTensors& inputs);
  std::vector<Tensor> run(const NamedTensors& inputs, const std::vector<size_t>& output_indices);

  // Replaces an initializer's value (same dtype and shape; rlx::Error otherwise) and drops the
  // compiled graphs (the next run of each signature imports again with the new value).
  void set_initializer(const std::string& name, const Tensor& value);
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads a serialized onnx.TensorProto file (the conformance suite's input_<i>.pb).
Tensor load_onnx_tensor(const std::string& path);
// The numpy-style name of an ONNX element type code ("float32", "int64", "float8e4m3fn", ...).
std::string onnx_elem_type_name(int32_t code);

}  // namespace rlx
