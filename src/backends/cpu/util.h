#pragma once
// Small helpers shared by the CPU kernels.
#include <cstdint>
#include <vector>

#include "rlx/tensor.h"

namespace rlx::cpu {

// Strides (in elements) for reading `in_dims` broadcast to `out_dims` (numpy rules):
// dims of size 1 that are broadcast, and missing leading dims, get stride 0.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims,
                                       const std::vector<int64_t>& out_dims);

// Walks a row-major index space of `dims`, keeping one linear offset per operand
// (offset += strides[op][d] when dim d steps). Callers read offsets() at each step.
class StridedIter {
 public:
  StridedIter(const std::vector<int64_t>& dims, std::vector<std::vector<int64_t>> strides);
  // Offsets of every operand at linear index `i` (random access, O(rank)).
  void seek(int64_t i);
  void next();  // advance by one element
  const std::vector<int64_t>& offsets() const { return off_; }

 private:
  std::vector<int64_t> dims_, idx_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> off_;
};

// Splits `dims` around `axis`: outer = prod(dims[:axis]), mid = dims[axis], inner = prod(dims[axis+1:]).
struct AxisSplit {
  int64_t outer = 1, mid = 1, inner = 1;
};
AxisSplit split_at_axis(const std::vector<int64_t>& dims, int64_t axis);

// Reads element i of any-dtype tensor as double / writes double (slow path helpers).
double read_as_double(const Tensor& t, int64_t i);
void write_from_double(Tensor& t, int64_t i, double v);
// Copies `src` into `dst` converting dtype (same element count).
void convert_into(const Tensor& src, Tensor& dst);

}  // namespace rlx::cpu
