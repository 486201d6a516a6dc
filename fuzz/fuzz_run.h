#pragma once
// Shared harness of the rlx fuzz targets: the size policy they run under, and "run what was
// parsed": compile a graph for the CPU, feed every input (and every Param without a weight) a
// small tensor derived from the fuzz input, run it.
//
// Contract checked by every target: rlx::Error is the one expected failure. Any other
// exception is reported with its text and aborts, so that libFuzzer records the input as a
// crash; crashes, leaks and sanitizer reports are caught by libFuzzer/ASan themselves.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <variant>
#include <vector>

#include "rlx/error.h"
#include "rlx/graph.h"
#include "rlx/limits.h"
#include "rlx/session.h"
#include "rlx/tensor.h"

namespace rlx::fuzz {

// The size policy of every fuzz run: small enough that no input can make one run use more than
// a few hundred MB or more than a few seconds under ASan (a 4M-element tensor bounds the work of
// most ops; loops and unrolling are capped low). Anything beyond it must be an rlx::Error.
inline Limits fuzz_limits() {
  Limits l;
  l.max_tensor_bytes = int64_t{16} << 20;     // 16 MiB per tensor
  l.max_tensor_elements = int64_t{4} << 20;   // 4M elements per tensor
  l.max_nesting_depth = 256;                  // the library default: it must be safe under ASan too
  l.max_loop_iterations = 1000;
  l.max_unroll_steps = 64;
  return l;
}

// Installs fuzz_limits() as the process defaults (call once, from LLVMFuzzerInitialize).
inline void install_fuzz_limits() { set_default_limits(fuzz_limits()); }

// Deterministic generator seeded from the fuzz input (splitmix64 over an FNV-1a hash).
class Rng {
 public:
  Rng(const uint8_t* data, size_t size) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
    state_ = h;
  }
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_ = 0;
};

// A small value for a symbolic dim: mostly 1..3, sometimes 0 (zero-size tensors are an edge
// case every op must handle).
inline int64_t small_dim(Rng& rng) {
  static constexpr int64_t kDims[8] = {0, 1, 1, 1, 2, 2, 3, 3};
  return kDims[rng.below(8)];
}

// One element value: small numbers mostly, with the occasional special value.
inline double element_value(Rng& rng, DType dtype) {
  const uint64_t r = rng.next();
  if (dtype == DType::Bool) return static_cast<double>(r & 1);
  if (is_float(dtype)) {
    switch ((r >> 8) % 64) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return -std::numeric_limits<double>::infinity();
      case 3: return 0.0;
      case 4: return 1e30;
      case 5: return -1e-30;
      default: return static_cast<double>(static_cast<int8_t>(r & 0xff)) / 16.0;  // [-8, 8)
    }
  }
  // Integers: small indices and counts, negative ones for signed types (valid as axes/indices
  // in some ops, invalid in others), the occasional extreme value.
  const bool is_signed = is_signed_int(dtype);
  switch ((r >> 8) % 64) {
    case 0: return is_signed ? -1e18 : 0.0;
    case 1: return 1e18;
    default: return is_signed ? static_cast<double>(static_cast<int64_t>(r % 12) - 3) : static_cast<double>(r % 9);
  }
}

inline Tensor make_tensor(Rng& rng, DType dtype, const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(dtype, shape);
  const int64_t n = t.numel();
  visit_dtype(dtype, [&]<DType D>() {
    using T = typename dtype_storage<D>::type;
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < n; ++i) {
      double v = element_value(rng, dtype);
      if constexpr (std::is_integral_v<T>) {
        // Saturate (|v| <= 1e18, so the int64 bounds are never reached): converting an
        // out-of-range double is undefined.
        const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
        const double hi = static_cast<double>(std::numeric_limits<T>::max());
        v = v < lo ? lo : (v > hi ? hi : v);
      }
      p[i] = from_double<T>(v);
    }
  });
  return t;
}

// Concrete dims of `shape`, symbols bound through `syms` (new symbols get a small value).
inline std::vector<int64_t> bind_dims(const Shape& shape, std::map<std::string, int64_t>& syms, Rng& rng) {
  std::vector<int64_t> dims;
  dims.reserve(shape.dims.size());
  for (const Dim& d : shape.dims) {
    if (d.is_static()) {
      dims.push_back(d.value);
      continue;
    }
    auto it = syms.find(d.sym);
    if (it == syms.end()) it = syms.emplace(d.sym, small_dim(rng)).first;
    dims.push_back(it->second);
  }
  return dims;
}

// Largest generated input or param, in elements: the graph's own tensors may grow to the size
// policy's caps, but inputs stay small so that a legal yet enormous computation (a convolution
// over declared inputs of millions of elements) does not pass for a hang.
inline constexpr int64_t kMaxGeneratedElements = int64_t{1} << 16;

inline bool small_enough(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxGeneratedElements) return false;
    n *= d;
    if (n > kMaxGeneratedElements) return false;
  }
  return true;
}

// Sum of the output bytes of the last run (kept so that reading them is not optimized away).
inline volatile uint64_t output_checksum = 0;

// Compiles `g` for the CPU under the fuzz limits and runs it once with generated inputs and
// params. `rng` continues the input-derived sequence; `syms` may carry dims already bound.
// Throws rlx::Error for anything the library rejects; compiles but does not run when an input
// or param would have more than kMaxGeneratedElements elements.
inline void compile_and_run(const Graph& g, Rng& rng, std::map<std::string, int64_t> syms = {}) {
  CompileOptions opts;
  opts.num_threads = 1;
  opts.limits = fuzz_limits();
  opts.optimize = rng.below(4) != 0;  // mostly through the optimizer's passes, sometimes without
  Session session(Device::Cpu);
  CompiledGraph cg = session.compile(g, opts);

  for (NodeId id : g.param_nodes()) {
    const auto* p = std::get_if<ops::Param>(&g.node(id).op);
    if (p == nullptr || g.weights().count(p->name)) continue;
    const std::vector<int64_t> dims = bind_dims(p->shape, syms, rng);
    if (!small_enough(dims)) return;
    cg.set_param(p->name, make_tensor(rng, p->shape.dtype, dims));
  }
  NamedTensors inputs;
  for (NodeId id : g.input_nodes()) {
    const auto* in = std::get_if<ops::Input>(&g.node(id).op);
    if (in == nullptr) continue;
    const std::vector<int64_t> dims = bind_dims(in->shape, syms, rng);
    if (!small_enough(dims)) return;
    inputs.emplace_back(in->name, make_tensor(rng, in->shape.dtype, dims));
  }
  const std::vector<Tensor> outs = cg.run(inputs);
  // Touch every output byte, so a bad output view is seen by ASan here.
  uint64_t sum = 0;
  for (const Tensor& t : outs) {
    const auto* b = static_cast<const uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) sum += b[i];
  }
  output_checksum = sum;
}

// Runs `body`; rlx::Error is the expected outcome for bad input, any other exception aborts
// with its type and text (libFuzzer then saves the input as a crash).
template <class F>
int guarded(const char* target, F&& body) {
  try {
    body();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: an exception that is not rlx::Error escaped: %s: %s\n", target, typeid(e).name(),
                 e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: an exception that is not an std::exception escaped\n", target);
    std::abort();
  }
  return 0;
}

}  // namespace rlx::fuzz
