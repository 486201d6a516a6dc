#include "backends/cpu/util.h"

namespace rlx::cpu {

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims) {
  if (in_dims.size() > out_dims.size())
    throw Error("broadcast_strides: input " + dims_str(in_dims) + " has more dims than output " + dims_str(out_dims));
  std::vector<int64_t> strides(out_dims.size(), 0);
  const auto in_strides = contiguous_strides(in_dims);
  const size_t off = out_dims.size() - in_dims.size();
  for (size_t i = 0; i < in_dims.size(); ++i) {
    if (in_dims[i] == out_dims[i + off]) strides[i + off] = in_dims[i] == 1 ? 0 : in_strides[i];
    else if (in_dims[i] == 1) strides[i + off] = 0;
    else throw Error("broadcast_strides: " + dims_str(in_dims) + " does not broadcast to " + dims_str(out_dims));
  }
  return strides;
}

StridedIter::StridedIter(const std::vector<int64_t>& dims, std::vector<std::vector<int64_t>> strides)
    : dims_(dims), idx_(dims.size(), 0), strides_(std::move(strides)), off_(strides_.size(), 0) {}

void StridedIter::seek(int64_t i) {
  for (auto& o : off_) o = 0;
  for (int64_t d = static_cast<int64_t>(dims_.size()) - 1; d >= 0; --d) {
    const int64_t n = dims_[d];
    const int64_t v = n ? i % n : 0;
    i = n ? i / n : 0;
    idx_[d] = v;
    for (size_t k = 0; k < strides_.size(); ++k) off_[k] += v * strides_[k][d];
  }
}

void StridedIter::next() {
  for (int64_t d = static_cast<int64_t>(dims_.size()) - 1; d >= 0; --d) {
    if (++idx_[d] < dims_[d]) {
      for (size_t k = 0; k < strides_.size(); ++k) off_[k] += strides_[k][d];
      return;
    }
    for (size_t k = 0; k < strides_.size(); ++k) off_[k] -= (dims_[d] - 1) * strides_[k][d];
    idx_[d] = 0;
  }
}

AxisSplit split_at_axis(const std::vector<int64_t>& dims, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    if (i < axis) s.outer *= dims[i];
    else if (i == axis) s.mid = dims[i];
    else s.inner *= dims[i];
  }
  return s;
}

double read_as_double(const Tensor& t, int64_t i) {
  return visit_dtype(t.dtype(), [&]<DType D>() -> double {
    using T = typename dtype_storage<D>::type;
    return to_double(static_cast<const T*>(t.raw())[i]);
  });
}

void write_from_double(Tensor& t, int64_t i, double v) {
  visit_dtype(t.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    if constexpr (D == DType::Bool) static_cast<T*>(t.raw())[i] = v != 0 ? 1 : 0;
    else static_cast<T*>(t.raw())[i] = from_double<T>(v);
  });
}

void convert_into(const Tensor& src, Tensor& dst) {
  if (src.numel() != dst.numel())
    throw Error("convert_into: " + src.shape_info().str() + " into " + dst.shape_info().str());
  Tensor c = src.cast(dst.dtype());
  if (c.nbytes()) std::memcpy(dst.raw(), c.raw(), c.nbytes());
}

}  // namespace rlx::cpu
