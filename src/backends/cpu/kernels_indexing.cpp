// CPU kernels for the indexing family: Gather, ScatterAdd, ArgMax, ArgMin, TopK, Cumsum.
// Semantics (NaN ordering, index dtypes, error cases) are documented in src/ir/ops_indexing.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/util.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 16384;  // elements per parallel chunk
constexpr int64_t kBlock = 512;    // inner-dim block for the vectorized axis loops

int64_t grain_for(int64_t work_per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, work_per_item)); }

// Typed pointers through raw(): Tensor::data<uint8_t>() refuses bool tensors.
template <class T> const T* cptr(const Tensor& t) { return static_cast<const T*>(t.raw()); }
template <class T> T* mptr(Tensor& t) { return static_cast<T*>(t.raw()); }

template <class C> bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// Reads an integer index tensor as int64, wraps negative values and checks the range
// [-size, size) of the indexed axis.
std::vector<int64_t> load_indices(const Tensor& idx, int64_t size, int64_t axis) {
  std::vector<int64_t> out(static_cast<size_t>(idx.numel()));
  visit_dtype(idx.dtype(), [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F16 || D == DType::BF16 || D == DType::F64 || D == DType::Bool) {
      throw Error(std::string("indices must have an integer dtype, got ") + dtype_name(D));
    } else {
      using T = typename dtype_storage<D>::type;
      const T* p = cptr<T>(idx);
      for (size_t i = 0; i < out.size(); ++i) {
        const int64_t v = static_cast<int64_t>(p[i]);
        const int64_t w = v < 0 ? v + size : v;
        if (w < 0 || w >= size)
          throw Error(std::string("index ") + std::to_string(v) + " is out of range for axis " +
                      std::to_string(axis) + " of size " + std::to_string(size) +
                      (size > 0 ? " (valid range [" + std::to_string(-size) + ", " + std::to_string(size - 1) + "])"
                                : " (the axis is empty, so no index is valid)"));
        out[i] = w;
      }
    }
  });
  return out;
}

}  // namespace

// ---- Gather ------------------------------------------------------------------
void kernel(const ops::Gather& op, KernelContext& ctx) {
  const Tensor& data = ctx.in[0];
  Tensor& out = ctx.out[0];
  const int64_t axis = normalize_axis(op.axis, data.rank(), "gather axis");
  const AxisSplit s = split_at_axis(data.shape(), axis);
  const std::vector<int64_t> ix = load_indices(ctx.in[1], s.mid, axis);
  const int64_t m = static_cast<int64_t>(ix.size());
  const size_t row = static_cast<size_t>(s.inner) * dtype_size(data.dtype());
  const int64_t rows = s.outer * m;
  if (rows == 0 || row == 0) return;
  const auto* src = static_cast<const uint8_t*>(data.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  parallel_for(rows, grain_for(s.inner), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / m, j = r % m;
      std::memcpy(dst + static_cast<size_t>(r) * row, src + static_cast<size_t>(o * s.mid + ix[static_cast<size_t>(j)]) * row, row);
    }
  });
}

// ---- ScatterAdd ----------------------------------------------------------------
namespace {
template <class T> void add_into(T& dst, T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;  // wrap around in the dtype's width without UB
    dst = static_cast<T>(static_cast<U>(static_cast<U>(dst) + static_cast<U>(v)));
  } else {
    dst = store<T>(load(dst) + load(v));
  }
}
}  // namespace

void kernel(const ops::ScatterAdd& op, KernelContext& ctx) {
  const Tensor& data = ctx.in[0];
  const Tensor& idx = ctx.in[1];
  const Tensor& upd = ctx.in[2];
  Tensor& out = ctx.out[0];
  const int64_t r = data.rank();
  const int64_t axis = normalize_axis(op.axis, r, "scatter_add axis");
  // Shapes were checked at inference, but symbolic dims are only known now.
  check(idx.rank() == r && upd.shape() == idx.shape(),
        std::string("indices ") + dims_str(idx.shape()) + " and updates " + dims_str(upd.shape()) +
            " must have one shape of data's rank (data " + dims_str(data.shape()) + ")");
  for (int64_t d = 0; d < r; ++d)
    check(d == axis || idx.dim(d) <= data.dim(d),
          std::string("indices ") + dims_str(idx.shape()) + " dim " + std::to_string(d) +
              " exceeds data " + dims_str(data.shape()));
  if (out.nbytes() > 0) std::memcpy(out.raw(), data.raw(), out.nbytes());
  const std::vector<int64_t> ix = load_indices(idx, data.dim(axis), axis);
  if (ix.empty()) return;

  const std::vector<int64_t>& ish = idx.shape();
  const std::vector<int64_t> ds = contiguous_strides(data.shape());
  const AxisSplit si = split_at_axis(ish, axis);
  // Data offsets of the index positions before and after the axis.
  std::vector<int64_t> outer_off(static_cast<size_t>(si.outer)), inner_off(static_cast<size_t>(si.inner));
  for (int64_t o = 0; o < si.outer; ++o) {
    int64_t rem = o, off = 0;
    for (int64_t d = axis - 1; d >= 0; --d) {
      off += (rem % ish[static_cast<size_t>(d)]) * ds[static_cast<size_t>(d)];
      rem /= ish[static_cast<size_t>(d)];
    }
    outer_off[static_cast<size_t>(o)] = off;
  }
  for (int64_t j = 0; j < si.inner; ++j) {
    int64_t rem = j, off = 0;
    for (int64_t d = r - 1; d > axis; --d) {
      off += (rem % ish[static_cast<size_t>(d)]) * ds[static_cast<size_t>(d)];
      rem /= ish[static_cast<size_t>(d)];
    }
    inner_off[static_cast<size_t>(j)] = off;
  }
  const int64_t astride = ds[static_cast<size_t>(axis)];
  const int64_t nb = (si.inner + kBlock - 1) / kBlock;
  visit_dtype(data.dtype(), [&]<DType D>() {
    if constexpr (D == DType::Bool) {
      throw Error("scatter_add does not take bool data");
    } else {
      using T = typename dtype_storage<D>::type;
      T* po = mptr<T>(out);
      const T* pu = cptr<T>(upd);
      // Items (outer position, inner block) write disjoint elements: the non-axis
      // coordinates of the target equal those of the index position.
      parallel_for(si.outer * nb, grain_for(si.mid * std::min(si.inner, kBlock)), [&](int64_t b, int64_t e) {
        for (int64_t it = b; it < e; ++it) {
          const int64_t o = it / nb, j0 = (it % nb) * kBlock, j1 = std::min(si.inner, j0 + kBlock);
          const int64_t base = outer_off[static_cast<size_t>(o)];
          for (int64_t m = 0; m < si.mid; ++m) {
            const int64_t lin = (o * si.mid + m) * si.inner;
            for (int64_t j = j0; j < j1; ++j)
              add_into(po[base + ix[static_cast<size_t>(lin + j)] * astride + inner_off[static_cast<size_t>(j)]],
                       pu[lin + j]);
          }
        }
      });
    }
  });
}

// ---- ArgMax / ArgMin -------------------------------------------------------------
namespace {
// True when v should replace the current best. NaN ranks above every number for both
// argmax and argmin (numpy): the first NaN wins, or the last one with select_last.
template <bool IsMax, class C> inline bool arg_better(C v, C best, bool last) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(best)) return last && std::isnan(v);
    if (std::isnan(v)) return true;
  }
  if constexpr (IsMax) return last ? v >= best : v > best;
  else return last ? v <= best : v < best;
}

template <bool IsMax, class Op> void arg_kernel(const Op& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const int64_t axis = normalize_axis(op.axis, x.rank(), std::string(Op::kName) + " axis");
  const AxisSplit s = split_at_axis(x.shape(), axis);
  if (s.mid == 0)
    throw Error(std::string(Op::kName) + " over axis " + std::to_string(axis) + " of input " +
                dims_str(x.shape()) + " which has size 0");
  int64_t* po = mptr<int64_t>(ctx.out[0]);
  const bool last = op.select_last;
  visit_dtype(x.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    const T* px = cptr<T>(x);
    if (s.inner == 1) {
      parallel_for(s.outer, grain_for(s.mid), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          const T* row = px + o * s.mid;
          auto best = load(row[0]);
          int64_t bi = 0;
          for (int64_t m = 1; m < s.mid; ++m) {
            const auto v = load(row[m]);
            if (arg_better<IsMax>(v, best, last)) { best = v; bi = m; }
          }
          po[o] = bi;
        }
      });
      return;
    }
    const int64_t nb = (s.inner + kBlock - 1) / kBlock;
    parallel_for(s.outer * nb, grain_for(s.mid * std::min(s.inner, kBlock)), [&](int64_t b, int64_t e) {
      std::vector<compute_t<T>> bv(static_cast<size_t>(kBlock));
      std::vector<int64_t> bi(static_cast<size_t>(kBlock));
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / nb, j0 = (it % nb) * kBlock, n = std::min(s.inner, j0 + kBlock) - j0;
        const T* base = px + o * s.mid * s.inner + j0;
        for (int64_t j = 0; j < n; ++j) { bv[static_cast<size_t>(j)] = load(base[j]); bi[static_cast<size_t>(j)] = 0; }
        for (int64_t m = 1; m < s.mid; ++m) {
          const T* row = base + m * s.inner;
          for (int64_t j = 0; j < n; ++j) {
            const auto v = load(row[j]);
            if (arg_better<IsMax>(v, bv[static_cast<size_t>(j)], last)) {
              bv[static_cast<size_t>(j)] = v;
              bi[static_cast<size_t>(j)] = m;
            }
          }
        }
        std::copy(bi.begin(), bi.begin() + n, po + o * s.inner + j0);
      }
    });
  });
}
}  // namespace

void kernel(const ops::ArgMax& op, KernelContext& ctx) { arg_kernel<true>(op, ctx); }
void kernel(const ops::ArgMin& op, KernelContext& ctx) { arg_kernel<false>(op, ctx); }

// ---- TopK ---------------------------------------------------------------------
void kernel(const ops::TopK& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const int64_t axis = normalize_axis(op.axis, x.rank(), "topk axis");
  const AxisSplit s = split_at_axis(x.shape(), axis);
  const int64_t k = op.k;
  if (k < 1 || k > s.mid)
    throw Error(std::string("k = ") + std::to_string(k) + " is not in [1, " + std::to_string(s.mid) +
                "] for axis " + std::to_string(axis) + " of input " + dims_str(x.shape()));
  const bool largest = op.largest;
  int64_t* pi = mptr<int64_t>(ctx.out[1]);
  visit_dtype(x.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    using C = compute_t<T>;
    const T* px = cptr<T>(x);
    T* pv = mptr<T>(ctx.out[0]);
    // Strict order "a ranks before b" on values; NaN is above every number.
    auto before = [largest](C a, C b) {
      if constexpr (std::is_floating_point_v<C>) {
        const bool an = std::isnan(a), bn = std::isnan(b);
        if (an || bn) return largest ? (an && !bn) : (!an && bn);
      }
      return largest ? a > b : a < b;
    };
    parallel_for(s.outer * s.inner, grain_for(s.mid), [&](int64_t b, int64_t e) {
      std::vector<C> vals(static_cast<size_t>(s.mid));
      std::vector<int64_t> order(static_cast<size_t>(s.mid));
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / s.inner, i = it % s.inner;
        const T* src = px + o * s.mid * s.inner + i;
        for (int64_t m = 0; m < s.mid; ++m) vals[static_cast<size_t>(m)] = load(src[m * s.inner]);
        std::iota(order.begin(), order.end(), int64_t{0});
        // Ties break on the lower index, which makes the order total (and the result stable):
        // the k first are selected in linear time, then ranked.
        const auto ranks_before = [&](int64_t p, int64_t q) {
          const C a = vals[static_cast<size_t>(p)], c = vals[static_cast<size_t>(q)];
          if (before(a, c)) return true;
          if (before(c, a)) return false;
          return p < q;
        };
        if (k < s.mid) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), ranks_before);
        std::sort(order.begin(), order.begin() + k, ranks_before);
        for (int64_t r = 0; r < k; ++r) {
          const int64_t dst = (o * k + r) * s.inner + i;
          const int64_t src_m = order[static_cast<size_t>(r)];
          pv[dst] = src[src_m * s.inner];
          pi[dst] = src_m;
        }
      }
    });
  });
}

// ---- Cumsum -------------------------------------------------------------------
namespace {
// Accumulator: f32/f64 in double, f16/bf16 in f32, integers in uint64 (wraps in the dtype's
// width when stored back, i.e. two's complement accumulation in the dtype).
template <class T> struct CumAcc { using type = uint64_t; };
template <> struct CumAcc<float> { using type = double; };
template <> struct CumAcc<double> { using type = double; };
template <> struct CumAcc<f16> { using type = float; };
template <> struct CumAcc<bf16> { using type = float; };
}  // namespace

void kernel(const ops::Cumsum& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const int64_t axis = normalize_axis(op.axis, x.rank(), "cumsum axis");
  const AxisSplit s = split_at_axis(x.shape(), axis);
  const bool excl = op.exclusive, rev = op.reverse;
  visit_dtype(x.dtype(), [&]<DType D>() {
    if constexpr (D == DType::Bool) {
      throw Error("cumsum does not take bool input");
    } else {
      using T = typename dtype_storage<D>::type;
      using A = typename CumAcc<T>::type;
      const T* px = cptr<T>(x);
      T* po = mptr<T>(ctx.out[0]);
      const int64_t nb = (s.inner + kBlock - 1) / kBlock;
      parallel_for(s.outer * nb, grain_for(s.mid * std::min(s.inner, kBlock)), [&](int64_t b, int64_t e) {
        std::vector<A> acc(static_cast<size_t>(kBlock));
        for (int64_t it = b; it < e; ++it) {
          const int64_t o = it / nb, j0 = (it % nb) * kBlock, n = std::min(s.inner, j0 + kBlock) - j0;
          std::fill(acc.begin(), acc.begin() + n, A{0});
          for (int64_t t = 0; t < s.mid; ++t) {
            const int64_t m = rev ? s.mid - 1 - t : t;
            const int64_t off = (o * s.mid + m) * s.inner + j0;
            for (int64_t j = 0; j < n; ++j) {
              A& a = acc[static_cast<size_t>(j)];
              if (excl) po[off + j] = store<T>(a);
              if constexpr (std::is_integral_v<T>) a += static_cast<A>(px[off + j]);
              else a += static_cast<A>(load(px[off + j]));
              if (!excl) po[off + j] = store<T>(a);
            }
          }
        }
      });
    }
  });
}

}  // namespace rlx::cpu
