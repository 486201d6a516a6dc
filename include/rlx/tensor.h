#pragma once
// rlx::Tensor: dtype + concrete shape + bytes. Owning (shared storage) or a borrowed
// view of memory the caller keeps alive. Copies of a Tensor share storage.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

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
  Shape shape_info() const { return Shape::from(shape_, dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // Typed access; throws rlx::Error when T does not match the dtype.
  template <class T> T* data() { check_type(dtype_of<T>()); return static_cast<T*>(data_); }
  template <class T> const T* data() const { check_type(dtype_of<T>()); return static_cast<const T*>(data_); }

  // Conversions (always copies).
  Tensor cast(DType to) const;
  Tensor clone() const;
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  std::vector<int64_t> to_i64() const;
  // Same storage, new shape with the same element count (-1 allowed once).
  Tensor reshaped(std::vector<int64_t> shape) const;

  std::string summary() const;  // "f32[2,3] min=.. max=.. mean=.."

 private:
  void check_type(DType t) const;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<uint8_t[]> storage_;
  void* data_ = nullptr;
};

}  // namespace rlx
