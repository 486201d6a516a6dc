#include "codegen/formula.h"

#include <set>

#include "rlx/error.h"

namespace rlx::codegen {
namespace {

// Records the functions a formula calls (for capability checks).
class CallRecorder final : public ExprPrinter {
 public:
  mutable std::vector<MathFn> fns;
  std::string literal(double) const override { return "k"; }
  std::string call(MathFn f, const std::vector<std::string>&) const override {
    fns.push_back(f);
    return "f";
  }
  std::string select(const std::string&, const std::string&, const std::string&) const override { return "s"; }
};

}  // namespace

const char* math_fn_name(MathFn f) {
  static const char* names[] = {"exp",   "log",  "log1p", "tanh", "erf",  "sqrt",  "sin",        "cos", "tan",
                                "atan",  "asin", "acos",  "floor", "ceil", "round_even", "abs", "max"};
  const auto i = static_cast<size_t>(f);
  return i < sizeof(names) / sizeof(names[0]) ? names[i] : "?";
}

bool has_float_formula(ActKind k) { return k != ActKind::Not; }

std::string print_activation(ActKind k, const ExprPrinter& p, const std::string& x) {
  switch (k) {
#define RLX_PRINT_CASE(K) \
  case ActKind::K: return ActFormula<ActKind::K>::print(p, x);
    RLX_FLOAT_ACTIVATIONS(RLX_PRINT_CASE)
#undef RLX_PRINT_CASE
    case ActKind::Not: break;
  }
  throw Error(std::string("activation '") + enum_name(k) + "' has no float formula (it is defined on bool only)");
}

std::vector<MathFn> activation_math_fns(ActKind k) {
  if (!has_float_formula(k)) return {};
  CallRecorder r;
  print_activation(k, r, "x");
  std::set<MathFn> seen;
  std::vector<MathFn> out;
  for (MathFn f : r.fns)
    if (seen.insert(f).second) out.push_back(f);
  return out;
}

double eval_activation(ActKind k, double x) {
  switch (k) {
#define RLX_EVAL_CASE(K) \
  case ActKind::K: return ActFormula<ActKind::K>::eval(x);
    RLX_FLOAT_ACTIVATIONS(RLX_EVAL_CASE)
#undef RLX_EVAL_CASE
    case ActKind::Not: break;
  }
  throw Error(std::string("activation '") + enum_name(k) + "' has no float formula (it is defined on bool only)");
}

}  // namespace rlx::codegen
