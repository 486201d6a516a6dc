#include "plan/storage.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "rlx/limits.h"

namespace rlx::plan {
namespace {

struct IntRange {
  int64_t lo, hi;
};

// Range of an integer or bool dtype (u32 fits in int64).
IntRange int_range(DType t) {
  switch (t) {
    case DType::I8: return {INT8_MIN, INT8_MAX};
    case DType::I16: return {INT16_MIN, INT16_MAX};
    case DType::I32: return {INT32_MIN, INT32_MAX};
    case DType::I64: return {INT64_MIN, INT64_MAX};
    case DType::U8: return {0, UINT8_MAX};
    case DType::U16: return {0, UINT16_MAX};
    case DType::U32: return {0, UINT32_MAX};
    case DType::Bool: return {0, 1};
    default: break;
  }
  throw Error(std::string("storage: ") + dtype_name(t) + " has no storage mapping (integers up to 32 bits, i64 and bool)");
}

// u64 is left out: its values do not all fit int64, and no device maps it to another dtype.
bool is_intlike(DType t) { return (is_int(t) && t != DType::U64) || t == DType::Bool; }
constexpr bool float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

// Significand and exponent bits of a float dtype, for the narrowing test.
int significand_bits(DType t) {
  switch (t) {
    case DType::F64: return 53;
    case DType::F32: return 24;
    case DType::F16: return 11;
    case DType::BF16: return 8;
    default: return 0;
  }
}
int exponent_bits(DType t) {
  switch (t) {
    case DType::F64: return 11;
    case DType::F32: return 8;
    case DType::F16: return 5;
    case DType::BF16: return 8;
    default: return 0;
  }
}

std::string index_str(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size());
  int64_t r = flat;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] > 0) idx[d] = r % dims[d], r /= dims[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// `n` elements of `from` at `src` -> `to` at `dst`. `upload`: host -> device (for the message).
void convert(const void* src, DType from, void* dst, DType to, const std::vector<int64_t>& dims, bool upload,
             const std::string& what) {
  const int64_t n = product(dims);
  if (from == to) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(from));
    return;
  }
  auto fail = [&](int64_t i, const std::string& value, const std::string& range) {
    std::ostringstream m;
    m << what << ": element " << i << " (at " << index_str(i, dims) << ") is " << value << ", which ";
    if (upload)
      m << "does not fit the " << dtype_name(to) << " the device holds " << dtype_name(from) << " tensors as" << range
        << "; keep the values in that range (e.g. indices and token ids below 2^31) or run on a device with "
        << dtype_name(from) << " storage (CPU, CUDA)";
    else
      m << "was read back from the device's " << dtype_name(from) << " storage and does not fit " << dtype_name(to)
        << range << " (the device computed a value the graph's dtype cannot hold)";
    throw Error(m.str());
  };
  if (is_intlike(from) && is_intlike(to)) {
    const IntRange r = int_range(to);
    // The float checks are split per level: clang 16 instantiates a nested generic lambda's
    // discarded branch when its condition names the outer lambda's parameter.
    visit_dtype(from, [&]<DType F>() {
      using TF = typename dtype_storage<F>::type;
      if constexpr (!float_dtype(F)) visit_dtype(to, [&]<DType T>() {
        using TT = typename dtype_storage<T>::type;
        if constexpr (!float_dtype(T)) {
          const auto* s = static_cast<const TF*>(src);
          auto* d = static_cast<TT*>(dst);
          for (int64_t i = 0; i < n; ++i) {
            const auto v = static_cast<int64_t>(s[i]);  // every integer dtype here (not u64) fits
            if constexpr (T == DType::Bool) {
              d[i] = static_cast<TT>(v != 0);
            } else {
              if (v < r.lo || v > r.hi)
                fail(i, std::to_string(v), " (range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "])");
              d[i] = static_cast<TT>(v);
            }
          }
        }
      });
    });
    return;
  }
  if (is_float(from) && is_float(to)) {
    const double max_to = to == DType::F64   ? std::numeric_limits<double>::max()
                          : to == DType::F32 ? std::numeric_limits<float>::max()
                          : to == DType::F16 ? 65504.0
                                             : static_cast<double>(bf16_bits_to_f32(0x7f7f));
    visit_dtype(from, [&]<DType F>() {
      using TF = typename dtype_storage<F>::type;
      visit_dtype(to, [&]<DType T>() {
        using TT = typename dtype_storage<T>::type;
        if constexpr (float_dtype(F) && float_dtype(T)) {
          const auto* s = static_cast<const TF*>(src);
          auto* d = static_cast<TT*>(dst);
          for (int64_t i = 0; i < n; ++i) {
            const double v = to_double(s[i]);
            if (std::isfinite(v) && std::fabs(v) > max_to) {
              std::ostringstream vs, ms;
              vs.precision(17), ms.precision(9);
              vs << v, ms << max_to;
              fail(i, vs.str(), " (largest finite magnitude " + ms.str() + ")");
            }
            d[i] = from_double<TT>(v);
          }
        }
      });
    });
    return;
  }
  throw Error(what + ": no storage conversion from " + dtype_name(from) + " to " + dtype_name(to) +
              " (a storage dtype keeps the kind of its logical dtype: integers as integers, floats as floats)");
}

}  // namespace

bool storage_narrows(DType logical, DType storage) {
  if (logical == storage) return false;
  if (is_intlike(logical) && is_intlike(storage)) {
    if (storage == DType::Bool) return true;  // only 0/1 survive
    const IntRange a = int_range(logical), b = int_range(storage);
    return a.lo < b.lo || a.hi > b.hi;
  }
  if (is_float(logical) && is_float(storage))
    return significand_bits(logical) > significand_bits(storage) || exponent_bits(logical) > exponent_bits(storage);
  return true;
}

int64_t storage_bytes(int64_t n, DType storage, const std::string& what) {
  return checked_mul(n, static_cast<int64_t>(dtype_size(storage)), what + " storage bytes");
}

void to_storage(const Tensor& host, DType storage, std::span<uint8_t> dst, const std::string& what) {
  const int64_t need = storage_bytes(host.numel(), storage, what);
  if (static_cast<int64_t>(dst.size()) != need)
    throw Error(what + ": the destination holds " + std::to_string(dst.size()) + " bytes, the " +
                dtype_name(storage) + " storage of " + std::to_string(host.numel()) + " elements needs " +
                std::to_string(need));
  convert(host.raw(), host.dtype(), dst.data(), storage, host.shape(), true, what);
}

std::vector<uint8_t> to_storage(const Tensor& host, DType storage, const std::string& what) {
  std::vector<uint8_t> out(static_cast<size_t>(storage_bytes(host.numel(), storage, what)));
  to_storage(host, storage, out, what);
  return out;
}

Tensor from_storage(std::span<const uint8_t> src, DType storage, DType logical, const std::vector<int64_t>& dims,
                    const std::string& what) {
  const int64_t n = checked_numel(dims, what);
  const int64_t need = storage_bytes(n, storage, what);
  if (static_cast<int64_t>(src.size()) != need)
    throw Error(what + ": " + std::to_string(src.size()) + " bytes of " + dtype_name(storage) + " storage for " +
                std::to_string(n) + " elements (" + std::to_string(need) + " expected)");
  Tensor t = Tensor::empty(logical, dims);
  convert(src.data(), storage, t.raw(), logical, dims, false, what);
  return t;
}

}  // namespace rlx::plan
