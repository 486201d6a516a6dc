#include "backends/cpu/executor.h"

#include <atomic>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <cstdlib>

#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/kernels.h"
#include "runtime/device_profile.h"

namespace rlx::cpu {
namespace {

std::atomic<bool> g_profile_on{false};
std::atomic<uint64_t> g_copied_bytes{0};
StepProfile g_profile;  // op kind -> wall time of its steps
StepTable g_steps;      // step -> wall time, for the slowest steps

// The --profile row of a step: its op kind; convolutions also by window, stride and kind
// (pointwise, depthwise, grouped), where CNNs spend their time: "conv 3x3 s2 depthwise".
std::string profile_kind(const Node& n, const std::vector<Tensor>& ins) {
  std::string kind(op_name(n.op));
  const auto* conv = std::get_if<ops::Conv>(&n.op);
  if (!conv || ins.size() < 2 || ins[1].rank() < 3) return kind;
  const auto& w = ins[1].shape();
  std::string window;
  for (size_t i = 2; i < w.size(); ++i) window += (i > 2 ? "x" : "") + std::to_string(w[i]);
  kind += " " + window;
  const bool strided = std::any_of(conv->stride.begin(), conv->stride.end(), [](int64_t s) { return s != 1; });
  if (strided) kind += " s" + std::to_string(conv->stride.empty() ? 1 : conv->stride[0]);
  if (conv->groups > 1) kind += w[1] == 1 ? " depthwise" : " grouped";
  return kind;
}
// Multiply-adds of a conv or matrix product step (0 for other ops): the rate column of the
// slowest steps.
double step_macs(const Node& n, const std::vector<Tensor>& ins, const std::vector<Tensor>& outs) {
  if (outs.empty() || ins.size() < 2) return 0;
  const double out = static_cast<double>(outs[0].numel());
  if (std::holds_alternative<ops::Conv>(n.op) && ins[1].rank() >= 3) {
    double per = 1;
    for (size_t i = 1; i < ins[1].shape().size(); ++i) per *= static_cast<double>(ins[1].shape()[i]);
    return out * per;
  }
  if ((std::holds_alternative<ops::MatMul>(n.op) || std::holds_alternative<ops::FusedMatMulBiasAct>(n.op)) &&
      ins[0].rank() >= 1)
    return out * static_cast<double>(ins[0].shape().back());
  if (const auto* dq = std::get_if<ops::DequantMatMul>(&n.op)) return out * static_cast<double>(dq->k);
  return 0;
}

[[maybe_unused]] const bool g_profile_registered = register_device_profile(
    Device::Cpu, {[] { set_step_profile(true); }, [] { return g_profile.take("steps"); },
                  [](int top) { return g_steps.take(top); }});

// Base pointer of every leaf's bytes for one run (nullptr for non-leaves), checking that each
// bound tensor matches its node. Leaf bytes are only read, except those of the written inputs
// (MemoryPlan::written_inputs), whose tensors Executor::run made its own or was given (donated),
// so dropping const to build views over them is safe.
std::vector<uint8_t*> leaf_bases(const Graph& g, const std::unordered_map<NodeId, Tensor>& leaves) {
  std::vector<uint8_t*> base(g.size(), nullptr);
  for (const Node& n : g.nodes()) {
    const Tensor* t = nullptr;
    if (const auto* c = std::get_if<ops::Constant>(&n.op)) {
      t = &c->value;
    } else if (std::holds_alternative<ops::Input>(n.op) || std::holds_alternative<ops::Param>(n.op)) {
      auto it = leaves.find(n.id);
      if (it == leaves.end()) throw Error(node_label(n) + ": no value was bound");
      t = &it->second;
      const Shape& s = n.outputs[0];
      if (t->dtype() != s.dtype || t->shape() != s.concrete())
        throw Error(node_label(n) + ": the bound tensor is " + t->shape_info().str() + ", expected " + s.str());
    } else {
      continue;
    }
    base[n.id] = static_cast<uint8_t*>(const_cast<void*>(t->raw()));
  }
  return base;
}

}  // namespace

uint64_t copied_bytes() { return g_copied_bytes.load(std::memory_order_relaxed); }
void note_copied_bytes(size_t n) { g_copied_bytes.fetch_add(n, std::memory_order_relaxed); }

void set_step_profile(bool on) { g_profile_on.store(on, std::memory_order_relaxed); }
bool step_profile_on() { return g_profile_on.load(std::memory_order_relaxed); }

Executor::Executor(Graph g, const plan::PlanOptions& options)
    : graph_(std::move(g)), options_(options), schedule_(plan::build_schedule(graph_, options_)) {
  const int64_t align = options_.alignment;
  const int64_t bytes = schedule_.memory.arena_bytes;
  if (bytes > options_.limits.max_tensor_bytes)
    throw Error("the memory plan needs an arena of " + std::to_string(bytes) + " bytes, more than the size limit of " +
                std::to_string(options_.limits.max_tensor_bytes) +
                " (rlx::Limits::max_tensor_bytes; raise it through CompileOptions::limits if intended)");
  try {
    arena_storage_.reset(new uint8_t[static_cast<size_t>(checked_add(bytes, align, "arena size"))]());
  } catch (const std::bad_alloc&) {
    throw Error("out of memory allocating the CPU arena of " + std::to_string(bytes) +
                " bytes (intermediate values of the graph); use smaller inputs or free memory");
  }
  plan_conv_epilogues();
  // Convs and DequantMatMuls whose weights are a Param or a Constant keep their packed form
  // across runs.
  weight_cache_.resize(schedule_.steps.size());
  for (size_t i = 0; i < schedule_.steps.size(); ++i) {
    const plan::Step& st = schedule_.steps[i];
    const bool takes = std::holds_alternative<ops::Conv>(st.op) || std::holds_alternative<ops::DequantMatMul>(st.op);
    if (!takes || st.in.size() < 2) continue;
    const plan::Location& loc = st.in[1].loc;
    bool fixed = loc.kind == plan::Location::Kind::Weights;
    if (loc.kind == plan::Location::Kind::Leaf) {
      const auto& op = graph_.node(loc.leaf).op;
      fixed = std::holds_alternative<ops::Param>(op) || std::holds_alternative<ops::Constant>(op);
    }
    if (fixed) weight_cache_[i] = std::make_unique<StepCache>();
  }
  const auto base = reinterpret_cast<uintptr_t>(arena_storage_.get());
  const auto aligned = (base + static_cast<uintptr_t>(align) - 1) / static_cast<uintptr_t>(align) * static_cast<uintptr_t>(align);
  arena_ = arena_storage_.get() + (aligned - base);
}

void Executor::plan_conv_epilogues() {
  const auto& steps = schedule_.steps;
  fuse_next_.assign(steps.size(), false);
  // Reads of each value (by the steps and as a graph output), counting views of it as reads.
  std::map<Value, int64_t> reads;
  auto note = [&](const plan::TensorRef& r, bool view_only) {
    if (!view_only) ++reads[r.value];
    if (r.loc.is_view && !(r.loc.root == r.value)) ++reads[r.loc.root];
  };
  for (const plan::Step& st : steps) {
    for (const plan::TensorRef& r : st.in) note(r, false);
    for (const plan::TensorRef& r : st.out) note(r, true);
  }
  for (const plan::TensorRef& r : schedule_.outputs) {
    note(r, false);
    ++reads[r.value];  // a graph output is never fused away
  }
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const plan::Step& conv = steps[i];
    const plan::Step& next = steps[i + 1];
    if (!std::holds_alternative<ops::Conv>(conv.op) || conv.out.size() != 1) continue;
    const Value v = conv.out[0].value;
    int64_t by_next = 0;
    for (const plan::TensorRef& r : next.in) by_next += r.value == v ? 1 : 0;
    if (by_next == 0 || reads[v] != by_next) continue;
    fuse_next_[i] = conv_epilogue_fusable(conv, next);
  }
}

std::vector<Tensor> Executor::run_subgraph(const Graph& sub, const std::vector<Tensor>& inputs,
                                           const std::map<std::string, Tensor>* outer_params) {
  auto& ex = sub_executors_[&sub];
  if (!ex) {
    ex = std::make_unique<Executor>(sub, options_);
    ex->nested_ = true;
    ex->pack_quant_ = pack_quant_;
  }
  ex->set_params_generation(params_generation_);
  const Graph& sg = ex->graph();
  std::unordered_map<NodeId, Tensor> leaves;
  auto in_nodes = sg.input_nodes();
  if (in_nodes.size() != inputs.size())
    throw Error("subgraph expects " + std::to_string(in_nodes.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < in_nodes.size(); ++i) leaves[in_nodes[i]] = inputs[i];
  for (NodeId p : sg.param_nodes()) {
    const auto& name = std::get<ops::Param>(sg.node(p).op).name;
    auto it = sg.weights().find(name);
    if (it != sg.weights().end()) { leaves[p] = it->second; continue; }
    if (outer_params) {
      auto jt = outer_params->find(name);
      if (jt != outer_params->end()) { leaves[p] = jt->second; continue; }
    }
    throw Error("subgraph param '" + name + "' has no value (neither in the subgraph's weights nor the graph's params)");
  }
  std::vector<size_t> all(sg.outputs().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return ex->run(leaves, all, outer_params);
}

std::vector<Tensor> Executor::run(const std::unordered_map<NodeId, Tensor>& given, const std::vector<size_t>& which,
                                  const std::map<std::string, Tensor>* outer_params, const std::set<NodeId>* donated) {
  for (size_t k : which)
    if (k >= graph_.outputs().size())
      throw Error("output index " + std::to_string(k) + " is out of range (the graph has " +
                  std::to_string(graph_.outputs().size()) + " outputs)");
  // Inputs a step writes over: donated ones as they are, the caller's copied first (its tensor
  // stays unchanged).
  const std::vector<NodeId>& written = schedule_.memory.written_inputs;
  std::unordered_map<NodeId, Tensor> own;
  if (!written.empty()) {
    own = given;  // copies share storage
    for (NodeId id : written) {
      auto it = own.find(id);
      if (it == own.end() || (donated && donated->count(id))) continue;
      it->second = it->second.clone();
      note_copied_bytes(it->second.nbytes());
    }
  }
  const std::unordered_map<NodeId, Tensor>& leaves = written.empty() ? given : own;
  const std::vector<uint8_t*> leaf_base = leaf_bases(graph_, leaves);
  auto view = [&](const plan::TensorRef& r) {
    uint8_t* base = r.loc.kind == plan::Location::Kind::Leaf ? leaf_base[r.loc.leaf] : arena_;
    return Tensor::borrow(r.dtype, r.dims, base == nullptr ? nullptr : base + r.loc.offset);
  };
  SubgraphRunner runner = [this, outer_params](const Graph& sub, const std::vector<Tensor>& ins) {
    return run_subgraph(sub, ins, outer_params);
  };
  std::vector<Tensor> ins, outs;
  const bool profile = !nested_ && step_profile_on();
  std::vector<Tensor> next_ins, next_outs;
  const bool fuse = conv_fusion_ && !hook_;  // a hook sees every step's values: no fusion then
  for (size_t si = 0; si < schedule_.steps.size(); ++si) {
    const plan::Step& st = schedule_.steps[si];
    const Node& n = graph_.node(st.node);
    ins.clear();
    outs.clear();
    for (const plan::TensorRef& r : st.in) ins.push_back(view(r));
    for (const plan::TensorRef& r : st.out) outs.push_back(view(r));
    KernelContext ctx{n, ins, outs, runner, st, options_.limits};
    ctx.weight_cache = weight_cache_[si].get();
    if (!pack_quant_ && std::holds_alternative<ops::DequantMatMul>(st.op)) ctx.weight_cache = nullptr;
    ctx.params_generation = params_generation_;
    // A conv whose only reader is the next elementwise step runs that step as its epilogue.
    std::optional<ConvEpilogue> epilogue;
    const plan::Step* fused = nullptr;
    if (fuse && fuse_next_[si]) {
      fused = &schedule_.steps[si + 1];
      next_ins.clear();
      next_outs.clear();
      for (const plan::TensorRef& r : fused->in) next_ins.push_back(view(r));
      for (const plan::TensorRef& r : fused->out) next_outs.push_back(view(r));
      epilogue.emplace(*fused, next_ins, next_outs[0], st.out[0].value);
      ctx.epilogue = &*epilogue;
      ++si;
    }
    const auto t0 = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    try {
      std::visit([&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, ops::Input> || std::is_same_v<T, ops::Param> ||
                      std::is_same_v<T, ops::Constant>) {
          throw Error("a leaf node was scheduled as a step");
        } else {
          kernel(o, ctx);
        }
      }, n.op);
    } catch (const Error& e) {
      throw Error(node_label(n) + (fused ? " (with " + node_label(graph_.node(fused->node)) + " as its epilogue)" : "") +
                  ": " + e.what());
    }
    if (profile) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::string kind = fused ? profile_kind(n, ins) + "+" + op_name(fused->op) : profile_kind(n, ins);
      g_profile.add(kind, ms);
      std::string what = kind + " -> " + (outs.empty() ? std::string("()") : outs[0].shape_info().str());
      if (!ins.empty()) what += " from " + ins[0].shape_info().str();
      what += " [node " + std::to_string(n.id) + "]";
      g_steps.add(this, si - (fused ? 1 : 0), what, ms, step_macs(n, ins, outs));
    }
    if (hook_) hook_(st, ins, outs);
  }
  std::vector<Tensor> result;
  result.reserve(which.size());
  std::set<NodeId> handed;  // written inputs already returned as themselves
  for (size_t k : which) {
    const plan::TensorRef& r = schedule_.outputs[k];
    if (r.loc.kind == plan::Location::Kind::Leaf && r.loc.offset == 0 &&
        std::find(written.begin(), written.end(), r.loc.leaf) != written.end() && handed.insert(r.loc.leaf).second) {
      const Tensor& t = leaves.at(r.loc.leaf);
      if (t.dtype() == r.dtype && t.shape() == r.dims) {
        result.push_back(t);
        continue;
      }
    }
    result.push_back(view(r).clone());
    note_copied_bytes(result.back().nbytes());
  }
  return result;
}

}  // namespace rlx::cpu
