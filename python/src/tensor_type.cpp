// rlx.Tensor (an rlx::Tensor in Python: buffer protocol, NumPy, DLPack export) and the DLPack
// import of host tensors (NumPy, PyTorch CPU, ...) and of CUDA tensors (PyTorch CUDA, ...),
// which stay in device memory (rlx::Tensor::borrow_device). DLPack 0.6 ABI (libdlpack-dev); bool
// uses the later standard's code 6 (kDLBool), which newer producers (PyTorch, NumPy >= 1.25) use.
//
// Streams (the array API's __dlpack__(stream=...)): rlx.from_dlpack asks a CUDA producer for
// its tensor on the legacy default stream (stream=1), so the producer orders its pending work
// before anything enqueued there later, and records that stream in the tensor: a run makes its
// own stream wait for it. Exporting, __dlpack__(stream=s) makes the consumer's stream s wait for
// the tensor's producer stream (nothing for run outputs: a run returns finished work).
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
    case DType::U8: case DType::U16: case DType::U32: case DType::U64: d.code = kDLUInt; break;
    case DType::Bool: d.code = kDLBoolCode; break;
    default: throw Error(std::string("DLPack: ") + dtype_name(t) + " (a storage-only dtype) has no DLPack dtype; cast it first");
  }
  return d;
}

DType dtype_of_dl(const DLDataType& d) {
  const std::string text = "code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits, " +
                           std::to_string(d.lanes) + " lanes";
  if (d.lanes != 1) throw Error("from_dlpack: vector dtypes (" + text + ") have no rlx dtype");
  for (DType t : kComputeDTypes) {
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
    case DType::U16: return "H";
    case DType::U64: return "Q";
    case DType::I4: case DType::I2: return "b";  // the stored values (float8/float4: their bits, "B")
    default: break;
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
  if (t.is_borrowed() && !pt.owner) {
    if (t.is_device())
      throw Error("rlx.Tensor.__dlpack__: a borrowed device tensor that nothing keeps alive cannot be exported");
    t = t.clone();  // a view nobody keeps alive: copy it
  }
  auto* ctx = new ExportContext{t, pt.owner, t.shape(), {}};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.is_device() ? t.device_data() : ctx->tensor.raw();
  dl.device = t.is_device() ? DLDevice{kDLCUDA, t.device_ordinal()} : DLDevice{kDLCPU, 0};
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

bool is_host(int type) { return type == kDLCPU || type == kDLCUDAHost; }
bool is_cuda(int type) { return type == kDLCUDA || type == kDLCUDAManaged; }

}  // namespace

PyTensor tensor_from_dlpack(const py::handle& obj) {
  py::object capsule;
  std::optional<uintptr_t> stream;  // a CUDA tensor's producer stream, when known
  std::optional<int> said;          // the device type __dlpack_device__ gave
  if (PyCapsule_CheckExact(obj.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(obj);  // a CUDA capsule: its producer stream is the caller's concern
  } else {
    int type = kDLCPU;
    if (py::hasattr(obj, "__dlpack_device__")) {
      const py::tuple dev = obj.attr("__dlpack_device__")();
      type = dev[0].cast<int>();
      said = type;
      if (!is_host(type) && !is_cuda(type))
        throw Error("from_dlpack: a tensor on DLPack device type " + std::to_string(type) +
                    "; rlx takes host (1) and CUDA (2) tensors (copy it to the CPU first, e.g. .cpu())");
    }
    if (is_cuda(type)) {
      // The producer makes its tensor ready on the legacy default stream; runs wait for that stream.
      capsule = obj.attr("__dlpack__")(py::arg("stream") = static_cast<int64_t>(Tensor::kCudaLegacyStream));
      stream = Tensor::kCudaLegacyStream;
    } else {
      capsule = obj.attr("__dlpack__")();
    }
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
  const int type = dl.device.device_type;
  if (!is_host(type) && !is_cuda(type))
    throw Error("from_dlpack: DLPack device type " + std::to_string(type) +
                " is neither host memory nor CUDA; rlx takes host (1) and CUDA (2) tensors");
  if (said && is_cuda(*said) != is_cuda(type))
    throw Error("from_dlpack: the producer's __dlpack_device__ says device type " + std::to_string(*said) +
                " but its capsule holds a tensor on device type " + std::to_string(type) +
                "; the producer is inconsistent");
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
  if (is_cuda(type)) {
    if (!compact) {
      std::string strides;
      for (int32_t d = 0; d < dl.ndim; ++d) strides += (d ? "," : "") + std::to_string(dl.strides[d]);
      throw Error("from_dlpack: a strided CUDA tensor " + std::string(dtype_name(t)) + dims_str(dims) + " (strides [" +
                  strides + "] elements); rlx reads device tensors row-major only: make it contiguous first "
                  "(e.g. .contiguous())");
    }
    if (dl.device.device_id < 0) throw Error("from_dlpack: negative CUDA device id " + std::to_string(dl.device.device_id));
    if (numel == 0) return PyTensor{Tensor::borrow_device(Device::Cuda, dl.device.device_id, t, dims, nullptr), nullptr};
    return PyTensor{Tensor::borrow_device(Device::Cuda, dl.device.device_id, t, dims, base, stream), std::move(owner)};
  }
  if (numel == 0) return PyTensor{Tensor::empty(t, dims), nullptr};
  if (compact) return PyTensor{Tensor::borrow(t, dims, base), std::move(owner)};
  return PyTensor{copy_strided(t, dims, dl.strides, base), nullptr};
}

void register_tensor(py::module_& m) {
  py::class_<PyTensor> cls(m, "Tensor", py::buffer_protocol(), R"doc(
A tensor of any rlx dtype: a row-major buffer with a dtype and a shape, in host memory or (from
``rlx.from_dlpack`` of a CUDA tensor, or ``Model.run(..., device_outputs=True)``) in CUDA device
memory (``device == 'cuda'``; ``to_host()`` copies it, host accessors raise rlx.Error).

It supports the buffer protocol (``memoryview``, ``np.asarray``; bf16 appears as uint16 bits),
``numpy()`` (no copy), and DLPack (``__dlpack__`` / ``__dlpack_device__``), so that
``np.from_dlpack(t)`` or ``torch.from_dlpack(t)`` share its memory. Model runs return NumPy
arrays unless ``as_tensors=True`` is passed; bf16 values are best moved as ``rlx.Tensor``.
)doc");
  cls.def(py::init([](const py::handle& obj, const py::object& dtype) {
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
      // which consumers asking for 1.x accept too), dl_device (the tensor's own device only), copy,
      // and stream: for a CUDA tensor, the consumer's stream (None: the legacy default stream,
      // -1: no synchronization, 1 / 2: the legacy / per-thread default stream, else a
      // cudaStream_t), which is made to wait for the tensor's producer stream.
      .def("__dlpack__", [](const PyTensor& t, const py::object& stream, const py::object& max_version,
                            const py::object& dl_device, const py::object& copy) {
             (void)max_version;
             const bool device = t.tensor.is_device();
             const std::pair<int, int> own{device ? kDLCUDA : kDLCPU, device ? t.tensor.device_ordinal() : 0};
             if (!dl_device.is_none()) {
               const auto dev = dl_device.cast<std::pair<int, int>>();
               if (dev != own)
                 throw Error("rlx.Tensor.__dlpack__: the tensor is on DLPack device (" + std::to_string(own.first) + ", " +
                             std::to_string(own.second) + "); it cannot be exported to (" + std::to_string(dev.first) +
                             ", " + std::to_string(dev.second) + ")");
             }
             if (!device) {
               if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1))
                 throw Error("rlx.Tensor.__dlpack__: host tensors take no stream (got " + py::repr(stream).cast<std::string>() + ")");
               if (!copy.is_none() && copy.cast<bool>()) return to_dlpack(PyTensor{t.tensor.clone(), nullptr});
               return to_dlpack(t);
             }
             if (!copy.is_none() && copy.cast<bool>())
               throw Error("rlx.Tensor.__dlpack__: copy=True is not supported for CUDA tensors (export it without a "
                           "copy, or copy it with to_host())");
             if (!stream.is_none() && !py::isinstance<py::int_>(stream))
               throw Error("rlx.Tensor.__dlpack__: stream must be an int or None, got " + py::repr(stream).cast<std::string>());
             const int64_t s = stream.is_none() ? static_cast<int64_t>(Tensor::kCudaLegacyStream) : stream.cast<int64_t>();
             if (s == 0)
               throw Error("rlx.Tensor.__dlpack__: stream 0 is ambiguous for CUDA (the array API disallows it); pass 1 "
                           "for the legacy default stream, 2 for the per-thread one, or a stream handle");
             if (s < -1) throw Error("rlx.Tensor.__dlpack__: stream " + std::to_string(s) + " is not a CUDA stream");
             if (s != -1) t.tensor.ready_on(static_cast<uintptr_t>(s));
             return to_dlpack(t);
           }, py::arg("stream") = py::none(), py::kw_only(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const PyTensor& t) {
             if (t.tensor.is_device()) return py::make_tuple(static_cast<int>(kDLCUDA), t.tensor.device_ordinal());
             return py::make_tuple(static_cast<int>(kDLCPU), 0);
           })
      .def_property_readonly("device", [](const PyTensor& t) { return std::string(device_name(t.tensor.device())); },
                             "'cpu' for a host tensor, 'cuda' for one in CUDA device memory.")
      .def_property_readonly("device_ordinal", [](const PyTensor& t) { return t.tensor.device_ordinal(); },
                             "The device's ordinal (0 for a host tensor).")
      .def("to_host", [](const PyTensor& t) {
             if (!t.tensor.is_device()) return t;
             Tensor h;
             {
               py::gil_scoped_release release;
               h = t.tensor.to_host();
             }
             return PyTensor{std::move(h), nullptr};
           }, "A host copy of a device tensor (waits for its producer stream); a host tensor itself.")
      .def("__len__", [](const PyTensor& t) {
             if (t.tensor.rank() == 0) throw py::type_error("len() of a 0-d rlx.Tensor");
             return t.tensor.dim(0);
           })
      .def("__repr__", [](const PyTensor& t) {
        if (t.tensor.is_device())
          return "rlx.Tensor(" + t.tensor.shape_info().str() + ", device='" + device_name(t.tensor.device()) + ":" +
                 std::to_string(t.tensor.device_ordinal()) + "')";
        return "rlx.Tensor(" + t.tensor.shape_info().str() + ")";
      })
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
  // pybind11 2.10 calls the buffer getter without catching C++ exceptions: device tensors are
  // refused here with a BufferError before it runs (np.asarray then tries __array__, which
  // raises rlx.Error).
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  static getbufferproc pybind_getbuffer = type->tp_as_buffer->bf_getbuffer;
  type->tp_as_buffer->bf_getbuffer = [](PyObject* obj, Py_buffer* view, int flags) -> int {
    const PyTensor* t = nullptr;
    try {
      t = &py::handle(obj).cast<const PyTensor&>();
    } catch (...) {
      t = nullptr;
    }
    if (t && t->tensor.is_device()) {
      PyErr_SetString(PyExc_BufferError, ("rlx.Tensor " + t->tensor.summary() +
                                          " is in device memory; copy it with to_host() first").c_str());
      return -1;
    }
    return pybind_getbuffer(obj, view, flags);
  };
  m.def("from_dlpack", &tensor_from_dlpack, py::arg("tensor"),
        "Imports a tensor from an object with __dlpack__ (NumPy, PyTorch, ...) or a DLPack capsule. "
        "Host tensors: shared when row-major (strided ones are copied). CUDA tensors stay in device "
        "memory (row-major only; the producer is asked for them on the legacy default stream, which "
        "runs wait for).");
}

}  // namespace rlx::python
