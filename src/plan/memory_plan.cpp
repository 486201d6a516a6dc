#include "plan/memory_plan.h"

#include "rlx/limits.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <utility>

namespace rlx::plan {
namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max();

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Byte offset of a view node's output within its input (0 for Reshape / StopGradient).
int64_t view_offset(const Graph& g, const Node& n) {
  if (const auto* nr = std::get_if<ops::Narrow>(&n.op)) {
    const Shape& in = g.shape(n.inputs[0]);
    const int64_t ax = normalize_axis(nr->axis, in.rank(), "narrow");
    const auto dims = in.concrete();
    const int64_t start = nr->start < 0 ? nr->start + dims[static_cast<size_t>(ax)] : nr->start;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(ax) + 1; d < dims.size(); ++d) inner *= dims[d];
    return start * inner * static_cast<int64_t>(dtype_size(in.dtype));
  }
  return 0;
}

// True when output 0 of `n` may overwrite input `j` as far as the op's CPU kernel goes: it
// reads element i of every operand before writing element i (checked kernel by kernel).
bool kernel_allows_in_place(const Graph& g, const Node& n, size_t j) {
  return std::visit([&](const auto& op) {
    using T = std::decay_t<decltype(op)>;
    if constexpr (std::is_same_v<T, ops::Binary> || std::is_same_v<T, ops::Compare> ||
                  std::is_same_v<T, ops::Activation> || std::is_same_v<T, ops::ElementwiseRegion>) {
      return true;
    } else if constexpr (std::is_same_v<T, ops::Where>) {
      // A broadcast condition makes the kernel copy whole rows of a or b (memcpy, which must
      // not overlap its destination); a full-shape condition selects element by element.
      return j != 0 && g.shape(n.inputs[0]).dims == n.outputs[0].dims;
    } else {
      return false;
    }
  }, n.op);
}

struct Root {
  bool leaf = false;
  Value value;           // the value owning the bytes
  int64_t rel = 0;       // byte offset of this value within the root
};

class Planner {
 public:
  Planner(const Graph& g, const PlanOptions& o) : g_(g), o_(o) {}

  MemoryPlan run() {
    if (o_.alignment <= 0 || (o_.alignment & (o_.alignment - 1)) != 0)
      throw Error("memory plan: alignment " + std::to_string(o_.alignment) + " is not a positive power of two");
    const size_t n_nodes = g_.size();
    mp_.locations.resize(n_nodes);
    mp_.in_place_input.assign(n_nodes, -1);
    roots_.resize(n_nodes);
    last_.resize(n_nodes);
    slot_of_.resize(n_nodes);
    assign_roots();
    compute_last_uses();
    allocate();
    finalize();
    return std::move(mp_);
  }

 private:
  const Root& root(Value v) const { return roots_[v.node][v.port]; }
  int64_t bytes(Value v) const { return g_.shape(v).nbytes(); }

  void assign_roots() {
    for (const Node& n : g_.nodes()) {
      if (n.id != static_cast<NodeId>(&n - g_.nodes().data()))
        throw Error(node_label(n) + ": node ids must equal their position in the graph");
      for (const Shape& s : n.outputs)
        if (!s.is_static())
          throw Error(node_label(n) + ": output shape " + s.str() + " is not static; bind every symbolic dim before planning");
      auto& r = roots_[n.id];
      r.resize(n.outputs.size());
      if (is_leaf_op(n.op)) {
        r[0] = Root{true, Value{n.id, 0}, 0};
      } else if (is_view_node(g_, n, o_)) {
        const Root& in = root(n.inputs[0]);
        r[0] = Root{in.leaf, in.value, in.rel + view_offset(g_, n)};
        ++mp_.num_views;
      } else {
        for (uint32_t p = 0; p < n.outputs.size(); ++p) r[p] = Root{false, Value{n.id, p}, 0};
      }
    }
  }

  // last_[root] = index of the last node reading the root's bytes (through any view); a root
  // nobody reads dies at its own node; graph outputs never die.
  void compute_last_uses() {
    for (const Node& n : g_.nodes()) last_[n.id].assign(n.outputs.size(), static_cast<int64_t>(n.id));
    for (const Node& n : g_.nodes()) {
      if (is_leaf_op(n.op) || is_view_node(g_, n, o_)) continue;
      for (Value v : n.inputs) {
        const Value r = root(v).value;
        auto& l = last_[r.node][r.port];
        l = std::max(l, static_cast<int64_t>(n.id));
      }
    }
    for (Value v : g_.outputs()) {
      const Value r = root(v).value;
      last_[r.node][r.port] = kForever;
    }
  }

  int32_t take_slot(int64_t need) {
    if (o_.reuse && !free_.empty()) {
      auto it = free_.lower_bound({need, -1});
      if (it == free_.end()) --it;  // none big enough: grow the largest free slot
      const int32_t s = it->second;
      free_.erase(it);
      mp_.slots[static_cast<size_t>(s)].bytes = std::max(mp_.slots[static_cast<size_t>(s)].bytes, need);
      return s;
    }
    mp_.slots.push_back(Slot{0, need});
    return static_cast<int32_t>(mp_.slots.size() - 1);
  }

  void release(Value r) {
    const int32_t s = slot_of_[r.node][r.port];
    live_ -= align_up(bytes(r), o_.alignment);
    if (s < 0 || !o_.reuse) return;
    free_.insert({mp_.slots[static_cast<size_t>(s)].bytes, s});
  }

  // Input index of `n` whose root output 0 may take over, or -1.
  int32_t pick_in_place(const Node& n) const {
    if (!o_.in_place || !o_.reuse || n.outputs.size() != 1) return -1;
    const Shape& out = n.outputs[0];
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      const Value v = n.inputs[j];
      const Root& r = root(v);
      const Shape& in = g_.shape(v);
      if (r.leaf || r.rel != 0 || in.dtype != out.dtype || in.dims != out.dims || out.nbytes() == 0) continue;
      if (bytes(r.value) != out.nbytes() || slot_of_[r.value.node][r.value.port] < 0) continue;
      if (last_[r.value.node][r.value.port] != static_cast<int64_t>(n.id)) continue;
      if (!kernel_allows_in_place(g_, n, j)) continue;
      bool clash = false;  // another operand reading the same bytes differently
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (k == j) continue;
        const Root& rk = root(n.inputs[k]);
        if (rk.leaf || rk.value != r.value) continue;
        if (rk.rel != 0 || bytes(n.inputs[k]) != out.nbytes() || g_.shape(n.inputs[k]).dtype != out.dtype) clash = true;
      }
      if (!clash) return static_cast<int32_t>(j);
    }
    return -1;
  }

  void allocate() {
    for (const Node& n : g_.nodes()) {
      slot_of_[n.id].assign(n.outputs.size(), -1);
      if (is_leaf_op(n.op) || is_view_node(g_, n, o_)) continue;
      const auto i = static_cast<int64_t>(n.id);
      const int32_t ip = pick_in_place(n);
      Value taken{};
      if (ip >= 0) {
        taken = root(n.inputs[static_cast<size_t>(ip)]).value;
        slot_of_[n.id][0] = slot_of_[taken.node][taken.port];
        mp_.in_place_input[n.id] = ip;
        ++mp_.num_in_place;
      }
      for (uint32_t p = 0; p < n.outputs.size(); ++p) {
        const int64_t b = n.outputs[p].nbytes();
        mp_.no_reuse_bytes += align_up(b, o_.alignment);
        ++mp_.num_roots;
        if (ip >= 0 && p == 0) continue;  // shares the input's slot (same aligned size)
        live_ += align_up(b, o_.alignment);
        if (b > 0) slot_of_[n.id][p] = take_slot(align_up(b, o_.alignment));
      }
      mp_.peak_bytes = std::max(mp_.peak_bytes, live_);
      // Give back the slots of roots whose last reader was this node (each root once).
      std::set<Value> dying;
      for (Value v : n.inputs) {
        const Root& r = root(v);
        if (!r.leaf && last_[r.value.node][r.value.port] == i) dying.insert(r.value);
      }
      for (uint32_t p = 0; p < n.outputs.size(); ++p)
        if (last_[n.id][p] == i) dying.insert(Value{n.id, p});
      for (Value r : dying) {
        if (ip >= 0 && r == taken) continue;  // its bytes (and slot) now belong to the output
        release(r);
      }
    }
  }

  void finalize() {
    int64_t cursor = 0;
    for (Slot& s : mp_.slots) {
      s.offset = cursor;
      // Checked with room for align_up's rounding: thousands of huge slots must not wrap.
      const int64_t end = checked_add(cursor, s.bytes, "memory plan arena size");
      checked_add(end, o_.alignment, "memory plan arena size");
      cursor = align_up(end, o_.alignment);
    }
    mp_.arena_bytes = cursor;
    for (const Node& n : g_.nodes()) {
      auto& locs = mp_.locations[n.id];
      locs.resize(n.outputs.size());
      for (uint32_t p = 0; p < n.outputs.size(); ++p) {
        const Root& r = roots_[n.id][p];
        Location& l = locs[p];
        l.bytes = n.outputs[p].nbytes();
        l.root = r.value;
        l.is_view = r.value != Value{n.id, p};
        if (r.leaf) {
          l.kind = Location::Kind::Leaf;
          l.leaf = r.value.node;
          l.offset = r.rel;
        } else {
          l.kind = Location::Kind::Arena;
          l.slot = slot_of_[r.value.node][r.value.port];
          l.offset = (l.slot >= 0 ? mp_.slots[static_cast<size_t>(l.slot)].offset : 0) + r.rel;
        }
      }
    }
  }

  const Graph& g_;
  const PlanOptions& o_;
  MemoryPlan mp_;
  std::vector<std::vector<Root>> roots_;
  std::vector<std::vector<int64_t>> last_;
  std::vector<std::vector<int32_t>> slot_of_;
  std::set<std::pair<int64_t, int32_t>> free_;  // (slot bytes, slot)
  int64_t live_ = 0;
};

}  // namespace

bool is_view_node(const Graph& g, const Node& n, const PlanOptions& options) {
  if (!options.views) return false;
  if (std::holds_alternative<ops::Reshape>(n.op) || std::holds_alternative<ops::StopGradient>(n.op)) return true;
  if (const auto* nr = std::get_if<ops::Narrow>(&n.op)) {
    const Shape& in = g.shape(n.inputs.at(0));
    const int64_t ax = normalize_axis(nr->axis, in.rank(), "narrow");
    for (int64_t d = 0; d < ax; ++d)
      if (!in.dims[static_cast<size_t>(d)].is_static() || in.dims[static_cast<size_t>(d)].value != 1) return false;
    return true;
  }
  return false;
}

MemoryPlan plan_memory(const Graph& g, const PlanOptions& options) { return Planner(g, options).run(); }

}  // namespace rlx::plan
