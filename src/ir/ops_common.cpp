// Op-level generic functions: name, arity-checked inference, attribute printing, equality.
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "rlx/graph.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

template <class T> struct is_enum_with_names : std::false_type {};
template <class T>
  requires requires { EnumNames<T>::names; }
struct is_enum_with_names<T> : std::true_type {};

std::string fmt_double(double v, bool exact) {
  char buf[64];
  std::snprintf(buf, sizeof buf, exact ? "%.17g" : "%g", v);
  return buf;
}

// Renders attributes as text. exact=true encodes everything (tensor bytes, full precision)
// so two ops are equal iff their encodings are.
struct AttrWriter {
  std::ostringstream& os;
  bool exact;
  bool first = true;

  void sep(const char* name) {
    os << (first ? "" : " ") << name << "=";
    first = false;
  }
  template <class T>
  void operator()(const char* name, const T& v) {
    sep(name);
    write(v);
  }
  void write(const std::string& s) { os << '"' << s << '"'; }
  void write(bool b) { os << (b ? "true" : "false"); }
  void write(int64_t v) { os << v; }
  void write(uint64_t v) { os << v; }
  void write(double v) { os << fmt_double(v, exact); }
  void write(DType t) { os << dtype_name(t); }
  void write(const Shape& s) { os << s.str(); }
  void write(const std::vector<Dim>& d) { os << dims_str(d); }
  void write(const std::vector<int64_t>& d) { os << dims_str(d); }
  void write(const std::vector<double>& d) {
    os << "[";
    for (size_t i = 0; i < d.size(); ++i) os << (i ? "," : "") << fmt_double(d[i], exact);
    os << "]";
  }
  void write(const Tensor& t) {
    os << t.shape_info().str();
    if (exact) {
      const auto* p = static_cast<const uint8_t*>(t.raw());
      os << ":";
      static const char* hex = "0123456789abcdef";
      for (size_t i = 0; i < t.nbytes(); ++i) os << hex[p[i] >> 4] << hex[p[i] & 15];
    } else if (t.numel() <= 8 && t.numel() > 0) {
      auto v = t.to_f64();
      os << "{";
      for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << fmt_double(v[i], false);
      os << "}";
    }
  }
  void write(const SubgraphPtr& g) {
    if (!g) { os << "null"; return; }
    if (exact) os << "{" << g->to_text() << "}";
    else os << "<graph " << g->size() << " nodes>";
  }
  void write(const std::optional<ActKind>& a) { os << (a ? enum_name(*a) : "none"); }
  void write(const std::vector<ActKind>& v) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << enum_name(v[i]);
    os << "]";
  }
  void write(const std::vector<ops::RegionStep>& steps) {
    os << "[";
    for (size_t i = 0; i < steps.size(); ++i) {
      const ops::RegionStep& s = steps[i];
      os << (i ? "; " : "") << enum_name(s.kind);
      switch (s.kind) {
        case RegionStepKind::Binary: os << ":" << enum_name(static_cast<BinaryKind>(s.op)); break;
        case RegionStepKind::Compare: os << ":" << enum_name(static_cast<CompareKind>(s.op)); break;
        case RegionStepKind::Activation: os << ":" << enum_name(static_cast<ActKind>(s.op)); break;
        case RegionStepKind::Cast: os << ":" << dtype_name(s.to); break;
        case RegionStepKind::Where: break;
      }
      os << "(";
      for (size_t j = 0; j < s.args.size(); ++j) {
        const int32_t a = s.args[j];
        os << (j ? "," : "") << (a >= 0 ? "in" + std::to_string(a) : "s" + std::to_string(-a - 1));
      }
      os << ")";
    }
    os << "]";
  }
  template <class E>
    requires is_enum_with_names<E>::value
  void write(E e) { os << enum_name(e); }
};

std::string encode_attrs(const Op& op, bool exact) {
  std::ostringstream os;
  AttrWriter w{os, exact};
  std::visit([&](const auto& o) {
    auto copy = o;  // visit() is non-const by design; a copy keeps op untouched
    copy.visit(w);
  }, op);
  return os.str();
}

}  // namespace

const char* op_name(const Op& op) {
  return std::visit([](const auto& o) { return std::decay_t<decltype(o)>::kName; }, op);
}

std::vector<Shape> infer_op(const Op& op, std::span<const Shape> inputs) {
  return std::visit([&](const auto& o) -> std::vector<Shape> {
    using T = std::decay_t<decltype(o)>;
    const int n = static_cast<int>(inputs.size());
    if (n < T::kMinInputs || (T::kMaxInputs >= 0 && n > T::kMaxInputs)) {
      std::string want = T::kMaxInputs < 0 ? "at least " + std::to_string(T::kMinInputs)
                         : T::kMinInputs == T::kMaxInputs
                             ? std::to_string(T::kMinInputs)
                             : std::to_string(T::kMinInputs) + " to " + std::to_string(T::kMaxInputs);
      throw Error(std::string(T::kName) + " takes " + want + " inputs, got " + std::to_string(n));
    }
    return o.infer(inputs);
  }, op);
}

std::string op_attrs_str(const Op& op) { return encode_attrs(op, false); }

bool op_equal(const Op& a, const Op& b) {
  if (a.index() != b.index()) return false;
  return encode_attrs(a, true) == encode_attrs(b, true);
}

// ---- leaves ----------------------------------------------------------------
namespace {
void check_leaf_shape(const Shape& s, const char* what, const std::string& name) {
  for (const Dim& d : s.dims)
    if (d.is_static() && d.value < 0)
      throw Error(std::string(what) + " '" + name + "' has a negative dim in " + s.str());
}
}  // namespace

std::vector<Shape> ops::Input::infer(std::span<const Shape>) const {
  if (name.empty()) throw Error("input has an empty name; give every graph input a name");
  check_leaf_shape(shape, "input", name);
  return {shape};
}
std::vector<Shape> ops::Param::infer(std::span<const Shape>) const {
  if (name.empty()) throw Error("param has an empty name; give every param a name");
  check_leaf_shape(shape, "param", name);
  return {shape};
}
std::vector<Shape> ops::Constant::infer(std::span<const Shape>) const {
  if (!value.defined()) throw Error("constant has no data");
  return {value.shape_info()};
}

}  // namespace rlx
