#include "plan/select_work.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plan/gpu_claims.h"
#include "plan/step_family.h"
#include "rlx/error.h"

namespace rlx::plan {
namespace {

uint32_t pow2_at_least(int64_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

bool is_float_small(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace

void select_require_32bit(const std::string& what, std::string_view backend, int64_t n, const std::string& of) {
  if (n >= (int64_t{1} << 31))
    throw Error(what + ": the " + std::string(backend) + " kernel indexes with 32 bits; " + of + " has " +
                std::to_string(n) + " elements (2^31 or more); split the tensor or use the CUDA/CPU backend");
}

bool select_claims_kind(std::string_view n) { return n == "argmax" || n == "argmin" || n == "topk" || n == "sample"; }
bool scan_claims_kind(std::string_view n) { return n == "cumsum"; }
bool scatter_claims_kind(std::string_view n) { return n == "scatter_add" || n == "cache_write"; }
bool random_claims_kind(std::string_view n) { return n == "rng_uniform" || n == "rng_normal"; }

uint64_t radix_shared_bytes(uint32_t p2, uint32_t key_bytes) { return uint64_t{p2} * (key_bytes + 4) + 2 * 1024 + 32; }

uint32_t ranked_slots(int64_t n) { return std::max<uint32_t>(2, pow2_at_least(n)); }

int64_t sample_kept(const ops::Sample& op, int64_t vocab) { return op.top_k > 0 && op.top_k < vocab ? op.top_k : vocab; }

bool select_family_claims_node(std::string_view backend, const SelectDevice& dev, const Graph& g, const Node& n,
                               std::string* why, bool f32_scan_without_f64) {
  const std::string be(backend);
  const std::string name = op_name(n.op);
  const std::string on = dev.name.empty() ? "the device" : dev.name;
  if (name == "argmax" || name == "argmin") {
    if (n.outputs.at(0).dtype != DType::I64) return claim_refuse(why, be + " " + name + " writes i64 indices");
    return true;
  }
  if (name == "topk") {
    const auto& op = std::get<ops::TopK>(n.op);
    if (op.k > kTopKMax)
      return claim_refuse(why, be + " topk sorts the k winners in workgroup memory: k <= " + std::to_string(kTopKMax) +
                                   ", not " + std::to_string(op.k));
    const DType t = g.shape(n.inputs.at(0)).dtype;
    const uint32_t key_bytes = t == DType::F64 || t == DType::I64 ? 8 : 4;
    const uint64_t need = radix_shared_bytes(ranked_slots(std::max<int64_t>(op.k, 1)), key_bytes);
    if (dev.shared_bytes && need > dev.shared_bytes)
      return claim_refuse(why, be + " topk with k = " + std::to_string(op.k) + " needs " + std::to_string(need) +
                                   " bytes of workgroup memory; " + on + " has " + std::to_string(dev.shared_bytes));
    return true;
  }
  if (name == "sample") {
    const auto& op = std::get<ops::Sample>(n.op);
    const Shape& s = g.shape(n.inputs.at(0));
    if (!is_float_small(s.dtype))
      return claim_refuse(why, be + " sample ranks f32/f16/bf16 logits, not " + std::string(dtype_name(s.dtype)));
    if (!(op.temperature >= 0) || std::isinf(op.temperature))
      return claim_refuse(why, be + " sample needs a finite temperature >= 0 (its rank order is the logits' order)");
    if (op.temperature == 0) return true;
    if (!dev.f64)
      return claim_refuse(why, be + " sample with a temperature > 0 computes the CPU's probabilities in double; " + on +
                                   " has no 64-bit floats");
    if (!s.is_static() || s.rank() < 1) return claim_refuse(why, be + " sample needs static logits dims");
    const int64_t kept = sample_kept(op, s.dims.back().value);
    if (kept > kTopKMax)
      return claim_refuse(why, be + " sample sorts the kept tokens in workgroup memory: it needs top_k in [1, " +
                                   std::to_string(kTopKMax) + "] or a vocabulary of at most " + std::to_string(kTopKMax) +
                                   " (this one keeps " + std::to_string(kept) + ")");
    const uint64_t need = radix_shared_bytes(ranked_slots(kept), 4) + 8ull * pow2_at_least(kept) + 2048;
    if (dev.shared_bytes && need > dev.shared_bytes)
      return claim_refuse(why, be + " sample keeping " + std::to_string(kept) + " tokens needs " + std::to_string(need) +
                                   " bytes of workgroup memory; " + on + " has " + std::to_string(dev.shared_bytes));
    return true;
  }
  if (name == "cumsum") {
    const DType t = g.shape(n.inputs.at(0)).dtype;
    if (t == DType::Bool) return claim_refuse(why, "cumsum does not take bool input");
    if (t == DType::F32 && !dev.f64 && !f32_scan_without_f64)
      return claim_refuse(why, be + " cumsum accumulates f32 in double like the CPU; " + on + " has no 64-bit floats");
    return true;
  }
  if (name == "scatter_add") {
    const DType t = g.shape(n.inputs.at(0)).dtype, it = g.shape(n.inputs.at(1)).dtype;
    if (t == DType::Bool) return claim_refuse(why, "scatter_add does not take bool data");
    if (g.shape(n.inputs.at(2)).dtype != t) return claim_refuse(why, be + " scatter_add needs updates of data's dtype");
    if (it != DType::I8 && it != DType::I16 && it != DType::I32 && it != DType::I64 && it != DType::U8)
      return claim_refuse(why, be + " scatter_add takes i8/i16/i32/i64/u8 indices, not " + std::string(dtype_name(it)));
    if (g.shape(n.inputs.at(1)).rank() > 8 || g.shape(n.inputs.at(1)).rank() < 1)
      return claim_refuse(why, be + " scatter_add supports index ranks 1 to 8");
    return true;
  }
  if (name == "cache_write") {  // rows of the cache's dtype and i32 / i64 positions: the IR's checks
    const Shape& cache = g.shape(n.inputs.at(0));
    if (cache.is_static() && cache.numel() >= (int64_t{1} << 31))
      return claim_refuse(why, be + " cache_write indexes with 32 bits; the cache has 2^31 elements or more");
    return true;
  }
  if (random_claims_kind(name)) {
    const DType t = n.outputs.at(0).dtype;
    if (!is_float(t)) return claim_refuse(why, name + ": output dtype must be float, got " + dtype_name(t));
    if (!dev.f64)
      return claim_refuse(why, be + " " + name + " computes the CPU's double-precision transform; " + on +
                                   " has no 64-bit floats");
    return true;
  }
  return claim_refuse(why, "the " + be + " backend has no kernel for '" + name + "'");
}

ArgReduceWork arg_reduce_work(const Step& st, std::string_view backend) {
  const std::string what = step_node_label(st);
  const auto& g = std::get<AxisGeom>(st.geom);
  ArgReduceWork w{g.outer, g.axis, g.inner, 1, 0};
  if (g.outer * g.inner == 0) return w;
  if (g.axis == 0)
    throw Error(what + ": " + op_name(st.op) + " over an axis of size 0 of input " + dims_str(st.in.at(0).dims) +
                " has no element to pick");
  select_require_32bit(what, backend, st.in.at(0).numel(), "the input");
  w.ti = std::min<uint32_t>(32, pow2_at_least(g.inner));
  w.tiles = g.outer * ((g.inner + w.ti - 1) / w.ti);
  return w;
}

TopKWork topk_work(const Step& st, std::string_view backend) {
  const std::string what = step_node_label(st);
  const auto& op = std::get<ops::TopK>(st.op);
  const auto& g = std::get<AxisGeom>(st.geom);
  if (op.k < 1 || op.k > g.axis)
    throw Error(what + ": k = " + std::to_string(op.k) + " is not in [1, " + std::to_string(g.axis) +
                "] for the axis of input " + dims_str(st.in.at(0).dims));
  if (op.k > kTopKMax)
    throw Error(what + ": " + std::string(backend) + " topk supports k <= " + std::to_string(kTopKMax) + ", not " +
                std::to_string(op.k));
  select_require_32bit(what, backend, st.in.at(0).numel(), "the input");
  return TopKWork{g.outer, g.axis, g.inner, op.k, ranked_slots(op.k), op.largest};
}

ScanWork scan_work(int64_t outer, int64_t len, int64_t inner, uint32_t acc_bytes) {
  ScanWork w;
  w.outer = outer;
  w.len = len;
  w.inner = inner;
  while (w.ti < inner && w.ti < 32) w.ti <<= 1;
  w.seg = acc_bytes >= 8 ? 4 : 8;
  w.ch = int64_t{kSelectWorkgroup / w.ti} * w.seg;
  w.nch = (len + w.ch - 1) / w.ch;
  return w;
}

std::vector<uint32_t> ScatterAddWork::params() const {
  std::vector<uint32_t> p{static_cast<uint32_t>(rank),      static_cast<uint32_t>(axis),  static_cast<uint32_t>(axis_size),
                          static_cast<uint32_t>(mid),       static_cast<uint32_t>(inner), static_cast<uint32_t>(outer),
                          by_dest ? 1u : 0u};
  for (size_t d = 0; d < 8; ++d) p.push_back(d < idx_dims.size() ? static_cast<uint32_t>(idx_dims[d]) : 1u);
  for (size_t d = 0; d < 8; ++d) p.push_back(d < data_strides.size() ? static_cast<uint32_t>(data_strides[d]) : 0u);
  return p;
}

ScatterAddWork scatter_add_work(const Step& st, std::string_view backend) {
  const std::string what = step_node_label(st);
  const auto& sg = std::get<ScatterAddGeom>(st.geom);
  ScatterAddWork w;
  w.rank = static_cast<int64_t>(sg.idx_dims.size());
  if (w.rank > 8 || w.rank == 0)
    throw Error(what + ": " + std::string(backend) + " scatter_add supports ranks 1 to 8");
  select_require_32bit(what, backend, st.in.at(0).numel(), "the data");
  select_require_32bit(what, backend, sg.count, "the indices");
  w.axis = sg.axis;
  w.axis_size = sg.axis_size;
  w.count = sg.count;
  w.idx_dims = sg.idx_dims;
  w.data_strides = sg.data_strides;
  for (int64_t d = 0; d < w.axis; ++d) w.outer *= sg.idx_dims[static_cast<size_t>(d)];
  for (int64_t d = w.axis + 1; d < w.rank; ++d) w.inner *= sg.idx_dims[static_cast<size_t>(d)];
  w.mid = sg.idx_dims[static_cast<size_t>(w.axis)];
  const int64_t cols = w.outer * w.inner;
  // By destination when the columns are too few to fill the device and the data axis is short.
  w.by_dest = cols < 4096 && sg.axis_size > 0 && sg.axis_size <= 4096 && cols * sg.axis_size < (int64_t{1} << 31);
  w.items = w.by_dest ? cols * sg.axis_size : cols;
  return w;
}

namespace {

// The value of dtype t nearest v as the CPU stores a double (f16 / bf16 through f32).
double round_to(DType t, double v) {
  const auto f = static_cast<float>(v);
  if (t == DType::F64) return v;
  if (t == DType::F16) return static_cast<float>(f16(f));
  if (t == DType::BF16) return static_cast<float>(bf16(f));
  return f;
}

// The neighbouring value of v (a value of t) towards +inf (up) or -inf.
double step(DType t, double v, bool up) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (t == DType::F64) return std::nextafter(v, up ? inf : -inf);
  if (t == DType::F32)
    return std::nextafter(static_cast<float>(v), up ? std::numeric_limits<float>::infinity()
                                                    : -std::numeric_limits<float>::infinity());
  uint16_t bits = t == DType::F16 ? f16(static_cast<float>(v)).bits : bf16(static_cast<float>(v)).bits;
  const uint16_t mag = bits & 0x7FFF;
  const bool neg = (bits & 0x8000) != 0;
  if (mag == 0) bits = up ? 0x0001 : 0x8001;                   // +-0 -> the smallest subnormal
  else if (neg == up) bits = static_cast<uint16_t>(bits - 1);  // towards zero
  else bits = static_cast<uint16_t>(bits + 1);
  if (t == DType::F16) {
    f16 h;
    h.bits = bits;
    return static_cast<float>(h);
  }
  bf16 h;
  h.bits = bits;
  return static_cast<float>(h);
}

// d = m * 2^e with m an odd integer (m = 0 for d = 0).
void odd_significand(double d, int64_t& m, int& e) {
  if (d == 0) {
    m = 0, e = 0;
    return;
  }
  int ex = 0;
  const double fr = std::frexp(d, &ex);  // d = fr * 2^ex, |fr| in [0.5, 1)
  m = static_cast<int64_t>(std::ldexp(fr, 53));
  e = ex - 53;
  while (m % 2 == 0) m /= 2, ++e;
}

int bit_length(uint64_t v) {
  int n = 0;
  while (v) v >>= 1, ++n;
  return n;
}

}  // namespace

UniformBounds rng_uniform_bounds(DType t, double low, double high, const std::string& what) {
  UniformBounds b;
  b.lo = round_to(t, low);
  if (b.lo < low) b.lo = step(t, b.lo, true);
  b.hi = round_to(t, high);
  while (b.hi >= high) b.hi = step(t, b.hi, false);
  if (!(b.lo <= b.hi))
    throw Error(what + ": the output dtype " + dtype_name(t) +
                " has no value in [low, high); widen the range or use a wider dtype");
  return b;
}

std::optional<ExactUniform> rng_uniform_exact(double low, double high) {
  const double width = high - low;
  if (!std::isfinite(low) || !std::isfinite(width) || !(width > 0)) return std::nullopt;
  int64_t ml = 0, mw = 0;
  int el = 0, ew = 0;
  odd_significand(low, ml, el);
  odd_significand(width, mw, ew);
  if (bit_length(static_cast<uint64_t>(mw)) > 21) return std::nullopt;  // width * r rounds
  const int eb = ew - 32;
  const int e0 = ml == 0 ? eb : std::min(el, eb);
  if (e0 < -126 || e0 > 74) return std::nullopt;
  // a = ml * 2^(el - e0), b = mw * 2^(eb - e0); the sum is exact while |a| + b * r < 2^53.
  const int sa = ml == 0 ? 0 : el - e0, sb = eb - e0;
  if (sa > 53 || sb > 21) return std::nullopt;
  const uint64_t abs_a = static_cast<uint64_t>(ml < 0 ? -ml : ml) << sa;
  const uint64_t b = static_cast<uint64_t>(mw) << sb;
  if (abs_a >= (uint64_t{1} << 53) || b >= (uint64_t{1} << 22)) return std::nullopt;
  if (abs_a + b * 0xFFFFFFFFull >= (uint64_t{1} << 53)) return std::nullopt;
  ExactUniform x;
  x.a = ml < 0 ? -static_cast<int64_t>(abs_a) : static_cast<int64_t>(abs_a);
  x.b = static_cast<uint32_t>(b);
  x.e = e0;
  return x;
}

}  // namespace rlx::plan
