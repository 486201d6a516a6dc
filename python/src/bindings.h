#pragma once
// Shared declarations of the rlx Python extension (rlx._rlx): one register_* function per
// source file, and the conversions between Python objects and rlx values they share.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlx/rlx.h"

namespace rlx::python {

namespace py = pybind11;

void register_dtypes(py::module_& m);   // dtypes.cpp
void register_tensor(py::module_& m);   // tensor_type.cpp (rlx.Tensor, DLPack)
void register_graph(py::module_& m);    // graph_bindings.cpp
void register_model(py::module_& m);    // model_bindings.cpp
void register_tools(py::module_& m);    // tools_bindings.cpp (check, pass report, profile, files)
void register_generate(py::module_& m); // generate_bindings.cpp (rlx.Generator)

// ---- dtypes.cpp ----
// NumPy dtype of an rlx dtype (bf16 -> uint16: NumPy has no bfloat16; the bits are kept).
py::dtype numpy_dtype(DType t);
// The rlx dtype of a NumPy dtype; nullopt when rlx has none. uint16 and ml_dtypes' bfloat16
// are bf16 (rlx has no u16).
std::optional<DType> dtype_of_numpy(const py::dtype& d);
// The rlx dtype named by a Python value: "f32"/"float32"/np.float32/np.dtype(...)/"bf16".
DType dtype_from_py(const py::handle& h);
// Python view of a dim / dims: int for static, str for symbolic.
py::object dim_to_py(const Dim& d);
py::tuple dims_to_py(const std::vector<Dim>& dims);
std::vector<Dim> dims_from_py(const py::handle& seq, const char* what);

// ---- tensor_convert.cpp ----
// An rlx::Tensor made from a Python object, with whatever keeps its memory alive.
struct HeldTensor {
  Tensor tensor;
  py::object keep;  // the array (or capsule owner) the tensor borrows from; may be None
};
// Converts `obj` for a value of dtype `expected` (when known; used for lists and scalars, which
// are converted to it, and for error messages). NumPy arrays with a C-contiguous, aligned layout
// and rlx.Tensors are borrowed (no copy); other layouts are copied once; objects with
// __dlpack__ are imported through DLPack. `what` names the value in errors ("input 'x'").
HeldTensor tensor_from_py(const py::handle& obj, std::optional<DType> expected, const std::string& what);
// A NumPy array over the tensor's storage (no copy; the array keeps the storage alive). A device
// tensor -> rlx::Error.
py::array tensor_to_numpy(const Tensor& t);

// ---- tensor_type.cpp ----
// rlx.Tensor: an rlx::Tensor plus the owner of borrowed memory (a DLPack producer's tensor).
struct PyTensor {
  Tensor tensor;
  std::shared_ptr<void> owner;
};
// Imports an object with __dlpack__ (or a DLPack capsule) without copying where it is a
// row-major host tensor; strided ones are copied to a contiguous tensor. CUDA tensors become
// device tensors (rlx::Tensor::borrow_device; row-major only) sharing the producer's memory.
PyTensor tensor_from_dlpack(const py::handle& obj);

// ---- graph_bindings.cpp ----
// The Python view of a graph: shared, so that values keep their graph alive.
using GraphPtr = std::shared_ptr<Graph>;

}  // namespace rlx::python

namespace rlx::python {

// A value of a graph being built: the graph (kept alive) and the node output.
struct PyValue {
  GraphPtr graph;
  Value value;
};

// Name, dtype and (possibly symbolic) dims of a graph input, output or param.
struct ValueInfo {
  std::string name;
  std::string dtype;
  py::tuple shape;
};
ValueInfo value_info(const std::string& name, const Shape& s);
std::vector<ValueInfo> graph_inputs(const Graph& g);
std::vector<ValueInfo> graph_params(const Graph& g);
std::vector<ValueInfo> graph_outputs(const Graph& g);
// Output names of a graph: its own, "output_<i>" where one is missing.
std::vector<std::string> output_names(const Graph& g);

}  // namespace rlx::python
