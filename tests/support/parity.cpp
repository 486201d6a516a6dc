#include "support/parity.h"

#include <cmath>
#include <sstream>

namespace rlx::testing {

Tolerance parity_tolerance(DType t) {
  switch (t) {
    case DType::F64: return {1e-9, 1e-12};
    case DType::F32: return {1e-4, 1e-5};
    case DType::F16: case DType::BF16: return {1e-2, 1e-2};
    default: return {0, 0};
  }
}

namespace {
uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

Tensor random_for(const Shape& s, const std::string& name, const ParityOptions& o) {
  if (!s.is_static())
    throw Error("parity: '" + name + "' has symbolic shape " + s.str() + "; pass it in fixed_inputs");
  if (is_float(s.dtype)) return random_tensor(s.dtype, s.concrete(), name_seed(o.seed, name), o.lo, o.hi);
  if (s.dtype == DType::Bool) return random_tensor(s.dtype, s.concrete(), name_seed(o.seed, name), 0, 2);
  return random_tensor(s.dtype, s.concrete(), name_seed(o.seed, name), 0, static_cast<double>(o.int_hi));
}

const Tensor* find(const NamedTensors& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace

std::vector<Tensor> run_config(const Graph& g, const RunConfig& c, const NamedTensors& ins, const NamedTensors& ps) {
  Graph h = c.transform ? c.transform(g) : g;
  Session s(c.device);
  CompiledGraph cg = s.compile(h, c.options);
  for (const auto& [n, t] : ps) cg.set_param(n, t);
  return cg.run(ins);
}

NamedTensors random_inputs(const Graph& g, const ParityOptions& o) {
  NamedTensors out;
  for (NodeId id : g.input_nodes()) {
    const auto& in = std::get<ops::Input>(g.node(id).op);
    if (const Tensor* f = find(o.fixed_inputs, in.name)) out.emplace_back(in.name, *f);
    else out.emplace_back(in.name, random_for(in.shape, in.name, o));
  }
  return out;
}

NamedTensors random_params(const Graph& g, const ParityOptions& o) {
  NamedTensors out;
  for (NodeId id : g.param_nodes()) {
    const auto& p = std::get<ops::Param>(g.node(id).op);
    if (const Tensor* f = find(o.fixed_params, p.name)) out.emplace_back(p.name, *f);
    else if (g.weights().count(p.name)) continue;
    else out.emplace_back(p.name, random_for(p.shape, "param:" + p.name, o));
  }
  return out;
}

ParityReport compare_configs(const Graph& g, const RunConfig& a, const RunConfig& b, const ParityOptions& opts) {
  const NamedTensors ins = random_inputs(g, opts);
  const NamedTensors ps = random_params(g, opts);
  const auto ra = run_config(g, a, ins, ps);
  const auto rb = run_config(g, b, ins, ps);
  ParityReport rep;
  std::ostringstream os;
  os.precision(6);
  if (ra.size() != rb.size()) {
    rep.pass = false;
    os << a.label << " returned " << ra.size() << " outputs, " << b.label << " " << rb.size() << "\n";
    rep.text = os.str();
    return rep;
  }
  for (size_t k = 0; k < ra.size(); ++k) {
    OutputDiff d;
    d.output = k;
    if (ra[k].dtype() != rb[k].dtype() || ra[k].shape() != rb[k].shape()) {
      d.shape_or_dtype_mismatch = true;
      d.pass = false;
      os << "output " << k << ": " << a.label << " " << ra[k].shape_info().str() << " vs " << b.label << " "
         << rb[k].shape_info().str() << "\n";
    } else {
      const Tolerance tol = opts.tolerance ? opts.tolerance(ra[k].dtype()) : parity_tolerance(ra[k].dtype());
      const auto x = ra[k].to_f64(), y = rb[k].to_f64();
      double worst_excess = -1;
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i]) && std::isnan(y[i])) continue;
        if (x[i] == y[i]) continue;  // exact, infinities of one sign included (inf - inf is NaN)
        const double abs = std::fabs(x[i] - y[i]);
        const double rel = abs / std::max(std::fabs(y[i]), 1e-30);
        d.max_abs = std::max(d.max_abs, abs);
        if (abs > tol.atol) d.max_rel = std::max(d.max_rel, rel);
        const double excess = std::isnan(abs) ? INFINITY : abs - (tol.atol + tol.rtol * std::fabs(y[i]));
        if (excess > worst_excess) {
          worst_excess = excess;
          d.worst_index = static_cast<int64_t>(i);
          d.a_value = x[i];
          d.b_value = y[i];
        }
        if (excess > 0) d.pass = false;
      }
      os << "output " << k << " " << ra[k].shape_info().str() << ": max_abs=" << d.max_abs
         << " max_rel=" << d.max_rel;
      if (d.worst_index >= 0)
        os << " worst@" << d.worst_index << " " << a.label << "=" << d.a_value << " " << b.label << "=" << d.b_value;
      os << (d.pass ? " ok" : " FAIL") << "\n";
    }
    rep.pass = rep.pass && d.pass;
    rep.outputs.push_back(d);
  }
  rep.text = os.str();
  return rep;
}

}  // namespace rlx::testing
