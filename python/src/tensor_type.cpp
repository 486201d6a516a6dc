// rlx.Tensor (an rlx::Tensor in Python: buffer protocol, NumPy, DLPack export) and the DLPack
// import of host tensors (NumPy, PyTorch CPU, ...). DLPack 0.6 ABI (libdlpack-dev); bool uses
// the later standard's code 6 (kDLBool), which newer producers (PyTorch, NumPy >= 1.25) use.
#include <dlpack/dlpack.h>

#include <cstring>

#include "bindings.h"

namespace rlx::python {
namespace {

constexpr uint8_t kDLBoolCode = 6;

DLDataType dl_dtype(DType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::F32: case DType::F16: case DType::F64: d.code = kDLFloat; break;
    case DType::BF16: d.code = kDLBfloat; break;
    case DType::I8: case DType::I16: case DType::I32: case DType::I64: d.code = kDLInt; break;
    case DType::U8: case DType::U32: d.code = kDLUInt; break;
    case DType::Bool: d.code = kDLBoolCode; break;
  }
  return d;
}

DType dtype_of_dl(const DLDataType& d) {
  const std::string text = "code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits, " +
                           std::to_string(d.lanes) + " lanes";
  if (d.lanes != 1) throw Error("from_dlpack: vector dtypes (" + text + ") have no rlx dtype");
  for (DType t : kAllDTypes) {
    const DLDataType e = dl_dtype(t);
    if (e.code == d.code && e.bits == d.bits) return t;
  }
  throw Error("from_dlpack: DLPack dtype " + text + " has no rlx dtype");
}

const char* buffer_format(DType t) {
  switch (t) {
    case DType::F32: return "f";
    case DType::F16: return "e";
    case DType::BF16: return "H";  // the bits (the buffer protocol has no bfloat16)
    case DType::F64: return "d";
    case DType::I8: return "b";
    case DType::I16: return "h";
    case DType::I32: return "i";
    case DType::I64: return "q";
    case DType::U8: return "B";
    case DType::U32: return "I";
    case DType::Bool: return "?";
  }
  return "B";
}

// What an exported DLManagedTensor owns: a Tensor sharing the storage, the owner of borrowed
// memory (a DLPack import), and the shape array.
struct ExportContext {
  Tensor tensor;
  std::shared_ptr<void> owner;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

void delete_export(DLManagedTensor* m) { delete static_cast<ExportContext*>(m->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": nobody consumed it, so it owns the tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

py::capsule to_dlpack(const PyTensor& pt) {
  Tensor t = pt.tensor;
  if (t.is_borrowed() && !pt.owner) t = t.clone();  // a view nobody keeps alive: copy it
  auto* ctx = new ExportContext{t, pt.owner, t.shape(), {}};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = ctx->tensor.raw();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int32_t>(ctx->shape.size());
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;  // compact row-major
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = delete_export;
  return py::capsule(&ctx->managed, "dltensor", capsule_destructor);
}

// Copies a strided tensor (element strides, any sign) into a new row-major tensor.
Tensor copy_strided(DType t, const std::vector<int64_t>& dims, const int64_t* strides, const uint8_t* base) {
  Tensor out = Tensor::empty(t, dims);
  const size_t esize = dtype_size(t);
  auto* dst = static_cast<uint8_t*>(out.raw());
  const int64_t n = out.numel();
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < dims.size(); ++d) off += idx[d] * strides[d];
    std::memcpy(dst + static_cast<size_t>(i) * esize, base + off * static_cast<int64_t>(esize), esize);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

PyTensor tensor_from_dlpack(const py::handle& obj) {
  py::object capsule;
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(obj);
  } else {
    if (py::hasattr(obj, "__dlpack_device__")) {
      const py::tuple dev = obj.attr("__dlpack_device__")();
      const int type = dev[0].cast<int>();
      if (type != kDLCPU && type != kDLCUDAHost)
        throw Error("from_dlpack: a tensor on DLPack device type " + std::to_string(type) +
                    " (2 = CUDA); rlx takes host tensors here (copy it to the CPU first, e.g. .cpu())");
    }
    capsule = obj.attr("__dlpack__")();
  }
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
    throw Error("from_dlpack: not an unconsumed DLPack capsule (a capsule can be imported once)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");  // ownership moves to us
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) {
      py::gil_scoped_acquire gil;  // producers' deleters may release Python objects
      m->deleter(m);
    }
  });
  const DLTensor& dl = managed->dl_tensor;
  if (dl.device.device_type != kDLCPU && dl.device.device_type != kDLCUDAHost)
    throw Error("from_dlpack: DLPack device type " + std::to_string(dl.device.device_type) +
                " is not host memory; rlx takes host tensors here");
  const DType t = dtype_of_dl(dl.dtype);
  if (dl.ndim < 0) throw Error("from_dlpack: negative ndim");
  std::vector<int64_t> dims(dl.shape, dl.shape + dl.ndim);
  for (int64_t d : dims)
    if (d < 0) throw Error("from_dlpack: negative dim in shape " + dims_str(dims));
  checked_nbytes(dims, t, "from_dlpack tensor");
  auto* base = static_cast<uint8_t*>(dl.data) + dl.byte_offset;
  bool compact = true;
  if (dl.strides) {
    int64_t expect = 1;
    for (int32_t d = dl.ndim; d-- > 0;) {
      if (dims[static_cast<size_t>(d)] != 1 && dl.strides[d] != expect) compact = false;
      expect *= dims[static_cast<size_t>(d)];
    }
  }
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  if (numel == 0) return PyTensor{Tensor::empty(t, dims), nullptr};
  if (compact) return PyTensor{Tensor::borrow(t, dims, base), std::move(owner)};
  return PyTensor{copy_strided(t, dims, dl.strides, base), nullptr};
}

void register_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", py::buffer_protocol(), R"doc(
A host tensor of any rlx dtype: a row-major buffer with a dtype and a shape.

It supports the buffer protocol (``memoryview``, ``np.asarray``; bf16 appears as uint16 bits),
``numpy()`` (no copy), and DLPack (``__dlpack__`` / ``__dlpack_device__``), so that
``np.from_dlpack(t)`` or ``torch.from_dlpack(t)`` share its memory. Model runs return NumPy
arrays unless ``as_tensors=True`` is passed; bf16 values are best moved as ``rlx.Tensor``.
)doc")
      .def(py::init([](const py::handle& obj, const py::object& dtype) {
             HeldTensor h = tensor_from_py(obj, dtype.is_none() ? std::nullopt : std::optional(dtype_from_py(dtype)),
                                           "rlx.Tensor");
             if (!dtype.is_none()) {
               const DType to = dtype_from_py(dtype);
               if (h.tensor.dtype() != to) return PyTensor{h.tensor.cast(to), nullptr};
             }
             return PyTensor{h.tensor.clone(), nullptr};
           }),
           py::arg("data"), py::arg("dtype") = py::none(),
           "An owning copy of `data` (array, list, scalar, DLPack tensor), cast to `dtype` when given "
           "(float -> bf16/f16 rounds to nearest even).")
      .def_property_readonly("dtype", [](const PyTensor& t) { return dtype_name(t.tensor.dtype()); })
      .def_property_readonly("shape", [](const PyTensor& t) { return py::tuple(py::cast(t.tensor.shape())); })
      .def_property_readonly("ndim", [](const PyTensor& t) { return t.tensor.rank(); })
      .def_property_readonly("size", [](const PyTensor& t) { return t.tensor.numel(); })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.tensor.nbytes(); })
      .def("numpy", [](const PyTensor& t) { return tensor_to_numpy(t.tensor); },
           "A NumPy array over the same memory (bf16: uint16 bits; a borrowed DLPack import is copied).")
      .def("astype", [](const PyTensor& t, const py::handle& dtype) { return PyTensor{t.tensor.cast(dtype_from_py(dtype)), nullptr}; },
           py::arg("dtype"), "A converted copy (rlx's Cast semantics: float -> int truncates).")
      .def("to_float32", [](const PyTensor& t) { return tensor_to_numpy(t.tensor.cast(DType::F32)); },
           "The values as a float32 NumPy array (e.g. to read bf16).")
      .def("__array__", [](const PyTensor& t, const py::object& dtype) {
             py::array a = tensor_to_numpy(t.tensor);
             return dtype.is_none() ? py::object(a) : a.attr("astype")(dtype);
           }, py::arg("dtype") = py::none())
      // The array API's keywords: max_version (the capsule is the unversioned DLPack 0.x one,
      // which consumers asking for 1.x accept too), dl_device (only the CPU), copy.
      .def("__dlpack__", [](const PyTensor& t, const py::object& stream, const py::object& max_version,
                            const py::object& dl_device, const py::object& copy) {
             (void)max_version;
             if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1))
               throw Error("rlx.Tensor.__dlpack__: host tensors take no stream (got " + py::repr(stream).cast<std::string>() + ")");
             if (!dl_device.is_none()) {
               const auto dev = dl_device.cast<std::pair<int, int>>();
               if (dev.first != kDLCPU)
                 throw Error("rlx.Tensor.__dlpack__: the tensor is in host memory; it cannot be exported to DLPack device type " +
                             std::to_string(dev.first));
             }
             if (!copy.is_none() && copy.cast<bool>()) return to_dlpack(PyTensor{t.tensor.clone(), nullptr});
             return to_dlpack(t);
           }, py::arg("stream") = py::none(), py::kw_only(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const PyTensor&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); })
      .def("__len__", [](const PyTensor& t) {
             if (t.tensor.rank() == 0) throw py::type_error("len() of a 0-d rlx.Tensor");
             return t.tensor.dim(0);
           })
      .def("__repr__", [](const PyTensor& t) { return "rlx.Tensor(" + t.tensor.shape_info().str() + ")"; })
      .def_buffer([](PyTensor& t) {
        if (t.tensor.is_borrowed() && !t.owner) t.tensor = t.tensor.clone();
        const auto esize = static_cast<py::ssize_t>(dtype_size(t.tensor.dtype()));
        std::vector<py::ssize_t> shape(t.tensor.shape().begin(), t.tensor.shape().end()), strides(shape.size());
        py::ssize_t s = esize;
        for (size_t i = shape.size(); i-- > 0;) {
          strides[i] = s;
          s *= shape[i];
        }
        return py::buffer_info(t.tensor.raw(), esize, buffer_format(t.tensor.dtype()),
                               static_cast<py::ssize_t>(shape.size()), shape, strides);
      });
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("tensor"),
        "Imports a host tensor from an object with __dlpack__ (NumPy, PyTorch CPU, ...) or a DLPack "
        "capsule, sharing its memory when it is row-major (strided ones are copied).");
}

}  // namespace rlx::python
