// CPU kernels for RngUniform, RngNormal and Sample on the Philox-4x32-10 stream (philox.h).
//
// RngUniform / RngNormal: element i uses block i / 4 of the stream (seed, offset), word i % 4
// (RngNormal: words 2*((i%4)/2) and 2*((i%4)/2)+1 as a Box-Muller pair, cos for even i,
// sin for odd i). Outputs are therefore identical for any thread count or tensor split.
//
// RngUniform computes low + (high - low) * u in double with u = bits * 2^-32 in [0, 1), then
// rounds to the output dtype. Rounding can reach `high` (e.g. f16 with high = 1), so every
// stored value is clamped into [lo_T, hi_T], where lo_T is the smallest value of the output
// dtype >= low and hi_T the largest value < high: outputs are always in [low, high) exactly.
// If the dtype has no value in [low, high) the kernel throws rlx::Error.
//
// RngNormal: z = sqrt(-2 ln u1) * {cos, sin}(2 pi u2) with u1 in (0, 1], u2 in [0, 1);
// out = mean + stddev * z computed in double, rounded to the output dtype.
//
// Sample, per row r: NaN logits -> rlx::Error; a row whose logits are all -inf -> rlx::Error
// (in every mode, greedy included). temperature 0: first index of the maximum.
// Otherwise p_j = exp((l_j - max) / temperature) (when the max is +inf, the +inf entries share
// the mass equally); tokens sorted by p
// descending (ties: lower index first); keep the first top_k (top_k 0 or >= V: all); then keep
// the smallest prefix whose mass >= top_p * (mass kept by top_k) (at least one token); draw
// u in [0, 1) (53 bits from words 0-1 of block r of the stream) and pick the first token whose
// cumulative mass exceeds u * (kept mass).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/philox.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGrainBlocks = 4096;  // 16K elements per chunk

uint64_t read_offset(const KernelContext& ctx, size_t index) {
  if (ctx.in.size() <= index) return 0;
  const Tensor& t = ctx.in[index];
  check(t.dtype() == DType::I64 && t.numel() == 1,
        std::string(op_name(ctx.node.op)) + ": the offset operand must be one i64 value");
  return static_cast<uint64_t>(t.data<int64_t>()[0]);
}

// Neighbouring representable values of a float storage type.
template <class T> T step_float(T v, bool up) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    const uint16_t mag = v.bits & 0x7FFF;
    const bool neg = (v.bits & 0x8000) != 0;
    T r;
    if (mag == 0) r.bits = up ? 0x0001 : 0x8001;        // +-0 -> smallest subnormal
    else if (neg == up) r.bits = static_cast<uint16_t>(v.bits - 1);  // towards zero
    else r.bits = static_cast<uint16_t>(v.bits + 1);    // away from zero
    return r;
  } else {
    return std::nextafter(v, up ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity());
  }
}

template <class T> struct UniformRange {
  T lo, hi;  // smallest value >= low, largest value < high (in T)
};

template <class T> UniformRange<T> uniform_range(double low, double high) {
  T lo = store<T>(low);
  if (to_double(lo) < low) lo = step_float(lo, true);
  T hi = store<T>(high);
  while (to_double(hi) >= high) hi = step_float(hi, false);
  check(to_double(lo) <= to_double(hi),
        std::string("rng_uniform: the output dtype ") + dtype_name(dtype_of<T>()) +
            " has no value in [low, high); widen the range or use a wider dtype");
  return {lo, hi};
}

template <class T>
void fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, double low, double high) {
  const UniformRange<T> range = uniform_range<T>(low, high);
  const double lo_d = to_double(range.lo), hi_d = to_double(range.hi);
  const double width = high - low;
  const int64_t blocks = (n + 3) / 4;
  parallel_for(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Philox4x32 r = philox_block(seed, offset, static_cast<uint64_t>(b));
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t i = b * 4 + j;
        if (i >= n) break;
        double x = low + width * bits_to_unit_co(r[static_cast<size_t>(j)]);
        T v = store<T>(x);
        const double vd = to_double(v);
        if (vd > hi_d) v = range.hi;
        else if (vd < lo_d) v = range.lo;
        out[i] = v;
      }
    }
  });
}

template <class T>
void fill_normal(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double stddev) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const int64_t blocks = (n + 3) / 4;
  parallel_for(blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const Philox4x32 r = philox_block(seed, offset, static_cast<uint64_t>(b));
      for (size_t pair = 0; pair < 2; ++pair) {
        const int64_t i = b * 4 + static_cast<int64_t>(pair) * 2;
        if (i >= n) break;
        const double radius = std::sqrt(-2.0 * std::log(bits_to_unit_oc(r[2 * pair])));
        const double angle = kTwoPi * bits_to_unit_co(r[2 * pair + 1]);
        out[i] = store<T>(mean + stddev * radius * std::cos(angle));
        if (i + 1 < n) out[i + 1] = store<T>(mean + stddev * radius * std::sin(angle));
      }
    }
  });
}

void require_float_out(const KernelContext& ctx) {
  check(is_float(ctx.out[0].dtype()), std::string(op_name(ctx.node.op)) + ": output dtype must be float, got " +
                                          dtype_name(ctx.out[0].dtype()));
}

// One row of Sample. `p` and `order` are scratch buffers of size V.
template <class T>
int64_t sample_row(const T* logits, int64_t V, int64_t row, const ops::Sample& op, uint64_t offset,
                   std::vector<double>& p, std::vector<int64_t>& order) {
  double mx = -std::numeric_limits<double>::infinity();
  int64_t arg = 0;
  for (int64_t j = 0; j < V; ++j) {
    const double v = to_double(logits[j]);
    if (std::isnan(v)) throw Error("sample: logits row " + std::to_string(row) + " has NaN at index " + std::to_string(j));
    if (j == 0 || v > mx) {
      mx = v;
      arg = j;
    }
  }
  // Checked before the greedy return so that every mode treats such a row alike.
  check(mx != -std::numeric_limits<double>::infinity(),
        "sample: every logit of row " + std::to_string(row) + " is -inf; nothing can be sampled");
  if (op.temperature == 0) return arg;
  const bool inf_max = std::isinf(mx);
  for (int64_t j = 0; j < V; ++j) {
    const double v = to_double(logits[j]);
    p[static_cast<size_t>(j)] = inf_max ? (v == mx ? 1.0 : 0.0) : std::exp((v - mx) / op.temperature);
  }
  const auto by_prob = [&](int64_t a, int64_t b) {
    const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  };
  std::iota(order.begin(), order.end(), int64_t{0});
  int64_t kept = (op.top_k > 0 && op.top_k < V) ? op.top_k : V;
  if (kept < V) std::partial_sort(order.begin(), order.begin() + kept, order.end(), by_prob);
  else std::sort(order.begin(), order.end(), by_prob);

  double mass = 0;
  for (int64_t i = 0; i < kept; ++i) mass += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
  if (op.top_p < 1) {
    const double target = op.top_p * mass;
    double cum = 0;
    for (int64_t i = 0; i < kept; ++i) {
      cum += p[static_cast<size_t>(order[static_cast<size_t>(i)])];
      if (cum >= target) {
        kept = i + 1;
        mass = cum;
        break;
      }
    }
  }
  const Philox4x32 r = philox_block(op.seed, offset, static_cast<uint64_t>(row));
  const double target = bits_to_unit53(r[0], r[1]) * mass;
  double cum = 0;
  int64_t last_positive = order[0];
  for (int64_t i = 0; i < kept; ++i) {
    const int64_t tok = order[static_cast<size_t>(i)];
    const double pi = p[static_cast<size_t>(tok)];
    if (pi <= 0) break;  // sorted descending: the rest are zero too
    last_positive = tok;
    cum += pi;
    if (target < cum) return tok;
  }
  return last_positive;  // rounding left the target at the very end of the mass
}

}  // namespace

void kernel(const ops::RngUniform& op, KernelContext& ctx) {
  require_float_out(ctx);
  const uint64_t offset = read_offset(ctx, 0);
  Tensor& out = ctx.out[0];
  visit_dtype(out.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    if constexpr (D == DType::F32 || D == DType::F16 || D == DType::BF16 || D == DType::F64)
      fill_uniform(out.data<T>(), out.numel(), op.seed, offset, op.low, op.high);
  });
}

void kernel(const ops::RngNormal& op, KernelContext& ctx) {
  require_float_out(ctx);
  const uint64_t offset = read_offset(ctx, 0);
  Tensor& out = ctx.out[0];
  visit_dtype(out.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    if constexpr (D == DType::F32 || D == DType::F16 || D == DType::BF16 || D == DType::F64)
      fill_normal(out.data<T>(), out.numel(), op.seed, offset, op.mean, op.stddev);
  });
}

void kernel(const ops::Sample& op, KernelContext& ctx) {
  const Tensor& logits = ctx.in[0];
  check(is_float(logits.dtype()), std::string("sample: logits must be float, got ") + dtype_name(logits.dtype()));
  const uint64_t offset = read_offset(ctx, 1);
  const int64_t V = logits.shape().back();
  const int64_t B = logits.rank() == 2 ? logits.dim(0) : 1;
  if (B == 0) return;
  check(V > 0, "sample: the vocabulary dim is 0; nothing can be sampled");
  int64_t* out = ctx.out[0].data<int64_t>();
  visit_dtype(logits.dtype(), [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    if constexpr (D == DType::F32 || D == DType::F16 || D == DType::BF16 || D == DType::F64) {
      const T* base = logits.data<T>();
      parallel_for(B, std::max<int64_t>(1, 16384 / V), [&](int64_t r0, int64_t r1) {
        std::vector<double> p(static_cast<size_t>(V));
        std::vector<int64_t> order(static_cast<size_t>(V));
        for (int64_t r = r0; r < r1; ++r) out[r] = sample_row(base + r * V, V, r, op, offset, p, order);
      });
    }
  });
}

}  // namespace rlx::cpu
