#include "rlx/tensor.h"

#include <new>

#include "rlx/dtype_narrow.h"
#include "rlx/limits.h"
#include "runtime/device_api.h"
#include "runtime/device_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace rlx {
namespace {

template <class Dst, class Src>
Dst convert_scalar(Src s) {
  using SC = compute_t<Src>;
  const SC v = load(s);
  if constexpr (std::is_same_v<Dst, f16> || std::is_same_v<Dst, bf16>) {
    return Dst(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<Dst>) {
    return static_cast<Dst>(v);
  } else {
    // integer destination
    if constexpr (std::is_floating_point_v<SC>) {
      if (std::isnan(v)) return Dst(0);
      const double t = std::trunc(static_cast<double>(v));
      if (t <= static_cast<double>(std::numeric_limits<Dst>::lowest())) return std::numeric_limits<Dst>::lowest();
      if (t >= static_cast<double>(std::numeric_limits<Dst>::max())) return std::numeric_limits<Dst>::max();
      return static_cast<Dst>(t);
    } else {
      return static_cast<Dst>(v);
    }
  }
}

}  // namespace

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  const auto bytes = static_cast<size_t>(checked_nbytes(shape, dtype, "tensor"));
  t.shape_ = std::move(shape);
  // Zeroed by calloc: large blocks come from the kernel already zero (no memset over fresh pages;
  // a 100 MB weight copied into a new tensor was written twice before).
  auto* p = static_cast<uint8_t*>(std::calloc(std::max<size_t>(bytes, 1), 1));
  if (!p)
    throw Error("out of memory allocating a tensor " + std::string(dtype_name(dtype)) + dims_str(t.shape_) + " of " +
                std::to_string(bytes) + " bytes; use smaller inputs or free memory");
  t.storage_ = std::shared_ptr<uint8_t[]>(p, [](uint8_t* q) { std::free(q); });  // frees p itself if it throws
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes) {
  const auto need = static_cast<size_t>(checked_nbytes(shape, dtype, "Tensor::from_bytes"));
  if (nbytes != need)
    throw Error("Tensor::from_bytes: got " + std::to_string(nbytes) + " bytes for " + dtype_name(dtype) +
                dims_str(shape) + " which needs " + std::to_string(need));
  Tensor t = empty(dtype, std::move(shape));
  if (nbytes) std::memcpy(t.data_, bytes, nbytes);
  return t;
}

Tensor Tensor::borrow(DType dtype, std::vector<int64_t> shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  checked_nbytes(shape, dtype, "Tensor::borrow");
  t.shape_ = std::move(shape);
  if (!data && t.numel() != 0) throw Error("Tensor::borrow: null data for a non-empty tensor " + t.shape_info().str());
  t.data_ = data;
  return t;
}

Tensor Tensor::borrow_device(Device device, int ordinal, DType dtype, std::vector<int64_t> shape, void* data,
                             std::optional<uintptr_t> stream) {
  checked_nbytes(shape, dtype, "Tensor::borrow_device");
  const std::string what = std::string("Tensor::borrow_device(") + device_name(device) + ", " + std::to_string(ordinal) +
                           ", " + dtype_name(dtype) + dims_str(shape) + ")";
  if (device != Device::Cuda)
    throw Error(what + ": rlx takes device memory of CUDA only; pass " + device_name(device) +
                " data as a host tensor (Tensor::borrow)");
  if (ordinal < 0) throw Error(what + ": negative device ordinal");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  if (!data && t.numel() != 0) throw Error(what + ": null device pointer for a non-empty tensor");
  if (stream && *stream == 0)
    throw Error(what + ": stream 0 is ambiguous; pass Tensor::kCudaLegacyStream (1) for the legacy default stream");
  t.data_ = data;
  t.device_ = device;
  t.ordinal_ = ordinal;
  t.stream_ = stream;
  return t;
}

Tensor Tensor::adopt_device(Device device, int ordinal, DType dtype, std::vector<int64_t> shape, void* data,
                            std::shared_ptr<void> owner) {
  Tensor t = borrow_device(device, ordinal, dtype, std::move(shape), data);
  if (!owner) throw Error("Tensor::adopt_device: no owner given (use borrow_device for memory the caller keeps)");
  t.storage_ = std::move(owner);
  return t;
}

void Tensor::throw_not_host(const char* what) const {
  throw Error(std::string("Tensor::") + what + ": the tensor " + shape_info().str() + " is in " + device_name(device_) +
              " memory (device " + std::to_string(ordinal_) +
              "), not host memory; copy it to the host with to_host() first, or pass it to a graph compiled for " +
              device_name(device_));
}

void* Tensor::device_data() const {
  if (device_ == Device::Cpu)
    throw Error("Tensor::device_data: the tensor " + shape_info().str() + " is in host memory; use raw() or data()");
  return data_;
}

void Tensor::ready_on(uintptr_t consumer) const {
  if (device_ == Device::Cpu) throw Error("Tensor::ready_on: the tensor " + shape_info().str() + " is in host memory");
  if (!stream_ || *stream_ == consumer) return;
#ifdef RLX_HAVE_CUDA
  cuda::stream_wait(*stream_, consumer);
#else
  throw Error("Tensor::ready_on: this build of rlx has no CUDA backend (configure with -DRLX_CUDA=ON)");
#endif
}

Tensor Tensor::to_host() const {
  if (device_ == Device::Cpu) return *this;
  Tensor out = empty(dtype_, shape_);
  if (nbytes() == 0) return out;
#ifdef RLX_HAVE_CUDA
  cuda::copy_to_host(out.data_, data_, nbytes(), stream_);
  detail::note_download(nbytes());
  return out;
#else
  throw Error("Tensor::to_host: this build of rlx has no CUDA backend (configure with -DRLX_CUDA=ON)");
#endif
}

Tensor Tensor::f32(std::vector<int64_t> shape, std::span<const float> v) { return of<float>(std::move(shape), v); }
Tensor Tensor::f64(std::vector<int64_t> shape, std::span<const double> v) { return of<double>(std::move(shape), v); }
Tensor Tensor::i64(std::vector<int64_t> shape, std::span<const int64_t> v) { return of<int64_t>(std::move(shape), v); }
Tensor Tensor::i32(std::vector<int64_t> shape, std::span<const int32_t> v) { return of<int32_t>(std::move(shape), v); }
Tensor Tensor::boolean(std::vector<int64_t> shape, std::span<const uint8_t> v) {
  Tensor t = from_bytes(DType::Bool, std::move(shape), v.data(), v.size());
  auto* p = static_cast<uint8_t*>(t.data_);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] ? 1 : 0;
  return t;
}
Tensor Tensor::f16(std::vector<int64_t> shape, std::span<const float> v) {
  Tensor t = empty(DType::F16, std::move(shape));
  if (static_cast<int64_t>(v.size()) != t.numel())
    throw Error("Tensor::f16: got " + std::to_string(v.size()) + " values for " + t.shape_info().str());
  auto* p = static_cast<rlx::f16*>(t.data_);
  for (size_t i = 0; i < v.size(); ++i) p[i] = rlx::f16(v[i]);
  return t;
}
Tensor Tensor::bf16(std::vector<int64_t> shape, std::span<const float> v) {
  Tensor t = empty(DType::BF16, std::move(shape));
  if (static_cast<int64_t>(v.size()) != t.numel())
    throw Error("Tensor::bf16: got " + std::to_string(v.size()) + " values for " + t.shape_info().str());
  auto* p = static_cast<rlx::bf16*>(t.data_);
  for (size_t i = 0; i < v.size(); ++i) p[i] = rlx::bf16(v[i]);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void Tensor::check_type(DType t) const {
  check_host("data");
  if (t == dtype_) return;
  if (t == DType::U8 && dtype_ == DType::Bool) return;  // bool is stored as uint8_t
  throw Error(std::string("tensor of dtype ") + dtype_name(dtype_) + " accessed as " + dtype_name(t));
}

Tensor Tensor::cast(DType to) const {
  check_host("cast");
  Tensor out = empty(to, shape_);
  const int64_t n = numel();
  if (is_storage_only(dtype_) || is_storage_only(to)) {  // rlx/dtype_narrow.h (saturating)
    cast_narrow(dtype_, to, data_, out.data_, n);
    return out;
  }
  visit_dtype(dtype_, [&]<DType S>() {
    using ST = typename dtype_storage<S>::type;
    visit_dtype(to, [&]<DType D>() {
      using DT = typename dtype_storage<D>::type;
      const ST* src = static_cast<const ST*>(data_);
      DT* dst = static_cast<DT*>(out.data_);
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (D == DType::Bool) {
          dst[i] = load(src[i]) != 0 ? 1 : 0;
        } else {
          dst[i] = convert_scalar<DT>(src[i]);
        }
      }
    });
  });
  return out;
}

Tensor Tensor::clone() const {
  check_host("clone");
  return from_bytes(dtype_, shape_, data_, nbytes()); }

std::vector<double> Tensor::to_f64() const {
  check_host("to_f64");
  Tensor c = cast(DType::F64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + numel());
}
std::vector<float> Tensor::to_f32() const {
  check_host("to_f32");
  Tensor c = cast(DType::F32);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + numel());
}
std::vector<int64_t> Tensor::to_i64() const {
  check_host("to_i64");
  Tensor c = cast(DType::I64);
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + numel());
}

Tensor Tensor::reshaped(std::vector<int64_t> shape) const {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw Error("Tensor::reshaped: more than one -1 in " + dims_str(shape));
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw Error("Tensor::reshaped: negative dim in " + dims_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw Error("Tensor::reshaped: cannot infer -1 in " + dims_str(shape) + " from " + dims_str(shape_));
    shape[static_cast<size_t>(infer)] = numel() / known;
  }
  if (product(shape) != numel())
    throw Error("Tensor::reshaped: " + dims_str(shape_) + " has " + std::to_string(numel()) +
                " elements, " + dims_str(shape) + " needs " + std::to_string(product(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::string Tensor::summary() const {
  std::ostringstream os;
  os << shape_info().str();
  if (device_ != Device::Cpu) return os.str() + " on " + device_name(device_) + ":" + std::to_string(ordinal_);
  const int64_t n = numel();
  if (n == 0) return os.str() + " (empty)";
  std::vector<double> v = to_f64();
  double mn = v[0], mx = v[0], sum = 0;
  int64_t nan = 0;
  for (double x : v) {
    if (std::isnan(x)) { ++nan; continue; }
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    sum += x;
  }
  os << " min=" << mn << " max=" << mx << " mean=" << sum / static_cast<double>(n - nan) << " sum=" << sum;
  if (nan) os << " nan=" << nan;
  return os.str();
}

}  // namespace rlx
