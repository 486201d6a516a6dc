#include "support/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <cmath>
#include <random>
#include <sstream>

namespace rlx::testing {

Tensor random_tensor(DType dtype, std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  const int64_t n = product(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    x = dist(rng);
    if (is_int(dtype)) x = std::floor(x);
    if (dtype == DType::Bool) x = x > (lo + hi) / 2 ? 1 : 0;
  }
  return from_doubles(dtype, std::move(shape), v);
}

std::vector<double> to_doubles(const Tensor& t) { return t.to_f64(); }

Tensor from_doubles(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  return Tensor::f64(std::move(shape), values).cast(dtype);
}

std::vector<Tensor> run_cpu(const Graph& g, const NamedTensors& inputs, const NamedTensors& params) {
  Session s(Device::Cpu);
  CompiledGraph cg = s.compile(g);
  for (const auto& [name, t] : params) cg.set_param(name, t);
  return cg.run(inputs);
}

Tensor run_cpu1(const Graph& g, const NamedTensors& inputs, const NamedTensors& params) {
  auto outs = run_cpu(g, inputs, params);
  if (outs.size() != 1) throw Error("run_cpu1: graph has " + std::to_string(outs.size()) + " outputs");
  return outs[0];
}

Tensor run_op(const Op& op, const std::vector<Tensor>& ins) {
  Graph g;
  std::vector<Value> vs;
  NamedTensors feed;
  for (size_t i = 0; i < ins.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    vs.push_back(g.input(name, ins[i].shape_info()));
    feed.emplace_back(name, ins[i]);
  }
  g.add_output(g.apply(op, vs));
  return run_cpu1(g, feed);
}

Shape infer_node(const Op& op, const std::vector<Shape>& shapes) {
  Graph g;
  std::vector<Value> vs;
  for (size_t i = 0; i < shapes.size(); ++i) vs.push_back(g.input("in" + std::to_string(i), shapes[i]));
  return g.shape(g.apply(op, vs));
}

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::F64: return {1e-10, 1e-12};
    case DType::F32: return {1e-5, 1e-6};
    case DType::F16: return {2e-3, 1e-4};
    case DType::BF16: return {1.6e-2, 1e-3};
    default: return {0, 0};
  }
}

::testing::AssertionResult all_close(const Tensor& actual, const std::vector<int64_t>& expected_shape,
                                     const std::vector<double>& expected, Tolerance tol) {
  if (actual.shape() != expected_shape)
    return ::testing::AssertionFailure() << "shape " << dims_str(actual.shape()) << " != expected "
                                         << dims_str(expected_shape);
  if (static_cast<int64_t>(expected.size()) != actual.numel())
    return ::testing::AssertionFailure() << "expected has " << expected.size() << " values, actual "
                                         << actual.numel();
  const auto a = actual.to_f64();
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = expected[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(y) && x == y) continue;
    const double err = std::fabs(x - y);
    const double allowed = tol.atol + tol.rtol * std::fabs(y);
    if (!(err <= allowed)) {
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = static_cast<int64_t>(i);
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(10);
  os << bad << " of " << a.size() << " elements differ (" << dtype_name(actual.dtype()) << ", rtol=" << tol.rtol
     << " atol=" << tol.atol << "); worst at flat index " << worst << " "
     << dims_str(unravel(worst, expected_shape)) << ": actual " << a[worst] << " expected " << expected[worst];
  return ::testing::AssertionFailure() << os.str();
}

std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected rlx::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected rlx::Error, nothing was thrown";
  return "";
}

std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& dims) {
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    if (dims[d] == 0) continue;
    idx[d] = i % dims[d];
    i /= dims[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  int64_t i = 0;
  for (size_t d = 0; d < dims.size(); ++d) i = i * dims[d] + idx[d];
  return i;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) had_ = true, old_ = old;
  setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

std::string cli_path() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path next = self.parent_path() / "rlx";
    if (::access(next.c_str(), X_OK) == 0) return next.string();
  }
#ifdef RLX_CLI_PATH
  return RLX_CLI_PATH;
#else
  return "rlx";
#endif
}

}  // namespace rlx::testing
