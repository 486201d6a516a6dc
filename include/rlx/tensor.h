#pragma once
// rlx::Tensor: dtype + concrete shape + bytes. Owning (shared storage) or a borrowed
// view of memory the caller keeps alive. Copies of a Tensor share storage.
//
// A tensor is in host memory (device() == Device::Cpu) or in the memory of a device
// (is_device(): today CUDA only, made by borrow_device / adopt_device or returned by a run with
// RunOptions::device_outputs). Device tensors carry their dtype, shape and device pointer; every
// accessor that would read or write the bytes on the host (raw, data, cast, clone, to_f32...)
// throws rlx::Error for them (summary() gives only dtype, shape and device): copy them with
// to_host() first.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rlx/device.h"
#include "rlx/dtype.h"
#include "rlx/shape.h"

namespace rlx {

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized (zero-filled) owning tensor.
  static Tensor empty(DType dtype, std::vector<int64_t> shape);
  static Tensor zeros(DType dtype, std::vector<int64_t> shape) { return empty(dtype, std::move(shape)); }
  // Owning copy of `bytes` (must be exactly numel * dtype_size bytes).
  static Tensor from_bytes(DType dtype, std::vector<int64_t> shape, const void* bytes, size_t nbytes);
  // Borrowed view: rlx reads/writes `data` in place; the caller keeps it alive.
  static Tensor borrow(DType dtype, std::vector<int64_t> shape, void* data);

  // ---- device memory ----
  // CUDA stream handles as integers (a cudaStream_t's bits), as DLPack's __dlpack__(stream=)
  // numbers them: 1 is the legacy default stream, 2 the per-thread default stream.
  static constexpr uintptr_t kCudaLegacyStream = 1, kCudaPerThreadStream = 2;
  // Borrowed view of device memory: `data` is a pointer into the memory of device `ordinal` of
  // `device` (Device::Cuda only), which the caller keeps alive and unchanged while rlx uses it.
  // `stream`: the stream whose enqueued work produces the values; a run that reads the tensor
  // makes its own stream wait for the work enqueued there so far (nullopt: the values are ready
  // now, nothing to wait for). Other devices, a negative ordinal or null data -> rlx::Error.
  static Tensor borrow_device(Device device, int ordinal, DType dtype, std::vector<int64_t> shape, void* data,
                              std::optional<uintptr_t> stream = std::nullopt);
  // Device memory the tensor owns: `owner` (e.g. a holder that frees the allocation) is released
  // when the last copy of the Tensor goes. The values are ready (no stream to wait for).
  static Tensor adopt_device(Device device, int ordinal, DType dtype, std::vector<int64_t> shape, void* data,
                             std::shared_ptr<void> owner);

  // Typed helpers. `values.size()` must equal the shape's element count.
  static Tensor f32(std::vector<int64_t> shape, std::span<const float> values);
  static Tensor f64(std::vector<int64_t> shape, std::span<const double> values);
  static Tensor f16(std::vector<int64_t> shape, std::span<const float> values);   // rounds
  static Tensor bf16(std::vector<int64_t> shape, std::span<const float> values);  // rounds
  static Tensor i64(std::vector<int64_t> shape, std::span<const int64_t> values);
  static Tensor i32(std::vector<int64_t> shape, std::span<const int32_t> values);
  static Tensor boolean(std::vector<int64_t> shape, std::span<const uint8_t> values);
  template <class T>
  static Tensor of(std::vector<int64_t> shape, std::span<const T> values) {
    return from_bytes(dtype_of<T>(), std::move(shape), values.data(), values.size_bytes());
  }
  static Tensor scalar_f32(float v) { return f32({}, std::span<const float>(&v, 1)); }
  static Tensor scalar_i64(int64_t v) { return i64({}, std::span<const int64_t>(&v, 1)); }

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_borrowed() const { return !storage_; }
  // The only handle to bytes it owns (no other Tensor shares them, not borrowed).
  bool owns_alone() const { return storage_ && storage_.use_count() == 1; }
  Shape shape_info() const { return Shape::from(shape_, dtype_); }

  // Where the bytes are: Device::Cpu (host memory) or a device; the device's ordinal (0 on the host).
  Device device() const { return device_; }
  int device_ordinal() const { return ordinal_; }
  bool is_device() const { return device_ != Device::Cpu; }
  // The device pointer of a device tensor (rlx::Error for a host tensor).
  void* device_data() const;
  // The stream a consumer must wait on before reading a device tensor (borrow_device), if any.
  std::optional<uintptr_t> stream() const { return stream_; }
  // Makes work enqueued later on CUDA stream `consumer` (kCudaLegacyStream, ... or a handle) wait
  // for this device tensor's producer stream (nothing when it has none). Host tensor -> rlx::Error.
  void ready_on(uintptr_t consumer) const;
  // A host copy of a device tensor (counted as a download in rlx::device_stats; waits for the
  // producer stream); a host tensor is returned as is (shared storage).
  Tensor to_host() const;

  // Host bytes. A device tensor -> rlx::Error (use device_data() or to_host()).
  void* raw() { check_host("raw"); return data_; }
  const void* raw() const { check_host("raw"); return data_; }
  // Typed access; throws rlx::Error when T does not match the dtype or the tensor is on a device.
  template <class T> T* data() { check_type(dtype_of<T>()); return static_cast<T*>(data_); }
  template <class T> const T* data() const { check_type(dtype_of<T>()); return static_cast<const T*>(data_); }

  // Conversions (always copies; host tensors only).
  Tensor cast(DType to) const;
  Tensor clone() const;
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  std::vector<int64_t> to_i64() const;
  // Same storage, new shape with the same element count (-1 allowed once).
  Tensor reshaped(std::vector<int64_t> shape) const;

  std::string summary() const;  // "f32[2,3] min=.. max=.. mean=.."; "f32[2,3] on cuda:0" on a device

 private:
  void check_type(DType t) const;
  void check_host(const char* what) const {
    if (device_ != Device::Cpu) throw_not_host(what);
  }
  [[noreturn]] void throw_not_host(const char* what) const;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<void> storage_;  // null: borrowed
  void* data_ = nullptr;
  Device device_ = Device::Cpu;
  int ordinal_ = 0;
  std::optional<uintptr_t> stream_;
};

}  // namespace rlx
