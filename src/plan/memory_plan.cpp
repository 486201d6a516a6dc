#include "plan/memory_plan.h"

#include "plan/storage.h"
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

// Byte offset of a view node's output within its input (0 for Reshape / StopGradient), in
// elements of `storage` (the dtype the input is held as).
int64_t view_offset(const Graph& g, const Node& n, DType storage) {
  if (const auto* nr = std::get_if<ops::Narrow>(&n.op)) {
    const Shape& in = g.shape(n.inputs[0]);
    const int64_t ax = normalize_axis(nr->axis, in.rank(), "narrow");
    const auto dims = in.concrete();
    const int64_t start = nr->start < 0 ? nr->start + dims[static_cast<size_t>(ax)] : nr->start;
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(ax) + 1; d < dims.size(); ++d) inner *= dims[d];
    return start * inner * static_cast<int64_t>(dtype_size(storage));
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
    } else if constexpr (std::is_same_v<T, ops::Rope>) {
      // Every backend's rope reads both values of a rotated pair before writing them (one
      // invocation or loop step per pair); the tables (inputs 1, 2) are not overwritten.
      return j == 0;
    } else if constexpr (std::is_same_v<T, ops::Where>) {
      // A broadcast condition makes the kernel copy whole rows of a or b (memcpy, which must
      // not overlap its destination); a full-shape condition selects element by element.
      return j != 0 && g.shape(n.inputs[0]).dims == n.outputs[0].dims;
    } else {
      return false;
    }
  }, n.op);
}

// Rows of a product's x (all dims but the last) when it is skinny enough for a GEMV that
// computes x's producer in its prologue: at most kGemvPrologueRows; 0 otherwise.
int64_t gemv_prologue_rows(const Shape& x) {
  if (x.rank() < 1 || !x.is_static()) return 0;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.dims.size(); ++d) rows *= x.dims[d].value;
  return rows >= 1 && rows <= kGemvPrologueRows ? rows : 0;
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
    o_.device.validate();
    const size_t n_nodes = g_.size();
    mp_.locations.resize(n_nodes);
    mp_.in_place_input.assign(n_nodes, -1);
    roots_.resize(n_nodes);
    last_.resize(n_nodes);
    slot_of_.resize(n_nodes);
    storage_.resize(n_nodes);
    bytes_.resize(n_nodes);
    assign_roots();
    compute_last_uses();
    if (pick_input_writes()) {  // those outputs now live in their Input: redo roots and lifetimes
      assign_roots();
      compute_last_uses();
    }
    allocate();
    finalize();
    return std::move(mp_);
  }

 private:
  const Root& root(Value v) const { return roots_[v.node][v.port]; }
  // Bytes of value v as the device holds it (its storage dtype).
  int64_t bytes(Value v) const { return bytes_[v.node][v.port]; }

  // The storage dtype of each output of `n` and its bytes; rlx::Error for a dtype the device
  // cannot hold or a value larger than one binding / buffer.
  void assign_storage(const Node& n) {
    const DeviceLimits& d = o_.device;
    storage_[n.id].resize(n.outputs.size());
    bytes_[n.id].resize(n.outputs.size());
    for (uint32_t p = 0; p < n.outputs.size(); ++p) {
      const Shape& s = n.outputs[p];
      const std::string what = node_label(n) + " output " + std::to_string(p);
      std::optional<DType> st = d.storage.storage(s.dtype);
      if (native_weight(n) || native_view(n)) st = s.dtype;
      if (!st)
        throw Error(what + " is a " + dtype_name(s.dtype) + " tensor, which " + d.device_name() +
                    " cannot hold (its kernels have no " + dtype_name(s.dtype) + " storage); cast it to " +
                    (is_float(s.dtype) ? "f32" : "i32") + " before it reaches this node (a Cast in the graph, or " +
                    (is_leaf_op(n.op) ? "give this input/weight as " + std::string(is_float(s.dtype) ? "f32" : "i32")
                                      : std::string("cast its inputs")) +
                    "), or compile for a device that holds " + dtype_name(s.dtype) + " (CPU, CUDA)");
      storage_[n.id][p] = *st;
      // The logical size first (the size policy's check, as before device limits), then the
      // stored size, which obeys the same policy.
      const int64_t logical = s.nbytes();
      const int64_t b = *st == s.dtype ? logical : checked_nbytes(s.concrete(), *st, what + " (held as " + dtype_name(*st) + ")");
      bytes_[n.id][p] = b;
      const int64_t cap = d.max_value_bytes();
      if (cap > 0 && b > cap) {
        const bool binding = d.max_binding_bytes > 0 && d.max_binding_bytes == cap;
        throw Error(what + " (" + s.str() + ", held as " + dtype_name(*st) + ") takes " +
                    std::to_string(b) + " bytes, more than " + d.device_name() + " allows in one " +
                    (binding ? "binding (DeviceLimits::max_binding_bytes " : "buffer (DeviceLimits::max_buffer_bytes ") +
                    std::to_string(cap) + "); make the tensor smaller (split the weight or the batch/sequence, "
                    "e.g. shard a large matmul along n) or raise the device limit if the hardware allows it "
                    "(Vulkan maxStorageBufferRange, WebGPU maxStorageBufferBindingSize / maxBufferSize)");
      }
    }
  }

  // PlanOptions::native_weights: a listed Param or Constant, or a view of a value held natively
  // (a view keeps its input's dtype, so its storage is the input's).
  bool native_weight(const Node& n) const {
    return (std::holds_alternative<ops::Param>(n.op) || std::holds_alternative<ops::Constant>(n.op)) &&
           std::find(o_.native_weights.begin(), o_.native_weights.end(), n.id) != o_.native_weights.end();
  }
  bool native_view(const Node& n) const {
    if (o_.native_weights.empty() || is_leaf_op(n.op) || !is_view_node(g_, n, o_)) return false;
    const Value in = n.inputs.at(0);
    const DType held = storage_.at(in.node).at(in.port);
    return held == g_.shape(in).dtype && d_storage(held) != held;
  }
  DType d_storage(DType t) const { return o_.device.storage.storage(t).value_or(t); }

  // PlanOptions::write_inputs: the CacheWrite nodes that write over their cache Input (see
  // memory_plan.h). Returns whether any does.
  bool pick_input_writes() {
    writes_input_.assign(g_.size(), false);
    if (!o_.write_inputs) return false;
    bool any = false;
    for (const Node& n : g_.nodes()) {
      if (!std::holds_alternative<ops::CacheWrite>(n.op)) continue;
      const Root& r = root(n.inputs[0]);
      if (!r.leaf || r.rel != 0 || !std::holds_alternative<ops::Input>(g_.node(r.value.node).op)) continue;
      if (bytes(r.value) != bytes(Value{n.id, 0}) || storage_[r.value.node][0] != storage_[n.id][0]) continue;
      if (last_[r.value.node][r.value.port] != static_cast<int64_t>(n.id)) continue;  // read later, or an output
      bool clash = false;
      for (size_t k = 1; k < n.inputs.size(); ++k) clash |= root(n.inputs[k]).value == r.value;
      if (clash) continue;
      writes_input_[n.id] = true;
      mp_.written_inputs.push_back(r.value.node);
      mp_.in_place_input[n.id] = 0;
      ++mp_.num_in_place;
      any = true;
    }
    return any;
  }

  void assign_roots() {
    mp_.num_views = 0;
    for (const Node& n : g_.nodes()) {
      if (n.id != static_cast<NodeId>(&n - g_.nodes().data()))
        throw Error(node_label(n) + ": node ids must equal their position in the graph");
      for (const Shape& s : n.outputs)
        if (!s.is_static())
          throw Error(node_label(n) + ": output shape " + s.str() + " is not static; bind every symbolic dim before planning");
      assign_storage(n);
      auto& r = roots_[n.id];
      r.resize(n.outputs.size());
      if (is_leaf_op(n.op)) {
        r[0] = Root{true, Value{n.id, 0}, 0};
      } else if (is_view_node(g_, n, o_)) {
        const Root& in = root(n.inputs[0]);
        r[0] = Root{in.leaf, in.value, in.rel + view_offset(g_, n, storage_[n.inputs[0].node][n.inputs[0].port])};
        ++mp_.num_views;
      } else if (!writes_input_.empty() && writes_input_[n.id]) {
        r[0] = Root{true, root(n.inputs[0]).value, 0};  // written over its cache Input
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
    // An Attention may read q / k / v in place from the tensor a Narrow slices along its last
    // axis (a fused q/k/v projection; plan_attention_narrows): that tensor lives until it.
    for (const Node& n : g_.nodes()) {
      if (!std::holds_alternative<ops::Attention>(n.op)) continue;
      for (size_t i = 0; i < 3 && i < n.inputs.size(); ++i) {
        const Node& sl = g_.node(root(n.inputs[i]).value.node);
        const auto* nr = std::get_if<ops::Narrow>(&sl.op);
        if (!nr || is_view_node(g_, sl, o_)) continue;
        const int64_t rank = g_.shape(sl.inputs.at(0)).rank();
        if (rank < 1 || normalize_axis(nr->axis, rank, "narrow") != rank - 1) continue;
        const Value r = root(sl.inputs[0]).value;
        auto& l = last_[r.node][r.port];
        l = std::max(l, static_cast<int64_t>(n.id));
      }
    }
    // A skinny product may compute the RmsNorm or SwiGLU producing its x in its prologue
    // (plan_gemv_prologues, plan_dequant_gemv_groups): the producer's inputs live until the
    // product, so that neither the producer's result nor the product's overwrites them.
    for (const Node& n : g_.nodes()) {
      if (!std::holds_alternative<ops::MatMul>(n.op) && !std::holds_alternative<ops::FusedMatMulBiasAct>(n.op) &&
          !std::holds_alternative<ops::DequantMatMul>(n.op))
        continue;
      const Root& x = root(n.inputs.at(0));
      if (x.leaf || gemv_prologue_rows(g_.shape(n.inputs[0])) == 0) continue;
      const Node& p = g_.node(x.value.node);
      if (!std::holds_alternative<ops::RmsNorm>(p.op) && !std::holds_alternative<ops::FusedSwiGLU>(p.op)) continue;
      for (Value v : p.inputs) {
        const Root& r = root(v);
        if (r.leaf) continue;
        auto& l = last_[r.value.node][r.value.port];
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
    mp_.slots.push_back(Slot{0, need, 0});
    slot_used_.push_back(0);
    return static_cast<int32_t>(mp_.slots.size() - 1);
  }

  void release(Value r) {
    const int32_t s = slot_of_[r.node][r.port];
    live_ -= align_up(bytes(r), align_);
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
      const int64_t out_bytes = bytes(Value{n.id, 0});
      if (r.leaf || r.rel != 0 || in.dtype != out.dtype || in.dims != out.dims || out_bytes == 0) continue;
      if (bytes(r.value) != out_bytes || slot_of_[r.value.node][r.value.port] < 0) continue;
      if (last_[r.value.node][r.value.port] != static_cast<int64_t>(n.id)) continue;
      if (!kernel_allows_in_place(g_, n, j)) continue;
      bool clash = false;  // another operand reading the same bytes differently
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (k == j) continue;
        const Root& rk = root(n.inputs[k]);
        if (rk.leaf || rk.value != r.value) continue;
        if (rk.rel != 0 || bytes(n.inputs[k]) != out_bytes || g_.shape(n.inputs[k]).dtype != out.dtype) clash = true;
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
        if (roots_[n.id][p].leaf) continue;  // written over an Input (write_inputs): no slot
        const int64_t b = bytes(Value{n.id, p});
        mp_.no_reuse_bytes += align_up(b, align_);
        ++mp_.num_roots;
        if (ip >= 0 && p == 0) continue;  // shares the input's slot (same aligned size)
        live_ += align_up(b, align_);
        if (b > 0) {
          slot_of_[n.id][p] = take_slot(align_up(b, align_));
          auto& used = slot_used_[static_cast<size_t>(slot_of_[n.id][p])];
          used = std::max(used, b);
        }
      }
      mp_.peak_bytes = std::max(mp_.peak_bytes, live_);
      // Give back the slots of roots whose last reader was this node (each root once).
      std::set<Value> dying;
      for (Value v : n.inputs) {
        const Root& r = root(v);
        if (!r.leaf && last_[r.value.node][r.value.port] == i) dying.insert(r.value);
      }
      for (uint32_t p = 0; p < n.outputs.size(); ++p)
        if (!roots_[n.id][p].leaf && last_[n.id][p] == i) dying.insert(Value{n.id, p});
      for (Value r : dying) {
        if (ip >= 0 && r == taken) continue;  // its bytes (and slot) now belong to the output
        release(r);
      }
    }
  }

  // Places items of `need` bytes (a slot's size; `used` of them ever touched) first-fit into
  // buffers of at most `cap` bytes (0 = one unbounded buffer); returns (buffer, offset) per item
  // and the buffer sizes. Offsets are aligned; without a cap this is the plain aligned packing.
  struct Packed {
    std::vector<std::pair<int32_t, int64_t>> at;
    std::vector<int64_t> buffers;
  };
  Packed pack(const std::vector<int64_t>& need, const std::vector<int64_t>& used, const char* what) const {
    const int64_t cap = o_.device.max_buffer_bytes;
    Packed pk;
    std::vector<int64_t> cursor{0};  // per buffer: the end of its last item, aligned
    for (size_t i = 0; i < need.size(); ++i) {
      size_t b = 0;
      if (cap > 0)
        while (b < cursor.size() && cursor[b] + used[i] > cap) ++b;
      if (b == cursor.size()) cursor.push_back(0);
      pk.at.emplace_back(static_cast<int32_t>(b), cursor[b]);
      // Checked with room for align_up's rounding: thousands of huge slots must not wrap.
      const int64_t end = checked_add(cursor[b], need[i], what);
      checked_add(end, align_, what);
      cursor[b] = align_up(end, align_);
    }
    for (int64_t c : cursor) pk.buffers.push_back(cap > 0 ? std::min(c, cap) : c);
    return pk;
  }

  void place_slots() {
    std::vector<int64_t> need, used;
    for (size_t s = 0; s < mp_.slots.size(); ++s) {
      need.push_back(mp_.slots[s].bytes);
      used.push_back(slot_used_[s]);
    }
    const Packed pk = pack(need, used, "memory plan arena size");
    for (size_t s = 0; s < mp_.slots.size(); ++s) {
      mp_.slots[s].buffer = pk.at[s].first;
      mp_.slots[s].offset = pk.at[s].second;
    }
    mp_.arena_buffers = pk.buffers;
    mp_.arena_bytes = 0;
    for (int64_t b : pk.buffers) mp_.arena_bytes = checked_add(mp_.arena_bytes, b, "memory plan arena size");
  }

  // Weights arena: every Param and Constant, in node order, at aligned offsets of weights buffers.
  std::vector<std::pair<int32_t, int64_t>> place_weights() {
    std::vector<std::pair<int32_t, int64_t>> at(g_.size(), {-1, 0});
    if (!o_.device.weights_arena) return at;
    std::vector<NodeId> ids;
    std::vector<int64_t> need;
    for (const Node& n : g_.nodes())
      if (std::holds_alternative<ops::Param>(n.op) || std::holds_alternative<ops::Constant>(n.op)) {
        ids.push_back(n.id);
        need.push_back(bytes(Value{n.id, 0}));
      }
    const Packed pk = pack(need, need, "memory plan weights size");
    for (size_t i = 0; i < ids.size(); ++i) at[ids[i]] = pk.at[i];
    mp_.weights_buffers = pk.buffers;
    for (int64_t b : pk.buffers) mp_.weights_bytes = checked_add(mp_.weights_bytes, b, "memory plan weights size");
    return at;
  }

  void finalize() {
    place_slots();
    const auto weights_at = place_weights();
    for (const Node& n : g_.nodes()) {
      auto& locs = mp_.locations[n.id];
      locs.resize(n.outputs.size());
      for (uint32_t p = 0; p < n.outputs.size(); ++p) {
        const Root& r = roots_[n.id][p];
        Location& l = locs[p];
        l.bytes = bytes(Value{n.id, p});
        l.storage = storage_[n.id][p];
        l.root = r.value;
        l.is_view = r.value != Value{n.id, p};
        if (r.leaf && weights_at[r.value.node].first >= 0) {
          l.kind = Location::Kind::Weights;
          l.leaf = r.value.node;
          l.buffer = weights_at[r.value.node].first;
          l.offset = weights_at[r.value.node].second + r.rel;
        } else if (r.leaf) {
          l.kind = Location::Kind::Leaf;
          l.leaf = r.value.node;
          l.offset = r.rel;
        } else {
          l.kind = Location::Kind::Arena;
          l.slot = slot_of_[r.value.node][r.value.port];
          const Slot* sl = l.slot >= 0 ? &mp_.slots[static_cast<size_t>(l.slot)] : nullptr;
          l.buffer = sl ? sl->buffer : 0;
          l.offset = (sl ? sl->offset : 0) + r.rel;
        }
      }
      if (is_leaf_op(n.op) && storage_narrows(n.outputs[0].dtype, storage_[n.id][0]))
        mp_.narrowed.push_back(Value{n.id, 0});
    }
    for (Value v : g_.outputs())
      if (storage_narrows(g_.shape(v).dtype, storage_[v.node][v.port]) &&
          std::find(mp_.narrowed.begin(), mp_.narrowed.end(), v) == mp_.narrowed.end())
        mp_.narrowed.push_back(v);
  }

  const Graph& g_;
  const PlanOptions& o_;
  const int64_t align_ = o_.slot_alignment();
  MemoryPlan mp_;
  std::vector<std::vector<DType>> storage_;    // per value: the dtype the device holds it as
  std::vector<std::vector<int64_t>> bytes_;    // per value: its bytes in that dtype
  std::vector<int64_t> slot_used_;             // per slot: the most bytes a value placed in it uses
  std::vector<std::vector<Root>> roots_;
  std::vector<bool> writes_input_;  // per node: a CacheWrite written over its cache Input
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

BindingWindow binding_window(const Location& l, const DeviceLimits& device) {
  const int64_t a = device.alignment > 0 ? device.alignment : 1;
  BindingWindow w;
  w.buffer = l.kind == Location::Kind::Leaf ? 0 : l.buffer;
  w.offset = l.offset / a * a;
  w.rel = l.offset - w.offset;
  w.bytes = w.rel + l.bytes;
  return w;
}

}  // namespace rlx::plan
