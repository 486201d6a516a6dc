#pragma once
// Dim (static or named symbolic), Shape (dims + dtype) and numpy broadcasting.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlx/dtype.h"

namespace rlx {

// A dimension: either a static size (>= 0) or a named symbol ("batch", "seq").
struct Dim {
  int64_t value = 0;   // meaningful when sym is empty
  std::string sym;     // non-empty: symbolic

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from integers on purpose
  Dim(int v) : value(v) {}      // NOLINT
  static Dim symbol(std::string name) {
    Dim d;
    d.sym = std::move(name);
    d.value = -1;
    return d;
  }
  bool is_static() const { return sym.empty(); }
  bool is_symbolic() const { return !sym.empty(); }
  bool operator==(const Dim& o) const {
    return is_static() ? (o.is_static() && value == o.value) : sym == o.sym;
  }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string str() const;
};

struct Shape {
  std::vector<Dim> dims;
  DType dtype = DType::F32;

  Shape() = default;
  Shape(std::vector<Dim> d, DType t = DType::F32) : dims(std::move(d)), dtype(t) {}
  static Shape of(std::initializer_list<int64_t> d, DType t = DType::F32);
  static Shape from(const std::vector<int64_t>& d, DType t = DType::F32);

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_static() const;
  // Element count / byte count; throw rlx::Error when a dim is symbolic or the count overflows
  // or exceeds the size policy (rlx/limits.h).
  int64_t numel() const;
  int64_t nbytes() const;
  // Checks the static part of the shape against the size policy (negative dims, int64
  // overflow, max elements / bytes); symbolic dims count as 1. `what` names the tensor.
  void check_size(const std::string& what) const;
  // Static dims as integers; throws rlx::Error when a dim is symbolic.
  std::vector<int64_t> concrete() const;
  const Dim& operator[](int64_t i) const { return dims.at(static_cast<size_t>(i)); }
  bool operator==(const Shape& o) const { return dtype == o.dtype && dims == o.dims; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // e.g. "f32[2,seq,768]"
};

// numpy broadcast of two dim lists; nullopt when incompatible.
std::optional<std::vector<Dim>> broadcast_dims(const std::vector<Dim>& a, const std::vector<Dim>& b);
std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);  // throws

// Normalizes a possibly negative axis against `rank`; throws rlx::Error naming `what` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& what);

// Row-major strides of a concrete shape (in elements).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& dims);
int64_t product(const std::vector<int64_t>& dims);

std::string dims_str(const std::vector<int64_t>& dims);  // "[2,3]"
std::string dims_str(const std::vector<Dim>& dims);      // "[batch,3]"

}  // namespace rlx
