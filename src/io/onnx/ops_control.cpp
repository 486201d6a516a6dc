// ONNX control flow: If (inlined when the condition is known, or given at import time through
// a graph input's value, else an IR If with both branches as subgraphs), Loop and Scan
// (unrolled at import time; their trip counts and sequence lengths must be known).
#include <limits>
#include <set>

#include "io/file_access.h"
#include "io/onnx/control_inputs.h"
#include "io/onnx/importer.h"
#include "passes/legalize.h"
#include "rlx/limits.h"

namespace rlx::onnx_io {
namespace {

using V = std::vector<Val>;

// Loop and Scan are unrolled at import time: at most Limits::max_unroll_steps iterations.
std::string raise_hint() {
  return " (raise OnnxImportOptions::limits.max_unroll_steps, or Limits::max_unroll_steps of the process defaults)";
}

const onnx::GraphProto& body_attr(const NodeCtx& c, const std::string& name) {
  const auto* a = c.attr(name);
  if (!a || a->type() != onnx::AttributeProto::GRAPH) c.fail("attribute '" + name + "' (a graph) is required");
  return a->g();
}

bool known_bool(const Val& v, bool& out) {
  if (!v.konst) return false;
  if (v.konst->numel() != 1) return false;
  out = v.konst->to_f64()[0] != 0;
  return true;
}

// A condition known at import time, or given through graph input values (a hint: the run-time
// inputs carry the same values, OnnxImportOptions::known_inputs).
bool known_or_given_bool(const Val& v, bool& out) {
  if (known_bool(v, out)) return true;
  if (!v.hint || v.hint->numel() != 1) return false;
  out = v.hint->to_f64()[0] != 0;
  return true;
}

std::string names_text(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + io::printable(n) + "'";
  return s;
}

// Why the If's condition is a run-time value and what would make it known, for the message of a
// branch that cannot be built.
std::string run_time_condition_text(const NodeCtx& c) {
  std::string s = "; the condition ('" + io::printable(c.node().input(0)) +
                  "') is only known at run time, so rlx builds both branches";
  const onnx::GraphProto* root = c.importer().root_graph();
  if (!root) return s;
  const auto all = if_conditions(*root);
  const auto it = all.find(c.node().output(0));
  if (it == all.end()) return s;
  const IfCondition& ic = it->second;
  if (ic.from_inputs && ic.reachable && !ic.inputs.empty())
    return s + ". It is computed from the value of graph input" + (ic.inputs.size() > 1 ? "s " : " ") +
           names_text(ic.inputs) + ": rlx run and rlx::OnnxModel evaluate such a condition from each run's input "
           "values and import only the taken branch; import_onnx takes the values in OnnxImportOptions::known_inputs";
  if (!ic.reachable)
    return s + ". The If is inside a branch of another If whose condition is only known at run time (or inside "
               "the body of a Loop run at run time), so no "
           "input value can select its branch at import time; the branch must import on its own";
  return s + ". It is computed from values only known while the model runs (the value of a graph input with "
         "dynamic dims or more than " + std::to_string(kMaxValueInputElements) +
         " elements, a loop value, a subgraph result or a random op), so no input value selects the branch at "
         "import time and the branch must import on its own";
}

V if_op(const NodeCtx& c) {
  c.allow_only({"then_branch", "else_branch"});
  const auto& then_b = body_attr(c, "then_branch");
  const auto& else_b = body_attr(c, "else_branch");
  Importer& im = c.importer();
  if (c.shape(0).dtype != DType::Bool)
    c.fail(std::string("the condition must be a bool tensor (ONNX If), got ") + dtype_name(c.shape(0).dtype) +
           "; compare it or Cast it to bool first");
  // Both branches are checked whether or not the condition picks one now: a model whose other
  // branch is malformed is refused on every input, as `rlx check` refuses it.
  for (const auto* b : {&then_b, &else_b}) {
    const char* which = b == &then_b ? "then_branch" : "else_branch";
    if (b->input_size() != 0) c.fail(std::string(which) + " declares inputs; If branches take none");
    if (b->output_size() != c.node().output_size())
      c.fail(std::string(which) + " has " + std::to_string(b->output_size()) + " outputs, the If node " +
             std::to_string(c.node().output_size()));
  }
  for (int i = 0; i < then_b.output_size(); ++i) {
    const int32_t te = then_b.output(i).type().tensor_type().elem_type(), ee = else_b.output(i).type().tensor_type().elem_type();
    if (te != 0 && ee != 0 && te != ee)
      c.fail("output " + std::to_string(i) + " has element type " + std::to_string(te) + " in then_branch and " +
             std::to_string(ee) + " in else_branch; both branches must give the same types");
  }
  std::vector<std::string> caps;
  std::set<std::string> seen;
  for (const auto* b : {&then_b, &else_b})
    for (const auto& name : Importer::free_names(*b)) {
      Val* v = im.lookup(name);
      if (!v) c.fail("a branch reads '" + name + "', which is not defined");
      if (v->konst || v->dims) continue;  // known values are embedded in the branch
      if (seen.insert(name).second) caps.push_back(name);
    }
  bool cond = false;
  if (known_or_given_bool(c.in(0), cond)) return im.inline_body(cond ? then_b : else_b, {}, c.where());
  // Run-time condition: both branches become subgraphs reading the same captured values.
  auto build = [&](const onnx::GraphProto& body, const char* which) {
    try {
      return im.build_subgraph(body, {}, caps, c.where() + " " + which);
    } catch (const OnnxDimsError& e) {
      throw OnnxDimsError(c.where() + ": " + which + " cannot be built: " + e.what() + run_time_condition_text(c),
                          e.node());
    } catch (const Error& e) {
      throw Error(c.where() + ": " + which + " cannot be built: " + e.what() + run_time_condition_text(c));
    }
  };
  auto then_g = build(then_b, "then_branch");
  auto else_g = build(else_b, "else_branch");
  std::vector<Value> ins{c.value(0)};
  for (const auto& name : caps) ins.push_back(im.materialize(*im.lookup(name)));
  ops::If op;
  op.then_branch = then_g;
  op.else_branch = else_g;
  V outs;
  for (Value v : c.g().apply_multi(op, ins)) outs.push_back(c.out(v));
  return outs;
}

// Stacks per-iteration values along a new axis.
Value stack(const NodeCtx& c, const std::vector<Value>& items, int64_t axis, bool reverse) {
  auto& g = c.g();
  std::vector<Value> parts;
  for (size_t i = 0; i < items.size(); ++i) {
    Value v = items[reverse ? items.size() - 1 - i : i];
    auto dims = g.shape(v).dims;
    const int64_t a = normalize_axis(axis, static_cast<int64_t>(dims.size()) + 1, "scan output axis");
    dims.insert(dims.begin() + a, Dim(1));
    parts.push_back(g.reshape(v, dims));
  }
  const int64_t r = g.shape(parts[0]).rank();
  return g.concat(parts, normalize_axis(axis, r, "scan output axis"));
}

// A one-element value as a 0-d one (ONNX allows [1] for a Loop's trip count and condition).
Value as_scalar(const NodeCtx& c, Graph& g, Value v, DType dt, const std::string& what) {
  const Shape& s = g.shape(v);
  if (!s.is_static() || s.numel() != 1 || s.dtype != dt)
    c.fail("the " + what + " must be one " + dtype_name(dt) + " value, got " + s.str());
  return s.rank() == 0 ? v : g.reshape(v, {});
}

// A Loop whose trip count or condition is only known at run time (or that runs more iterations
// than rlx unrolls): an IR While over (iteration, keep going, trip count, carried values...,
// captured outer values...). cond: keep going and iteration < trip count; body: the ONNX body on
// (iteration, keep going, carried...) giving (iteration + 1, its condition, the trip count,
// its carried results, the captured values unchanged). The CPU runs it (kernels_control.cpp),
// bounded by Limits::max_loop_iterations when there is no trip count.
V loop_at_run_time(const NodeCtx& c, const onnx::GraphProto& body, size_t n_carried, size_t n_scan) {
  Importer& im = c.importer();
  Graph& g = c.g();
  if (n_scan > 0)
    c.fail("the trip count or the condition is only known at run time (or the loop runs more than " +
           std::to_string(active_limits().max_unroll_steps) + " iterations), and the body has " +
           std::to_string(n_scan) +
           " scan outputs whose length would only be known at run time; rlx runs such a Loop only without scan "
           "outputs (give the trip count and condition at import: OnnxImportOptions::known_inputs; rlx run and "
           "rlx::OnnxModel do when they come from graph inputs of at most " +
           std::to_string(kMaxValueInputElements) + " elements)");
  std::vector<Value> ins;
  ins.push_back(g.constant(Tensor::scalar_i64(0)));
  ins.push_back(c.present(1) ? as_scalar(c, g, c.value(1), DType::Bool, "loop condition (input 1)")
                             : g.constant(Tensor::boolean({}, std::vector<uint8_t>{1})));
  ins.push_back(c.present(0) ? as_scalar(c, g, c.value(0), DType::I64, "trip count (input 0)")
                             : g.constant(Tensor::scalar_i64(std::numeric_limits<int64_t>::max())));
  std::vector<Shape> formal{Shape({}, DType::I64), Shape({}, DType::Bool)};
  for (size_t i = 0; i < n_carried; ++i) {
    ins.push_back(c.value(i + 2));
    formal.push_back(g.shape(ins.back()));
  }
  std::vector<std::string> caps;
  for (const auto& name : Importer::free_names(body)) {
    Val* v = im.lookup(name);
    if (!v) c.fail("the body reads '" + name + "', which is not defined");
    if (v->konst || v->dims) continue;  // known values are embedded in the body
    caps.push_back(name);
    ins.push_back(im.materialize(*v));
  }
  std::shared_ptr<Graph> onnx_body;
  try {
    onnx_body = im.build_subgraph(body, formal, caps, c.where() + " body");
  } catch (const OnnxDimsError& e) {
    throw OnnxDimsError(c.where() + ": the body cannot be built: " + e.what(), e.node());
  } catch (const Error& e) {
    c.fail(std::string("the body cannot be built (it runs as a loop at run time, as its trip count or condition is "
                       "only known then): ") + e.what());
  }
  std::vector<Shape> carried;
  for (Value v : ins) carried.push_back(g.shape(v));
  auto cond_g = std::make_shared<Graph>();
  auto body_g = std::make_shared<Graph>();
  std::vector<Value> cin, bin;
  for (size_t k = 0; k < carried.size(); ++k) {
    cin.push_back(cond_g->input("carried" + std::to_string(k), carried[k]));
    bin.push_back(body_g->input("carried" + std::to_string(k), carried[k]));
  }
  cond_g->add_output(cond_g->binary(BinaryKind::And, cin[1], cond_g->compare(CompareKind::Lt, cin[0], cin[2])));
  std::vector<Value> args{bin[0], bin[1]};
  for (size_t k = 3; k < bin.size(); ++k) args.push_back(bin[k]);
  const auto res = passes::inline_subgraph(*body_g, *onnx_body, args);
  if (!res) c.fail("the body holds a weight rlx cannot embed in a loop body");
  std::vector<Value> outs{body_g->add(bin[0], body_g->constant(Tensor::scalar_i64(1)))};
  const Shape& cs = body_g->shape((*res)[0]);
  if (cs.dtype != DType::Bool || !cs.is_static() || cs.numel() != 1)
    c.fail("the body's condition output must be one bool value, got " + cs.str());
  outs.push_back(cs.rank() == 0 ? (*res)[0] : body_g->reshape((*res)[0], {}));
  outs.push_back(bin[2]);
  for (size_t i = 0; i < n_carried; ++i) {
    Value v = (*res)[1 + i];
    if (body_g->shape(v) != carried[3 + i])
      c.fail("loop-carried value " + std::to_string(i) + " ('" + io::printable(body.input(static_cast<int>(2 + i)).name()) +
             "') enters the body as " + carried[3 + i].str() + " but the body returns " + body_g->shape(v).str() +
             "; a Loop run at run time must keep each carried value's dtype and shape");
    outs.push_back(v);
  }
  for (size_t k = 3 + n_carried; k < bin.size(); ++k) outs.push_back(bin[k]);
  body_g->set_outputs(outs);
  ops::While op;
  op.cond = cond_g;
  op.body = body_g;
  op.max_iterations = 0;
  const std::vector<Value> w = g.apply_multi(op, ins);
  V result;
  for (size_t i = 0; i < n_carried; ++i) result.push_back(c.out(w[3 + i]));
  return result;
}

bool known_or_given(const NodeCtx& c, size_t i) {
  if (!c.present(i)) return true;
  const Val& v = c.in(i);
  return v.konst || v.hint;
}

V loop(const NodeCtx& c) {
  c.allow_only({"body"});
  const auto& body = body_attr(c, "body");
  Importer& im = c.importer();
  const int64_t max_unroll = active_limits().max_unroll_steps;
  const bool known = known_or_given(c, 0) && known_or_given(c, 1);
  int64_t trips = max_unroll + 1;
  if (known && c.present(0)) trips = c.scalar_input(0, "trip count (rlx unrolls Loop at import time)");
  bool cond = true;
  if (known && c.present(1)) cond = c.scalar_input(1, "loop condition (rlx unrolls Loop at import time)") != 0;
  const size_t n_carried = c.num_inputs() >= 2 ? c.num_inputs() - 2 : 0;
  V carried;
  for (size_t i = 0; i < n_carried; ++i) carried.push_back(c.in(i + 2));
  if (static_cast<size_t>(body.output_size()) < 1 + n_carried)
    c.fail("the body has " + std::to_string(body.output_size()) + " outputs; it needs at least 1 + " +
           std::to_string(n_carried) + " (the condition and every loop-carried value)");
  if (body.input_size() != static_cast<int>(2 + n_carried))
    c.fail("the body has " + std::to_string(body.input_size()) + " inputs; it needs 2 + " + std::to_string(n_carried) +
           " (iteration number, condition and every loop-carried value)");
  const size_t n_scan = static_cast<size_t>(body.output_size()) - 1 - n_carried;
  if (c.num_outputs() > n_carried + n_scan)
    c.fail("the node has " + std::to_string(c.num_outputs()) + " outputs but the body gives " +
           std::to_string(n_carried + n_scan));
  std::vector<std::vector<Value>> scans(n_scan);
  // Unrolled when the trip count and condition are known and the loop is short; else (without
  // scan outputs) a While the CPU runs.
  if (!known) return loop_at_run_time(c, body, n_carried, n_scan);
  if (n_scan == 0 && cond && c.present(0) && trips > max_unroll) return loop_at_run_time(c, body, n_carried, n_scan);
  int64_t it = 0;
  for (; it < trips && cond; ++it) {
    if (it >= max_unroll) {
      if (n_scan == 0) return loop_at_run_time(c, body, n_carried, n_scan);
      c.fail("more than " + std::to_string(max_unroll) + " iterations to unroll at import time" + raise_hint());
    }
    V args{Val::known(Tensor::scalar_i64(it)), Val::known(Tensor::boolean({}, std::vector<uint8_t>{1}))};
    args.insert(args.end(), carried.begin(), carried.end());
    V outs = im.inline_body(body, args, c.where() + " body");
    if (!known_bool(outs[0], cond)) {
      if (n_scan == 0) return loop_at_run_time(c, body, n_carried, n_scan);
      c.fail("the body's condition output depends on run-time values, and the body has scan outputs (their "
             "length would only be known at run time)");
    }
    for (size_t i = 0; i < n_carried; ++i) carried[i] = outs[1 + i];
    for (size_t j = 0; j < n_scan; ++j) scans[j].push_back(im.materialize(outs[1 + n_carried + j]));
  }
  V result = carried;
  for (auto& s : scans) {
    if (s.empty()) c.fail("a scan output of a loop that runs zero times has no known shape");
    result.push_back(c.out(stack(c, s, 0, false)));
  }
  return result;
}

V scan(const NodeCtx& c) {
  c.allow_only({"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                "scan_output_directions"});
  if (c.opset() < 9) c.fail("Scan before opset 9 (with a batch axis) is not supported");
  const auto& body = body_attr(c, "body");
  Importer& im = c.importer();
  auto& g = c.g();
  const auto m = static_cast<size_t>(c.i("num_scan_inputs", 0));
  if (m == 0 || m > c.num_inputs()) c.fail("num_scan_inputs must be in [1, inputs]");
  const size_t n = c.num_inputs() - m;
  if (static_cast<size_t>(body.output_size()) < n)
    c.fail("the body has " + std::to_string(body.output_size()) + " outputs; it needs at least the " + std::to_string(n) +
           " state values");
  if (body.input_size() != static_cast<int>(n + m))
    c.fail("the body has " + std::to_string(body.input_size()) + " inputs; it needs " + std::to_string(n + m));
  const auto in_axes = c.ints("scan_input_axes", std::vector<int64_t>(m, 0));
  const auto in_dirs = c.ints("scan_input_directions", std::vector<int64_t>(m, 0));
  const size_t k = static_cast<size_t>(body.output_size()) - n;
  const auto out_axes = c.ints("scan_output_axes", std::vector<int64_t>(k, 0));
  const auto out_dirs = c.ints("scan_output_directions", std::vector<int64_t>(k, 0));
  if (in_axes.size() != m || in_dirs.size() != m || out_axes.size() != k || out_dirs.size() != k)
    c.fail("scan axes/directions must have one entry per scan input/output");
  for (const auto* dirs : {&in_dirs, &out_dirs})
    for (int64_t d : *dirs)
      if (d != 0 && d != 1)
        c.fail(std::string(dirs == &in_dirs ? "scan_input_directions" : "scan_output_directions") + " holds " +
               std::to_string(d) + "; a direction is 0 (forward) or 1 (reverse)");
  int64_t len = -1;
  std::vector<int64_t> axes(m);
  for (size_t j = 0; j < m; ++j) {
    const Shape& s = c.shape(n + j);
    axes[j] = normalize_axis(in_axes[j], s.rank(), "scan_input_axes");
    const Dim& d = s.dims[static_cast<size_t>(axes[j])];
    if (d.is_symbolic())
      c.fail("the sequence length (axis " + std::to_string(axes[j]) + " of scan input " + std::to_string(j) +
             ") is the symbolic dim '" + io::printable(d.sym) + "'; rlx unrolls Scan at import time and needs its value");
    if (len >= 0 && len != d.value) c.fail("scan inputs have different sequence lengths");
    len = d.value;
  }
  const int64_t max_unroll = active_limits().max_unroll_steps;
  if (len > max_unroll)
    c.fail("the sequence has " + std::to_string(len) + " steps, more than the " + std::to_string(max_unroll) +
           " rlx unrolls at import time" + raise_hint());
  V state;
  for (size_t i = 0; i < n; ++i) state.push_back(c.in(i));
  std::vector<std::vector<Value>> outs(k);
  for (int64_t t = 0; t < len; ++t) {
    V args = state;
    for (size_t j = 0; j < m; ++j) {
      const int64_t pos = in_dirs[j] ? len - 1 - t : t;
      Value x = g.narrow(c.value(n + j), axes[j], pos, 1);
      auto dims = g.shape(x).dims;
      dims.erase(dims.begin() + axes[j]);
      args.push_back(c.out(g.reshape(x, dims)));
    }
    V res = im.inline_body(body, args, c.where() + " body");
    for (size_t i = 0; i < n; ++i) state[i] = res[i];
    for (size_t j = 0; j < k; ++j) outs[j].push_back(im.materialize(res[n + j]));
  }
  V result = state;
  for (size_t j = 0; j < k; ++j) {
    if (outs[j].empty()) c.fail("a scan of length 0 has outputs of unknown shape");
    result.push_back(c.out(stack(c, outs[j], out_axes[j], out_dirs[j] != 0)));
  }
  return result;
}

}  // namespace

void register_control(ConverterTable& t) {
  t["If"] = if_op;
  t["Loop"] = loop;
  t["Scan"] = scan;
}

}  // namespace rlx::onnx_io
