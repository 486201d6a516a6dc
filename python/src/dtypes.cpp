// Dtypes and dims between Python and rlx: NumPy dtypes, dtype names, symbolic dims.
#include <array>

#include "bindings.h"

namespace rlx::python {
namespace {

const char* numpy_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "uint16";  // the bits; NumPy has no bfloat16
    case DType::F64: return "float64";
    case DType::I8: return "int8";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::U32: return "uint32";
    case DType::Bool: return "bool";
    case DType::U16: return "uint16";
    case DType::U64: return "uint64";
    // The storage-only dtypes as their stored bytes: float8/float4 bits, sub-byte integer values.
    case DType::I4: case DType::I2: return "int8";
    case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2: case DType::F8E5M2FNUZ:
    case DType::F8E8M0: case DType::F4E2M1: case DType::U4: case DType::U2: return "uint8";
  }
  throw Error("numpy_dtype: corrupt dtype value");
}

// NumPy-style spellings accepted where a dtype is named (besides rlx's own "f32", "bf16", ...).
std::optional<DType> dtype_from_long_name(std::string_view s) {
  if (s == "bfloat16") return DType::BF16;
  for (DType t : kComputeDTypes)
    if (t != DType::BF16 && s == numpy_name(t)) return t;
  return std::nullopt;
}

}  // namespace

py::dtype numpy_dtype(DType t) {
  // Made once: building a py::dtype from a name is a Python call, and outputs need one per run.
  static std::array<py::dtype*, kDTypeCount>* cache = [] {
    auto* c = new std::array<py::dtype*, kDTypeCount>();  // never freed: lives until the interpreter exits
    for (size_t i = 0; i < kDTypeCount; ++i) (*c)[i] = new py::dtype(numpy_name(kAllDTypes[i]));
    return c;
  }();
  const auto i = static_cast<size_t>(t);
  if (i >= kDTypeCount) throw Error("numpy_dtype: corrupt dtype value " + std::to_string(i));
  return *(*cache)[i];
}

std::optional<DType> dtype_of_numpy(const py::dtype& d) {
  const char kind = d.kind();
  const auto size = d.itemsize();
  switch (kind) {
    case 'f':
      if (size == 2) return DType::F16;
      if (size == 4) return DType::F32;
      if (size == 8) return DType::F64;
      return std::nullopt;
    case 'i':
      if (size == 1) return DType::I8;
      if (size == 2) return DType::I16;
      if (size == 4) return DType::I32;
      if (size == 8) return DType::I64;
      return std::nullopt;
    case 'u':
      if (size == 1) return DType::U8;
      if (size == 2) return DType::BF16;  // uint16 arrays carry bf16 bits (name 'u16' for u16 values)
      if (size == 4) return DType::U32;
      if (size == 8) return DType::U64;
      return std::nullopt;
    case 'b': return DType::Bool;
    default:
      // ml_dtypes.bfloat16 (when installed) is a 2-byte dtype of its own kind.
      if (size == 2 && py::str(d.attr("name")).cast<std::string>() == "bfloat16") return DType::BF16;
      return std::nullopt;
  }
}

DType dtype_from_py(const py::handle& h) {
  if (py::isinstance<py::str>(h)) {
    const std::string s = h.cast<std::string>();
    if (auto t = dtype_from_long_name(s)) return *t;
    try {
      return dtype_from_name(s);
    } catch (const Error&) {
      std::string names;
      for (DType t : kAllDTypes) names += std::string(names.empty() ? "" : ", ") + dtype_name(t);
      throw Error("unknown dtype '" + s + "'; rlx dtypes: " + names + " (or NumPy names such as 'float32')");
    }
  }
  py::dtype d;
  try {
    d = py::dtype::from_args(py::reinterpret_borrow<py::object>(h));
  } catch (py::error_already_set& e) {
    // NumPy's "not a dtype" is a TypeError; anything else (KeyboardInterrupt, ...) goes on as is.
    if (!e.matches(PyExc_TypeError)) throw;
    throw Error("not a dtype: " + py::repr(h).cast<std::string>() + " (use 'f32', 'i64', np.float32, ...)");
  }
  if (auto t = dtype_of_numpy(d)) return *t;
  throw Error("NumPy dtype " + py::str(d).cast<std::string>() + " has no rlx dtype");
}

py::object dim_to_py(const Dim& d) {
  if (d.is_symbolic()) return py::str(d.sym);
  return py::int_(d.value);
}

py::tuple dims_to_py(const std::vector<Dim>& dims) {
  py::tuple t(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t[i] = dim_to_py(dims[i]);
  return t;
}

std::vector<Dim> dims_from_py(const py::handle& seq, const char* what) {
  if (py::isinstance<py::str>(seq) || !py::isinstance<py::sequence>(seq))
    throw Error(std::string(what) + ": expected a sequence of dims (ints, or strings for symbolic dims), got " +
                py::repr(seq).cast<std::string>());
  std::vector<Dim> dims;
  for (const py::handle item : seq) {
    if (py::isinstance<py::str>(item)) {
      const std::string s = item.cast<std::string>();
      if (s.empty()) throw Error(std::string(what) + ": a symbolic dim needs a non-empty name");
      dims.push_back(Dim::symbol(s));
    } else if (py::isinstance<py::int_>(item) || py::hasattr(item, "__index__")) {
      const auto v = py::int_(py::reinterpret_borrow<py::object>(item)).cast<int64_t>();
      if (v < 0) throw Error(std::string(what) + ": dim " + std::to_string(v) + " is negative");
      dims.emplace_back(v);
    } else {
      throw Error(std::string(what) + ": a dim is an int or a str (symbolic), got " + py::repr(item).cast<std::string>());
    }
  }
  return dims;
}

void register_dtypes(py::module_& m) {
  py::list names;
  for (DType t : kAllDTypes) names.append(dtype_name(t));
  m.attr("dtypes") = names;
  m.def("numpy_dtype", [](const py::handle& t) { return numpy_dtype(dtype_from_py(t)); }, py::arg("dtype"),
        "The NumPy dtype that holds values of an rlx dtype (bf16: uint16, the raw bits; float8/float4: "
        "uint8 bits; int4/int2: int8, uint4/uint2: uint8 values).");
  m.def("dtype_name", [](const py::handle& t) { return std::string(dtype_name(dtype_from_py(t))); }, py::arg("dtype"),
        "rlx's name of a dtype given as a name, NumPy dtype or NumPy scalar type ('f32', ...).");
}

}  // namespace rlx::python
