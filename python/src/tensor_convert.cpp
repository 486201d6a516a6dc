// Python objects <-> rlx::Tensor: NumPy arrays (borrowed when the layout allows, else copied
// once), rlx.Tensor, DLPack producers (host or CUDA), lists and scalars; outputs as NumPy arrays
// over the tensor's own storage (host tensors only).
#include "bindings.h"

namespace rlx::python {
namespace {

constexpr int kNpyAligned = 0x0100;  // NPY_ARRAY_ALIGNED

std::string expected_text(std::optional<DType> expected) {
  return expected ? std::string(" (expected ") + dtype_name(*expected) + ")" : std::string();
}

std::vector<int64_t> array_dims(const py::array& a) {
  std::vector<int64_t> dims(static_cast<size_t>(a.ndim()));
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(a.shape(static_cast<py::ssize_t>(i)));
  return dims;
}

HeldTensor from_array(py::array arr, std::optional<DType> expected, const std::string& what) {
  const py::dtype d = arr.dtype();
  const std::optional<DType> t = dtype_of_numpy(d);
  if (!t)
    throw Error(what + ": NumPy dtype " + py::str(d.attr("name")).cast<std::string>() + " has no rlx dtype" + expected_text(expected));
  const char order = py::detail::array_descriptor_proxy(d.ptr())->byteorder;
  const bool native = order != '>';  // '=' native, '|' single byte, '<' little endian (this host)
  if (!native || !(arr.flags() & py::array::c_style) || !(arr.flags() & kNpyAligned)) {
    // One copy to a row-major, aligned, native-order array (NumPy's own conversion).
    arr = py::module_::import("numpy").attr("ascontiguousarray")(arr, d.attr("newbyteorder")("="));
  }
  Tensor tensor = Tensor::borrow(*t, array_dims(arr), const_cast<void*>(arr.data()));
  return HeldTensor{std::move(tensor), std::move(arr)};
}

}  // namespace

HeldTensor tensor_from_py(const py::handle& obj, std::optional<DType> expected, const std::string& what) {
  if (py::isinstance<py::array>(obj)) return from_array(py::reinterpret_borrow<py::array>(obj), expected, what);
  if (py::isinstance<PyTensor>(obj))
    return HeldTensor{obj.cast<const PyTensor&>().tensor, py::reinterpret_borrow<py::object>(obj)};
  if (py::hasattr(obj, "__dlpack__")) {
    py::object held = py::cast(tensor_from_dlpack(obj));
    Tensor t = held.cast<const PyTensor&>().tensor;
    return HeldTensor{std::move(t), std::move(held)};
  }
  // Lists, scalars, buffers: converted to the expected dtype (bf16 through f32).
  py::module_ np = py::module_::import("numpy");
  if (expected == DType::BF16) {
    py::array_t<float, py::array::c_style | py::array::forcecast> f = np.attr("asarray")(obj, "float32");
    std::vector<int64_t> dims = array_dims(f);
    Tensor t = Tensor::bf16(std::move(dims), std::span<const float>(f.data(), static_cast<size_t>(f.size())));
    return HeldTensor{std::move(t), py::none()};
  }
  py::array arr = expected ? np.attr("asarray")(obj, numpy_dtype(*expected)) : np.attr("asarray")(obj);
  return from_array(std::move(arr), expected, what);
}

py::array tensor_to_numpy(const Tensor& t) {
  if (t.is_device())
    throw Error("NumPy array of rlx.Tensor " + t.summary() + ": the tensor is in device memory; copy it with "
                "to_host() first (or hand it to a device consumer through DLPack)");
  const Tensor owned = t.is_borrowed() ? t.clone() : t;
  const py::dtype d = numpy_dtype(owned.dtype());
  std::vector<py::ssize_t> shape(owned.shape().begin(), owned.shape().end());
  if (owned.numel() == 0 || owned.raw() == nullptr) return py::array(d, shape);
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(owned.dtype()));
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  // The capsule holds a copy of the Tensor: it shares (and keeps alive) the storage.
  auto* keep = new Tensor(owned);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(d, std::move(shape), std::move(strides), keep->raw(), base);
}

}  // namespace rlx::python
