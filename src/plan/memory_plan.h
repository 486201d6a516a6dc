#pragma once
// The memory plan: where every value of a static graph lives during a run.
//
// Intermediate values share one arena. Walking the nodes in topological order, each value
// that needs its own bytes (a "root") gets a slot when its node runs and gives it back after
// its last reader (readers of its views included) has run. A slot is picked best-fit by size
// from the free slots (the largest free slot grows when none is big enough; a new slot is
// added when none is free). Slots start at `alignment`-byte offsets; sizes use the real dtype
// sizes; offsets are 64-bit.
//
// Views. Reshape and StopGradient (and Narrow when every dim before its axis is 1, so the
// slice is contiguous) take no memory: they read their input's bytes (also an Input's, Param's
// or Constant's) at a byte offset.
//
// In place. An elementwise node whose input dies at that node and has the output's dtype and
// dims (not broadcast), and whose bytes no other operand of the node reads at a different
// offset, writes its output over that input (the CPU kernels read element i before writing
// element i). Only Binary, Compare, Activation, ElementwiseRegion, Where with a full-shape
// condition, and Rope over its x (a rotated pair is read before it is written) qualify.
//
// Never overwritten: Param and Constant bytes (they are not in the arena), Input bytes except
// as below, and graph outputs (live until the run ends, so their slot is never handed out again).
//
// GEMV prologues. A MatMul / FusedMatMulBiasAct / DequantMatMul of at most kGemvPrologueRows
// rows whose x is an RmsNorm's or a FusedSwiGLU's result keeps that producer's inputs alive
// until it runs: a GPU GEMV may compute the producer in its prologue (plan/absorb_plans.h),
// which needs those inputs intact then (a few rows: the cost is a few KiB).
//
// Written inputs (PlanOptions::write_inputs). A CacheWrite whose cache operand is an Input's
// whole bytes (no view offset, same storage size), read by nothing after it and by no other
// operand of the node, writes its output over that Input: the output's Location is the Input's
// Leaf (is_view, root = the Input), and the Input is listed in MemoryPlan::written_inputs. Only
// the new rows are then written. The runtime must give such an input bytes it owns: the CPU
// executor copies a caller's tensor first and writes a donated one (carried state) in place; a
// device variant uploads every input into its own leaf buffer anyway.
//
// Device limits (PlanOptions::device, plan/device_limits.h; the defaults change nothing):
//   - Storage dtypes: every value is held as device.storage.storage(its dtype), except the
//     weights in native_weights and their views (held as their own dtype); byte sizes and
//     view offsets use the storage dtype's size. A dtype the device cannot hold is an rlx::Error
//     naming the node, the dtype and the device.
//   - Buffers: slots are placed first-fit, in slot order, into arena buffers of at most
//     max_buffer_bytes (one buffer, exactly today's layout, without a limit). A slot never
//     straddles two buffers, so no value (nor any view of it) does. A value larger than
//     max_binding_bytes / max_buffer_bytes is an rlx::Error naming the node. Every operand of a
//     step is then addressable by one binding window (binding_window below).
//   - Weights arena: Params and Constants are packed, in node order at aligned offsets, into
//     weights buffers of at most max_buffer_bytes (Location::Kind::Weights). Inputs stay
//     separate tensors (Kind::Leaf): they change every run.
#include <cstdint>
#include <vector>

#include "plan/device_limits.h"
#include "rlx/graph.h"
#include "rlx/limits.h"

namespace rlx::plan {

// The most rows of x a product has for the memory plan to keep its RmsNorm / SwiGLU
// producer's inputs alive for a GEMV prologue (the GPU decode kernels take at most 8).
inline constexpr int64_t kGemvPrologueRows = 8;

struct PlanOptions {
  bool reuse = true;       // liveness-based slot reuse; false = one slot per root (the no-reuse baseline)
  bool in_place = true;    // elementwise outputs over a dying input (needs reuse)
  bool views = true;       // Reshape / StopGradient / contiguous Narrow as views (else copies)
  bool write_inputs = false;  // CacheWrite over a dying Input (see "Written inputs" above)
  int64_t alignment = 256; // slot alignment in bytes (a power of two)
  Limits limits;           // the compile's size policy (arena size; While iterations at run time)
  DeviceLimits device;     // the backend's buffer limits and storage dtypes (defaults: none)
  // Params and Constants held in their own dtype although device.storage maps it to another,
  // because every kernel reading them reads that layout (WebGPU: f16/bf16 weights packed two per
  // 32-bit word for its matmuls, instead of one f32 word each). The backend decides which (it
  // knows its kernels); their views are held the same way. Empty: device.storage for all.
  std::vector<NodeId> native_weights;

  // The alignment slots and weights use: max(alignment, device.alignment).
  int64_t slot_alignment() const { return alignment > device.alignment ? alignment : device.alignment; }
};

// Where one value lives.
//   Arena:   bytes [offset, offset + bytes) of arena buffer `buffer` (offset = slot offset + view
//            offset; offsets count from the start of that buffer).
//   Leaf:    the tensor of Input/Param/Constant node `leaf`, from byte `offset` on.
//   Weights: (DeviceLimits::weights_arena only) bytes [offset, offset + bytes) of weights buffer
//            `buffer`, owned by Param/Constant node `leaf`. Never written by a step, like Leaf.
// `bytes` and `offset` count elements of `storage`, the dtype the device holds the value as
// (the value's own dtype unless DeviceLimits::storage maps it).
// A view (is_view) shares the bytes of `root`, the value that owns them; a non-view value is
// its own root.
struct Location {
  enum class Kind : uint8_t { Arena, Leaf, Weights };
  Kind kind = Kind::Arena;
  int64_t offset = 0;
  int64_t bytes = 0;
  NodeId leaf = 0;
  int32_t slot = -1;    // Arena: slot index (-1 for a value of 0 bytes, which takes no memory)
  int32_t buffer = 0;   // Arena: index into MemoryPlan::arena_buffers; Weights: into weights_buffers
  DType storage = DType::F32;
  bool is_view = false;
  Value root;
};

struct Slot {
  int64_t offset = 0;  // aligned, within its buffer
  int64_t bytes = 0;   // the largest value ever placed in it
  int32_t buffer = 0;  // the arena buffer holding it
};

// The range a kernel binds to address a value: [offset, offset + bytes) of buffer `buffer` (of
// the arena, the weights, or the leaf's own tensor, by the Location's kind), `offset` a multiple
// of the device alignment at or below the value's first byte; the value starts `rel` bytes into
// the window (a multiple of its storage element size).
struct BindingWindow {
  int32_t buffer = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t rel = 0;
};
BindingWindow binding_window(const Location& l, const DeviceLimits& device);

struct MemoryPlan {
  std::vector<std::vector<Location>> locations;  // per node, per output port
  std::vector<Slot> slots;
  std::vector<int32_t> in_place_input;  // per node: input index whose bytes output 0 reuses, -1 = none
  int64_t arena_bytes = 0;     // size of the arena: the sum of arena_buffers (one buffer without limits)
  std::vector<int64_t> arena_buffers;    // bytes of each arena buffer (always at least one)
  std::vector<int64_t> weights_buffers;  // bytes of each weights buffer (weights_arena only)
  int64_t weights_bytes = 0;             // sum of weights_buffers
  // Leaves (Input/Param/Constant) and graph outputs whose storage dtype cannot hold every value
  // of their dtype (e.g. i64 held as i32): the runtime converts them with plan/storage.h, which
  // checks each element (to_storage on upload, from_storage on readback).
  std::vector<Value> narrowed;
  int64_t peak_bytes = 0;      // most bytes of roots live at once (aligned sizes): a floor for arena_bytes
  int64_t no_reuse_bytes = 0;  // sum of every root's aligned size: the arena without reuse
  int64_t num_roots = 0;       // values that own arena bytes
  int64_t num_views = 0;       // values placed as views
  int64_t num_in_place = 0;    // nodes writing over a dying input
  std::vector<NodeId> written_inputs;  // Input nodes a step writes over (write_inputs), in node order

  const Location& at(Value v) const { return locations.at(v.node).at(v.port); }
};

// Plans `g` (verified, every shape static; throws rlx::Error naming the node otherwise).
MemoryPlan plan_memory(const Graph& g, const PlanOptions& options = {});

// True when node `n` of `g` is placed as a view of its input under `options` (Reshape,
// StopGradient, or a Narrow whose dims before the axis are all 1).
bool is_view_node(const Graph& g, const Node& n, const PlanOptions& options);

}  // namespace rlx::plan
