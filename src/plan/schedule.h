#pragma once
// The backend-neutral Schedule: a static, legalized graph lowered to a list of Steps, one per
// executed node, each carrying everything a kernel launch needs (where every operand and
// result lives, dtypes, concrete dims and the op's geometry), resolved once at compile time.
//
// A backend maps `Step -> launch` by switching on the geometry alternative (and, for
// Generic steps, on the op). It never has to look at Graph shapes again.
//
// Buffers. Every value of the graph has a Location:
//   - Arena: bytes [offset, offset + bytes) of arena buffer `buffer` (one buffer unless the
//     device limits buffer sizes, see memory_plan.h). Slots (the units the memory plan hands
//     out) start at 256-byte aligned offsets; a view's offset is its slot's offset plus a byte
//     offset that is a multiple of the element size.
//   - Weights: (device weights arena only) bytes of a weights buffer holding Params/Constants.
//   - Leaf:  bytes of the host/device tensor of an Input, Param or Constant node (`leaf`),
//     starting `offset` bytes in (non-zero only for a view, e.g. a leading-axis Narrow).
// A view (Reshape, StopGradient, Narrow with everything before the axis of size 1) shares its
// root's bytes: it has no Step, and `is_view` is set with `root` naming the value that owns
// the bytes. Nothing is ever written through a Leaf location.
//
// Strides are in elements, row-major, one per dim of the dims they go with; a stride of 0
// is a broadcast dim. Offsets in elements unless named `*_bytes`.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "plan/memory_plan.h"
#include "rlx/graph.h"

namespace rlx::plan {

// One operand or result of a step. `dtype` is the logical dtype (what the op computes);
// storage() the dtype its buffer holds (differs only where PlanOptions::device maps it, e.g.
// i64 held as i32 on WebGPU; loc's bytes and offsets count storage elements).
struct TensorRef {
  Value value;
  DType dtype = DType::F32;
  std::vector<int64_t> dims;
  Location loc;
  int64_t numel() const;
  DType storage() const { return loc.storage; }
};

// ---- per-kind geometry -------------------------------------------------------------------

// Batched C[b] = A[b] @ B[b], C dense [batch..., m, n] (ldc = n, batch stride m*n).
// A item is [m, k] (row-major, lda = k) or, when trans_a, stored [k, m] (lda = m); likewise B
// [k, n] (ldb = n) or stored [n, k] when trans_b. The batch index space is `batch_dims`
// (broadcast result); a_batch_strides / b_batch_strides give each operand's element stride per
// batch dim (0 = broadcast). a_stride / b_stride: the single stride between consecutive flat
// batch items when the operand's batch space collapses to one (strided-batched GEMM), else -1.
// Used by MatMul, FusedMatMulBiasAct (plus bias_len / activation), LoraMatMul (the x @ w part;
// rank = a's columns) and FusedAttentionBlock / FusedTransformerLayer projections.
struct MatMulGeom {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<int64_t> batch_dims, a_batch_strides, b_batch_strides;
  int64_t a_stride = 0, b_stride = 0;
  // FusedMatMulBiasAct: bias elements (0 = none, 1 = scalar, n = per column).
  int64_t bias_len = 0;
  bool residual = false;  // FusedMatMulBiasAct: the last input is added to the result
  std::optional<ActKind> activation;
  // LoraMatMul: adapter rank r (a is [k, r], b is [r, n]) and scale.
  int64_t lora_rank = 0;
  double lora_scale = 0.0;
};

// GroupedMatMul: out[i, :] = x[i, :] @ w[idx[i]], x (m, k), w (experts, k, n).
struct GroupedMatMulGeom {
  int64_t m = 0, k = 0, n = 0, experts = 0;
};

// Element strides of a 4-d attention tensor, indexed (batch, seq, head, dim); dim stride is 1.
struct AttnStrides {
  int64_t batch = 0, seq = 0, head = 0;
};
// The strides of a dense attention tensor of `seq` rows and `heads` heads of `head_dim` in this
// layout (BSHD: [b, s, h, d], BHSD: [b, h, s, d]).
AttnStrides attn_strides(AttnLayout layout, int64_t seq, int64_t heads, int64_t head_dim);

// Attention (and the attention inside FusedAttentionBlock / FusedTransformerLayer).
// Query row i sits at position kv_len - q_len + i. group = num_heads / num_kv_heads: query
// head h reads kv head h / group.
struct AttentionGeom {
  int64_t batch = 0, q_len = 0, kv_len = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, group = 1;
  AttnLayout layout = AttnLayout::BSHD;
  AttnStrides q, k, v, out;
  double scale = 1.0;    // resolved: score_scale, or 1/sqrt(head_dim) when 0
  double softcap = 0.0;  // 0 = off
  MaskKind mask = MaskKind::None;
  int64_t window = 0;
  int64_t mask_batch_stride = 0;   // Custom: keep[b * mask_batch_stride + j]; Positions: pos[b * it + i]
  int64_t bias_strides[4] = {0, 0, 0, 0};  // Bias: element strides for (b, h, i, j), broadcast = 0
};

// An op over one axis (or one contiguous run of axes) of a row-major tensor viewed as
// [outer, axis, inner]: Softmax, LogSoftmax, Cumsum, ArgMax/ArgMin, TopK (out_axis = k),
// Narrow copies (out_axis = len, from `start`), Gather (data's axis; out_axis = number of
// indices), FusedSwiGLU (axis = 2N, out_axis = N). Norms over the trailing dims (LayerNorm,
// RmsNorm from their axis, FusedResidual* over the last one) have inner = 1 and axis = the
// normalized size.
struct AxisGeom {
  int64_t outer = 1, axis = 1, inner = 1;
  int64_t out_axis = 1;  // the output's length on the axis (TopK k, Narrow len, Gather indices)
  int64_t start = 0;     // Narrow: first index taken on the axis
};

// Reduce. When `simple`, the reduced axes form one contiguous run after dropping size-1 dims:
// the input is [outer, reduce, inner] and the output [outer, inner]. Otherwise `dims` /
// `reduced` hold the coalesced input dims (alternating kept / reduced groups, size-1 dims
// dropped) for a general walk. count = elements reduced into each output (the Mean divisor).
struct ReduceGeom {
  ReduceKind kind = ReduceKind::Sum;
  bool simple = true;
  int64_t outer = 1, reduce = 1, inner = 1;
  std::vector<int64_t> dims;
  std::vector<uint8_t> reduced;  // per coalesced dim: 1 = reduced
  int64_t count = 1;
};

// Pure data movement: out[idx] = in[in_offset + sum_d idx[d] * in_strides[d]] over out_dims
// (coalesced: size-1 dims dropped, contiguous neighbours merged; rank >= 1). Transpose
// (permuted strides), Expand (0 strides), Reverse (negative strides, in_offset at the end)
// and Reshape / StopGradient when they are planned as copies rather than views.
struct CopyGeom {
  std::vector<int64_t> out_dims, in_strides;
  int64_t in_offset = 0;
};

// Concat along an axis: output viewed as [outer, out_axis * inner]; input i contributes
// in_axis[i] * inner contiguous elements per outer row, at element column col[i].
struct ConcatGeom {
  int64_t outer = 1, inner = 1, out_axis = 0;
  std::vector<int64_t> in_axis, col;
};

// Elementwise with numpy broadcast (Binary, Compare, Where, Activation, Cast,
// ElementwiseRegion): the output index space out_dims (coalesced) and per input the element
// strides over it (0 = broadcast). `contiguous` when every input has the output's dims.
struct ElementwiseGeom {
  std::vector<int64_t> out_dims;
  std::vector<std::vector<int64_t>> in_strides;
  bool contiguous = true;
  int64_t numel = 0;
};

// Channel-wise norms: x viewed as [n, channels, spatial]. GroupNorm has groups; LayerNorm2d
// and BatchNormInference have groups = channels.
struct ChannelGeom {
  int64_t n = 1, channels = 1, spatial = 1, groups = 1;
};

// Rope: x (batch, seq, heads, head_dim); cos/sin rows of n_rot/2, per batch when per_batch.
struct RopeGeom {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, n_rot = 0;
  bool per_batch = false;
};

// FusedAttentionBlock / FusedTransformerLayer: tokens = batch * seq rows of width hidden.
// qkv/out (and fc1/fc2 for a layer) are the projections; attn is the attention over the
// packed qkv buffer (q, k, v at element columns 0, hidden, 2 * hidden of a 3 * hidden row).
struct FusedBlockGeom {
  int64_t batch = 0, seq = 0, hidden = 0, ffn = 0;
  MatMulGeom qkv, out, fc1, fc2;
  AttentionGeom attn;
};

// ScatterAdd: out = data, then for each element i of indices (row-major over idx_dims, `count`
// elements; updates has the same dims) out[i with its coordinate on `axis` replaced by
// indices[i]] += updates[i]; an index must be in [-axis_size, axis_size) (a negative one counts
// from the end), the kernel reports any other. data_strides: data's row-major element strides
// (one per dim of idx_dims, which has data's rank).
struct ScatterAddGeom {
  int64_t axis = 0, axis_size = 0, count = 0;
  std::vector<int64_t> idx_dims, data_strides;
};

// Pad: out[o] = in[sum_a source[source_offset[a] + o[a]] * in_strides[a]] over out_dims, or the
// constant where any axis' source index is -1. `source` holds, per axis a, out_dims[a] input
// indices from source_offset[a] on (negative pads crop; edge and reflect resolved, as
// pad_source_index). in_strides: the input's row-major element strides. Rank 0: all empty.
// The bits of Pad's constant `v` stored as dtype `t` (low bytes; converted as the CPU kernel
// converts it), for a GPU kernel that writes the constant as raw words.
uint64_t pad_fill_bits(DType t, double v);

struct PadGeom {
  std::vector<int64_t> out_dims, in_strides, source, source_offset;
};

// Sample: logits viewed as [rows, vocab] (rank-1 logits are one row); one index per row.
struct SampleGeom {
  int64_t rows = 1, vocab = 0;
};

// Recurrent: x is seq x batch rows of `input` (time-major, or batch-major when batch_first),
// gates * hidden columns per direction, dirs directions.
struct RecurrentGeom {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, gates = 0, dirs = 1;
};

// Everything else (Conv, Pool, Resize, Im2Col, random, If, While, DotGeneral): the step's op
// attributes and operand dims are all the kernel uses.
struct GenericGeom {};

using Geometry = std::variant<GenericGeom, MatMulGeom, GroupedMatMulGeom, AttentionGeom, AxisGeom, ReduceGeom,
                              CopyGeom, ConcatGeom, ElementwiseGeom, ChannelGeom, RopeGeom, FusedBlockGeom,
                              ScatterAddGeom, PadGeom, SampleGeom, RecurrentGeom>;

// One executed node.
struct Step {
  NodeId node = 0;
  Op op;                        // the node's op (attributes)
  std::vector<TensorRef> in;    // operands, in the node's input order
  std::vector<TensorRef> out;   // results, one per output port
  Geometry geom;
  // Set when out[0] reuses the memory of in[in_place_input] (elementwise, same bytes and
  // dims, the input dies here): out[0] and that operand have the same Location bytes.
  int32_t in_place_input = -1;
};

struct Schedule {
  std::vector<Step> steps;                       // topological order
  std::vector<TensorRef> outputs;                // the graph outputs, in order
  MemoryPlan memory;                             // the arena layout behind the Arena locations
  const Location& at(Value v) const { return memory.at(v); }
};

// Lowers a verified graph whose shapes are all static (throws rlx::Error naming the node
// otherwise) to a Schedule, planning its memory with `options`.
Schedule build_schedule(const Graph& g, const PlanOptions& options = {});

// The geometry of one node of `g` (all shapes static), as build_schedule computes it.
Geometry node_geometry(const Graph& g, const Node& n);

// Pad: for each axis a, the input index feeding each output index along a (negative pads crop;
// edge and reflect resolved), or -1 where the constant goes. Throws rlx::Error when an edge or
// reflect pad cannot be taken from the input (an empty dim, a reflection longer than the dim).
std::vector<std::vector<int64_t>> pad_source_index(const ops::Pad& op, const std::vector<int64_t>& in_dims,
                                                   const std::vector<int64_t>& out_dims);

// Resize along one axis of `in` -> `out` elements (in > 0, or out == 0): output index o reads
// input indices lo[o] and hi[o] with weight 1 - w[o] and w[o] (n-linear; the axes multiply),
// or lo[o] alone (nearest: hi == lo, w == 0). The ONNX coordinate transforms and nearest
// roundings of ops::Resize; shared by the CPU kernel and the legalize's decomposition.
struct ResizeAxisTable {
  std::vector<int64_t> lo, hi;
  std::vector<double> w;
};
ResizeAxisTable resize_axis_table(const ops::Resize& op, int64_t axis, int64_t in, int64_t out);

}  // namespace rlx::plan
