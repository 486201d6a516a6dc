// What each If condition and Loop trip count of an ONNX model is computed from (see
// control_inputs.h): a walk back from the value through the nodes that produce it, scope by
// scope (a body reads the values of its enclosing graphs).
#include "io/onnx/control_inputs.h"

#include <algorithm>
#include <utility>

namespace rlx::onnx_io {
namespace {

// Ops whose result must not be taken as known from their operands.
const std::set<std::string> kRandomOps = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                          "RandomUniformLike", "Multinomial", "Bernoulli"};
// Ops that read only the shape of their operand (input shapes are bound when a model is
// specialized, so they add no value dependency).
const std::set<std::string> kShapeOnlyOps = {"Shape", "Size"};

bool has_body(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.has_g() || a.graphs_size() > 0) return true;
  return false;
}

// An input declared with a static shape of at most kMaxValueInputElements elements: a value
// a model can be specialized on (a sample rate, a flag). Larger or dynamic inputs are run-time
// data.
bool small_static(const onnx::ValueInfoProto& vi) {
  if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return false;
  int64_t n = 1;
  for (const auto& d : vi.type().tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return false;
    n *= d.dim_value();
    if (n > kMaxValueInputElements) return false;
  }
  return true;
}

struct Deps {
  std::set<std::string> inputs;  // top-level inputs whose values are read
  bool opaque = false;           // also reads something no import-time value can give
};

struct Scope {
  int id = 0;
  const Scope* parent = nullptr;
  std::map<std::string, const onnx::NodeProto*> producer;
  std::set<std::string> formal;  // body inputs (iteration number, carried values, scan slices)
  std::set<std::string> inits;
  std::set<std::string> graph_inputs;  // top level only
};

class Walker {
 public:
  Walker(const onnx::GraphProto& main, bool unroll_loops) : main_(main), unroll_loops_(unroll_loops) {}

  void run() {
    Scope top = scope_of(main_, nullptr);
    for (const auto& vi : main_.input())
      if (!top.inits.count(vi.name()) && small_static(vi)) top.graph_inputs.insert(vi.name());
    walk(top, main_, true);
  }
  const std::map<std::string, IfCondition>& ifs() const { return out_; }
  const std::set<std::string>& loop_inputs() const { return loop_inputs_; }

 private:
  Scope scope_of(const onnx::GraphProto& g, const Scope* parent) {
    Scope s;
    s.id = next_id_++;
    s.parent = parent;
    for (const auto& n : g.node())
      for (const auto& o : n.output())
        if (!o.empty()) s.producer.emplace(o, &n);
    for (const auto& t : g.initializer()) s.inits.insert(t.name());
    if (parent)
      for (const auto& vi : g.input()) s.formal.insert(vi.name());
    return s;
  }

  Deps resolve(const Scope& s, const std::string& name) {
    const auto key = std::make_pair(s.id, name);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    if (!visiting_.insert(key).second) return Deps{{}, true};  // a cycle: reported by the import
    Deps d;
    if (auto p = s.producer.find(name); p != s.producer.end()) {
      const onnx::NodeProto& n = *p->second;
      if (kShapeOnlyOps.count(n.op_type())) {
        // shape only
      } else if (kRandomOps.count(n.op_type()) || has_body(n)) {
        d.opaque = true;
      } else {
        for (const auto& in : n.input()) {
          if (in.empty()) continue;
          Deps sub = resolve(s, in);
          d.inputs.insert(sub.inputs.begin(), sub.inputs.end());
          d.opaque = d.opaque || sub.opaque;
        }
      }
    } else if (s.inits.count(name)) {
      // a constant
    } else if (s.formal.count(name)) {
      d.opaque = true;
    } else if (s.graph_inputs.count(name)) {
      d.inputs.insert(name);
    } else if (!s.parent) {
      d.opaque = true;  // a large or dynamic graph input, or undefined (the import reports that)
    } else {
      d = resolve(*s.parent, name);
    }
    visiting_.erase(key);
    memo_.emplace(key, d);
    return d;
  }

  std::vector<std::string> in_input_order(const std::set<std::string>& names) const {
    std::vector<std::string> v;
    for (const auto& vi : main_.input())
      if (names.count(vi.name()) && std::find(v.begin(), v.end(), vi.name()) == v.end()) v.push_back(vi.name());
    return v;
  }

  void walk(const Scope& s, const onnx::GraphProto& g, bool reachable) {
    for (const auto& n : g.node()) {
      bool bodies_reachable = reachable;
      if (n.op_type() == "If" && (n.domain().empty() || n.domain() == "ai.onnx") && n.output_size() > 0 &&
          n.input_size() > 0) {
        const Deps d = resolve(s, n.input(0));
        IfCondition c;
        c.inputs = in_input_order(d.inputs);
        c.from_inputs = !d.opaque;
        c.reachable = reachable;
        out_.emplace(n.output(0), c);
        bodies_reachable = reachable && c.from_inputs;  // else the branches are built on their own
      } else if (n.op_type() == "Loop" && (n.domain().empty() || n.domain() == "ai.onnx")) {
        // Trip count (input 0) and condition (input 1). A Loop with scan outputs is unrolled, so
        // both must be known at import: their inputs are value inputs. Without scan outputs a
        // run-time trip count runs as a While, except for devices that run none (unroll_loops).
        Deps d;
        for (int k = 0; k < 2 && k < n.input_size(); ++k) {
          if (n.input(k).empty()) continue;
          Deps sub = resolve(s, n.input(k));
          d.inputs.insert(sub.inputs.begin(), sub.inputs.end());
          d.opaque = d.opaque || sub.opaque;
        }
        const onnx::GraphProto* body = nullptr;
        for (const auto& a : n.attribute())
          if (a.name() == "body" && a.has_g()) body = &a.g();
        const int carried = std::max(0, n.input_size() - 2);
        const bool has_scan = body && body->output_size() > 1 + carried;
        const bool unrolled = has_scan || unroll_loops_;
        if (reachable && unrolled && !d.opaque) loop_inputs_.insert(d.inputs.begin(), d.inputs.end());
        bodies_reachable = reachable && !d.opaque && (unrolled || d.inputs.empty());
      }
      for (const auto& a : n.attribute()) {
        if (a.has_g()) walk_body(s, a.g(), bodies_reachable);
        for (const auto& sub : a.graphs()) walk_body(s, sub, bodies_reachable);
      }
    }
  }

  void walk_body(const Scope& parent, const onnx::GraphProto& body, bool reachable) {
    const Scope child = scope_of(body, &parent);
    walk(child, body, reachable);
  }

  const onnx::GraphProto& main_;
  const bool unroll_loops_;
  int next_id_ = 0;
  std::map<std::pair<int, std::string>, Deps> memo_;
  std::set<std::pair<int, std::string>> visiting_;
  std::map<std::string, IfCondition> out_;
  std::set<std::string> loop_inputs_;
};

}  // namespace

std::map<std::string, IfCondition> if_conditions(const onnx::GraphProto& main) {
  Walker w(main, false);
  w.run();
  return w.ifs();
}

std::vector<std::string> value_inputs(const onnx::GraphProto& main, bool unroll_loops) {
  Walker w(main, unroll_loops);
  w.run();
  std::set<std::string> names = w.loop_inputs();
  for (const auto& [out, c] : w.ifs())
    if (c.reachable && c.from_inputs) names.insert(c.inputs.begin(), c.inputs.end());
  std::vector<std::string> v;
  for (const auto& vi : main.input())
    if (names.count(vi.name()) && std::find(v.begin(), v.end(), vi.name()) == v.end()) v.push_back(vi.name());
  return v;
}

}  // namespace rlx::onnx_io
