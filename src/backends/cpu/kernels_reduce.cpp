// CPU kernels for the reduction family: Reduce, Softmax, LogSoftmax.
// Semantics (accumulation types, integer Mean, NaN, empty reductions) are documented in
// src/ir/ops_reduce.cpp.
//
// Reduce takes the step's ReduceGeom (input dims coalesced by the plan: size-1 dims dropped,
// neighbours with the same reduced/kept role merged, so any axis set is alternating
// kept/reduced groups), adds their strides, then runs one of two loops, parallel over outputs:
//   - last group reduced: each output sums a set of contiguous runs (f32 sums, means, maxima
//     and minima of one run each on vector lanes, sums in double; runs of 128 K values and more
//     in pieces on the pool's threads);
//   - last group kept: each output row accumulates whole contiguous rows (vectorizable).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/util.h"
#include "backends/cpu/vec_rows.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrain = 16384;
constexpr int64_t kBlock = 512;

int64_t grain_for(int64_t work_per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, work_per_item)); }

template <class T> const T* cptr(const Tensor& t) { return static_cast<const T*>(t.raw()); }
template <class T> T* mptr(Tensor& t) { return static_cast<T*>(t.raw()); }

// Row-major walk over (sizes, strides) keeping a linear offset.
struct Odometer {
  const std::vector<int64_t>& size;
  const std::vector<int64_t>& stride;
  std::vector<int64_t> idx;
  int64_t off = 0;
  Odometer(const std::vector<int64_t>& sz, const std::vector<int64_t>& st) : size(sz), stride(st), idx(sz.size(), 0) {}
  void seek(int64_t linear) {
    off = 0;
    for (size_t d = size.size(); d-- > 0;) {
      idx[d] = linear % size[d];
      linear /= size[d];
      off += idx[d] * stride[d];
    }
  }
  void next() {
    for (size_t d = size.size(); d-- > 0;) {
      off += stride[d];
      if (++idx[d] < size[d]) return;
      off -= stride[d] * size[d];
      idx[d] = 0;
    }
  }
};

// ---- accumulation per (storage type, kind) ----
template <class T, ReduceKind K> struct Red {
  static constexpr bool kMinMax = K == ReduceKind::Max || K == ReduceKind::Min;
  static constexpr bool kFloat = !std::is_integral_v<T>;  // f16/bf16 are classes
  using A = std::conditional_t<kMinMax, compute_t<T>, std::conditional_t<kFloat, double, uint64_t>>;

  static A init() {
    if constexpr (K == ReduceKind::Max) {
      if constexpr (kFloat) return -std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::lowest();
    } else if constexpr (K == ReduceKind::Min) {
      if constexpr (kFloat) return std::numeric_limits<A>::infinity();
      else return std::numeric_limits<A>::max();
    } else if constexpr (K == ReduceKind::Prod) {
      return A{1};
    } else {
      return A{0};
    }
  }
  static void step(A& a, T raw) {
    if constexpr (kMinMax) {
      const A v = load(raw);
      if constexpr (kFloat) {
        if (K == ReduceKind::Max ? (v > a || std::isnan(v)) : (v < a || std::isnan(v))) a = v;
      } else {
        if (K == ReduceKind::Max ? v > a : v < a) a = v;
      }
    } else {
      const A v = static_cast<A>(load(raw));  // ints: modular conversion to uint64
      if constexpr (K == ReduceKind::Prod) a *= v;
      else a += v;
    }
  }
  static T finish(A a, int64_t count) {
    if constexpr (K == ReduceKind::Mean) {
      if constexpr (kFloat) {
        return store<T>(count == 0 ? std::numeric_limits<double>::quiet_NaN() : a / static_cast<double>(count));
      } else if constexpr (std::is_signed_v<T>) {
        return static_cast<T>(static_cast<int64_t>(a) / count);
      } else {
        return static_cast<T>(a / static_cast<uint64_t>(count));
      }
    } else {
      return store<T>(a);  // ints: modular narrowing
    }
  }
};

struct ReducePlan {
  std::vector<int64_t> kept_size, kept_stride, red_size, red_stride;
  bool last_reduced = false;  // the innermost group is reduced (contiguous runs)
  int64_t count = 1;          // elements reduced into each output
};

ReducePlan plan_reduce(const std::vector<int64_t>& dims, const std::vector<bool>& reduced) {
  ReducePlan p;
  const std::vector<int64_t> st = contiguous_strides(dims);
  int role = -1;  // role of the last group added: 0 kept, 1 reduced
  for (size_t d = 0; d < dims.size(); ++d) {
    if (reduced[d]) p.count *= dims[d];
    if (dims[d] == 1) continue;
    const int r = reduced[d] ? 1 : 0;
    auto& sz = r ? p.red_size : p.kept_size;
    auto& sd = r ? p.red_stride : p.kept_stride;
    if (r == role) {  // contiguous neighbour with the same role: merge
      sz.back() *= dims[d];
      sd.back() = st[d];
    } else {
      sz.push_back(dims[d]);
      sd.push_back(st[d]);
    }
    role = r;
  }
  p.last_reduced = role == 1;
  return p;
}

template <class T, ReduceKind K> void reduce_impl(const Tensor& x, Tensor& out, const ReducePlan& p) {
  using R = Red<T, K>;
  using A = typename R::A;
  const T* px = cptr<T>(x);
  T* po = mptr<T>(out);
  const int64_t nout = out.numel();
  if (nout == 0) return;
  if (x.numel() == 0) {  // every output reduces zero elements
    std::fill(po, po + nout, R::finish(R::init(), 0));
    return;
  }
  if (p.last_reduced) {
    // Innermost group: contiguous run of length L; the other reduced groups are walked.
    const int64_t L = p.red_size.back();
    const std::vector<int64_t> rs(p.red_size.begin(), p.red_size.end() - 1);
    const std::vector<int64_t> rt(p.red_stride.begin(), p.red_stride.end() - 1);
    const int64_t runs = p.count / L;
    if constexpr (std::is_same_v<T, float> && K != ReduceKind::Prod) {
      if (runs == 1) {  // one contiguous run per output (a global pool, a tensor's range): on vector lanes
        auto part = [&](const float* run, int64_t len) -> A {
          if constexpr (K == ReduceKind::Sum || K == ReduceKind::Mean) return sum_f32(run, len);
          else return extreme_f32(run, len, K == ReduceKind::Max);
        };
        // Runs of kPiece values or more are summed in pieces of kPiece on the pool's threads and
        // the pieces combined in order (the split depends on the length alone, not the threads).
        constexpr int64_t kPiece = int64_t{1} << 16;
        if (L >= 2 * kPiece) {
          const int64_t pieces = (L + kPiece - 1) / kPiece;
          std::vector<A> parts(static_cast<size_t>(pieces));
          Odometer ko(p.kept_size, p.kept_stride);
          for (int64_t o = 0; o < nout; ++o, ko.next()) {
            const float* run = px + ko.off;
            parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) parts[static_cast<size_t>(i)] = part(run + i * kPiece, std::min(kPiece, L - i * kPiece));
            });
            A a = parts[0];
            for (int64_t i = 1; i < pieces; ++i) {
              if constexpr (K == ReduceKind::Sum || K == ReduceKind::Mean) a += parts[static_cast<size_t>(i)];
              else R::step(a, parts[static_cast<size_t>(i)]);
            }
            po[o] = R::finish(a, p.count);
          }
          return;
        }
        parallel_for(nout, grain_for(p.count), [&](int64_t b, int64_t e) {
          Odometer ko(p.kept_size, p.kept_stride);
          ko.seek(b);
          for (int64_t o = b; o < e; ++o, ko.next()) po[o] = R::finish(part(px + ko.off, L), p.count);
        });
        return;
      }
    }
    parallel_for(nout, grain_for(p.count), [&](int64_t b, int64_t e) {
      Odometer ko(p.kept_size, p.kept_stride);
      ko.seek(b);
      Odometer ro(rs, rt);
      for (int64_t o = b; o < e; ++o, ko.next()) {
        A a = R::init();
        ro.seek(0);
        for (int64_t r = 0; r < runs; ++r, ro.next()) {
          const T* run = px + ko.off + ro.off;
          for (int64_t l = 0; l < L; ++l) R::step(a, run[l]);
        }
        po[o] = R::finish(a, p.count);
      }
    });
    return;
  }
  // Innermost group kept: rows of N contiguous outputs accumulate whole input rows.
  const int64_t N = p.kept_size.empty() ? 1 : p.kept_size.back();
  const std::vector<int64_t> ks(p.kept_size.begin(), p.kept_size.empty() ? p.kept_size.end() : p.kept_size.end() - 1);
  const std::vector<int64_t> kt(p.kept_stride.begin(), p.kept_stride.empty() ? p.kept_stride.end() : p.kept_stride.end() - 1);
  const int64_t rows = nout / N;
  const int64_t nb = (N + kBlock - 1) / kBlock;
  parallel_for(rows * nb, grain_for(p.count * std::min(N, kBlock)), [&](int64_t b, int64_t e) {
    std::vector<A> acc(static_cast<size_t>(std::min(N, kBlock)));
    Odometer ko(ks, kt);
    Odometer ro(p.red_size, p.red_stride);
    for (int64_t it = b; it < e; ++it) {
      const int64_t row = it / nb, j0 = (it % nb) * kBlock, n = std::min(N, j0 + kBlock) - j0;
      ko.seek(row);
      std::fill(acc.begin(), acc.begin() + n, R::init());
      ro.seek(0);
      for (int64_t r = 0; r < p.count; ++r, ro.next()) {
        const T* src = px + ko.off + ro.off + j0;
        for (int64_t j = 0; j < n; ++j) R::step(acc[static_cast<size_t>(j)], src[j]);
      }
      T* dst = po + row * N + j0;
      for (int64_t j = 0; j < n; ++j) dst[j] = R::finish(acc[static_cast<size_t>(j)], p.count);
    }
  });
}

}  // namespace

void kernel(const ops::Reduce& op, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  Tensor& out = ctx.out[0];
  // The step's coalesced kept/reduced groups (size-1 dims already dropped).
  const auto& g = std::get<plan::ReduceGeom>(ctx.step.geom);
  const ReducePlan p = plan_reduce(g.dims, std::vector<bool>(g.reduced.begin(), g.reduced.end()));
  const bool minmax = op.kind == ReduceKind::Max || op.kind == ReduceKind::Min;
  if (p.count == 0 && out.numel() > 0 && (minmax || (op.kind == ReduceKind::Mean && !is_float(x.dtype()))))
    throw Error(std::string(enum_name(op.kind)) + " of input " + dims_str(x.shape()) +
                " reduces zero elements (an empty reduced axis); only sum, prod and float mean allow that");
  if (x.dtype() == DType::Bool && !minmax)
    throw Error(std::string(enum_name(op.kind)) + " of bool input is not supported");
  visit_dtype(x.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    switch (op.kind) {
      case ReduceKind::Sum: return reduce_impl<T, ReduceKind::Sum>(x, out, p);
      case ReduceKind::Mean: return reduce_impl<T, ReduceKind::Mean>(x, out, p);
      case ReduceKind::Max: return reduce_impl<T, ReduceKind::Max>(x, out, p);
      case ReduceKind::Min: return reduce_impl<T, ReduceKind::Min>(x, out, p);
      case ReduceKind::Prod: return reduce_impl<T, ReduceKind::Prod>(x, out, p);
    }
    throw Error(std::string("unknown reduce kind ") + std::to_string(static_cast<int>(op.kind)));
  });
}

// ---- Softmax / LogSoftmax ------------------------------------------------------
namespace {

template <class T, bool Log> void softmax_impl(const Tensor& x, Tensor& out, const AxisSplit& s) {
  using W = compute_t<T>;  // exp evaluated in f32 (f64 for f64 input); sums in double
  const T* px = cptr<T>(x);
  T* po = mptr<T>(out);
  auto max_step = [](W& m, W v) {
    if (v > m || std::isnan(v)) m = v;
  };
  if (s.inner == 1) {
    if constexpr (std::is_same_v<T, float>) {  // f32 rows on vector lanes (vec_rows.h)
      parallel_for(s.outer, grain_for(s.mid * 4), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) softmax_row_f32(px + o * s.mid, po + o * s.mid, s.mid, Log);
      });
      return;
    } else if constexpr (std::is_same_v<T, f16>) {  // widened to f32 rows: the same roundings
      parallel_for(s.outer, grain_for(s.mid * 4), [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(s.mid));
        for (int64_t o = b; o < e; ++o) {
          f16_to_f32(px + o * s.mid, row.data(), s.mid);
          softmax_row_f32(row.data(), row.data(), s.mid, Log);
          f32_to_f16(row.data(), po + o * s.mid, s.mid);
        }
      });
      return;
    }
    parallel_for(s.outer, grain_for(s.mid * 4), [&](int64_t b, int64_t e) {
      std::vector<W> ex(Log ? 0 : static_cast<size_t>(s.mid));
      for (int64_t o = b; o < e; ++o) {
        const T* row = px + o * s.mid;
        T* dst = po + o * s.mid;
        W m = -std::numeric_limits<W>::infinity();
        for (int64_t i = 0; i < s.mid; ++i) max_step(m, load(row[i]));
        double sum = 0;
        for (int64_t i = 0; i < s.mid; ++i) {
          const W v = std::exp(load(row[i]) - m);
          if constexpr (!Log) ex[static_cast<size_t>(i)] = v;
          sum += v;
        }
        if constexpr (Log) {
          const double ls = std::log(sum);
          for (int64_t i = 0; i < s.mid; ++i) dst[i] = store<T>(static_cast<double>(load(row[i]) - m) - ls);
        } else {
          const double inv = 1.0 / sum;
          for (int64_t i = 0; i < s.mid; ++i) dst[i] = store<T>(ex[static_cast<size_t>(i)] * inv);
        }
      }
    });
    return;
  }
  // Non-last axis: walk rows of `inner` contiguous elements, one running max/sum per column.
  const int64_t nb = (s.inner + kBlock - 1) / kBlock;
  if constexpr (std::is_same_v<T, float>) {  // columns on vector lanes (vec_rows.h)
    parallel_for(s.outer * nb, grain_for(s.mid * std::min(s.inner, kBlock) * 4), [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        const int64_t o = it / nb, j0 = (it % nb) * kBlock, n = std::min(s.inner, j0 + kBlock) - j0;
        softmax_cols_f32(px + o * s.mid * s.inner + j0, po + o * s.mid * s.inner + j0, s.mid, s.inner, n, Log);
      }
    });
    return;
  }
  parallel_for(s.outer * nb, grain_for(s.mid * std::min(s.inner, kBlock) * 4), [&](int64_t b, int64_t e) {
    std::vector<W> mx(static_cast<size_t>(kBlock));
    std::vector<double> sm(static_cast<size_t>(kBlock));
    for (int64_t it = b; it < e; ++it) {
      const int64_t o = it / nb, j0 = (it % nb) * kBlock, n = std::min(s.inner, j0 + kBlock) - j0;
      const T* base = px + o * s.mid * s.inner + j0;
      T* dbase = po + o * s.mid * s.inner + j0;
      std::fill(mx.begin(), mx.begin() + n, -std::numeric_limits<W>::infinity());
      std::fill(sm.begin(), sm.begin() + n, 0.0);
      for (int64_t m = 0; m < s.mid; ++m)
        for (int64_t j = 0; j < n; ++j) max_step(mx[static_cast<size_t>(j)], load(base[m * s.inner + j]));
      for (int64_t m = 0; m < s.mid; ++m)
        for (int64_t j = 0; j < n; ++j)
          sm[static_cast<size_t>(j)] += std::exp(load(base[m * s.inner + j]) - mx[static_cast<size_t>(j)]);
      if constexpr (Log) {
        for (int64_t j = 0; j < n; ++j) sm[static_cast<size_t>(j)] = std::log(sm[static_cast<size_t>(j)]);
      } else {
        for (int64_t j = 0; j < n; ++j) sm[static_cast<size_t>(j)] = 1.0 / sm[static_cast<size_t>(j)];
      }
      for (int64_t m = 0; m < s.mid; ++m) {
        for (int64_t j = 0; j < n; ++j) {
          const W d = load(base[m * s.inner + j]) - mx[static_cast<size_t>(j)];
          if constexpr (Log) dbase[m * s.inner + j] = store<T>(static_cast<double>(d) - sm[static_cast<size_t>(j)]);
          else dbase[m * s.inner + j] = store<T>(std::exp(d) * sm[static_cast<size_t>(j)]);
        }
      }
    }
  });
}

template <bool Log, class Op> void softmax_kernel(const Op&, KernelContext& ctx) {
  const Tensor& x = ctx.in[0];
  const auto& g = std::get<plan::AxisGeom>(ctx.step.geom);
  const AxisSplit s{g.outer, g.axis, g.inner};
  if (x.numel() == 0) return;
  visit_dtype(x.dtype(), [&]<DType D>() {
    if constexpr (D == DType::F32 || D == DType::F16 || D == DType::BF16 || D == DType::F64) {
      softmax_impl<typename dtype_storage<D>::type, Log>(x, ctx.out[0], s);
    } else {
      throw Error(std::string(Op::kName) + " needs a float input, got " + dtype_name(D));
    }
  });
}

}  // namespace

void kernel(const ops::Softmax& op, KernelContext& ctx) { softmax_kernel<false>(op, ctx); }
void kernel(const ops::LogSoftmax& op, KernelContext& ctx) { softmax_kernel<true>(op, ctx); }

}  // namespace rlx::cpu
