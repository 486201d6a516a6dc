#pragma once
// The op vocabulary: one small struct per op kind with typed attributes.
//
// Every struct has
//   static constexpr const char* kName;          the op's name in text/JSON
//   static constexpr int kMinInputs, kMaxInputs;  arity (kMaxInputs = -1: variadic)
//   std::vector<Shape> infer(std::span<const Shape> in) const;
//       shape + dtype inference and verification (throws rlx::Error on invalid
//       operands; the Graph adds the node id to the message). Defined in
//       src/ir/ops_<family>.cpp: one place per kind.
//   template <class V> void visit(V&& v);      names and references every attribute,
//       used by the JSON format, the printer and equality.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "rlx/dtype_narrow.h"
#include "rlx/shape.h"
#include "rlx/tensor.h"

namespace rlx {

class Graph;
using SubgraphPtr = std::shared_ptr<const Graph>;

// ---- enums with names ------------------------------------------------------
template <class E> struct EnumNames;  // specialized below: static constexpr std::array names
template <class E> const char* enum_name(E e) {
  const auto& n = EnumNames<E>::names;
  auto i = static_cast<size_t>(e);
  return i < n.size() ? n[i] : "?";
}
template <class E> E enum_parse(std::string_view s) {
  const auto& n = EnumNames<E>::names;
  for (size_t i = 0; i < n.size(); ++i)
    if (s == n[i]) return static_cast<E>(i);
  throw Error(std::string("unknown enum value '") + std::string(s) + "'");
}

template <> struct EnumNames<E8M0Round> { static constexpr std::array names{"up", "down", "nearest"}; };
enum class BinaryKind : uint8_t { Add, Sub, Mul, Div, Max, Min, Pow, Mod, FMod, And, Or, Xor, Shl, Shr };
template <> struct EnumNames<BinaryKind> {
  static constexpr std::array names{"add", "sub", "mul", "div", "max", "min", "pow", "mod", "fmod", "and", "or", "xor",
                                    "shl", "shr"};
};
enum class CompareKind : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
template <> struct EnumNames<CompareKind> {
  static constexpr std::array names{"eq", "ne", "lt", "le", "gt", "ge"};
};
enum class ActKind : uint8_t {
  Gelu, GeluApprox, Silu, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Neg, Abs,
  Sin, Cos, Tan, Atan, Round, Erf, Floor, Ceil, Reciprocal, Sign, Softplus, Asin, Acos, Not
};
template <> struct EnumNames<ActKind> {
  static constexpr std::array names{"gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp",
                                    "log", "sqrt", "rsqrt", "neg", "abs", "sin", "cos", "tan",
                                    "atan", "round", "erf", "floor", "ceil", "reciprocal", "sign",
                                    "softplus", "asin", "acos", "not"};
};
enum class ReduceKind : uint8_t { Sum, Mean, Max, Min, Prod };
template <> struct EnumNames<ReduceKind> {
  static constexpr std::array names{"sum", "mean", "max", "min", "prod"};
};
enum class RopeStyle : uint8_t { NeoX, GptJ };
template <> struct EnumNames<RopeStyle> { static constexpr std::array names{"neox", "gptj"}; };
enum class MaskKind : uint8_t { None, Causal, SlidingWindow, Custom, Bias, Positions };
template <> struct EnumNames<MaskKind> {
  static constexpr std::array names{"none", "causal", "sliding_window", "custom", "bias", "positions"};
};
enum class AttnLayout : uint8_t { BSHD, BHSD };
template <> struct EnumNames<AttnLayout> { static constexpr std::array names{"bshd", "bhsd"}; };
enum class PoolKind : uint8_t { Max, Avg };
template <> struct EnumNames<PoolKind> { static constexpr std::array names{"max", "avg"}; };
enum class ResizeMode : uint8_t { Nearest, Linear };
template <> struct EnumNames<ResizeMode> { static constexpr std::array names{"nearest", "linear"}; };
enum class ResizeCoord : uint8_t { HalfPixel, Asymmetric, AlignCorners, PytorchHalfPixel };
template <> struct EnumNames<ResizeCoord> {
  static constexpr std::array names{"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"};
};
enum class NearestRound : uint8_t { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };
template <> struct EnumNames<NearestRound> {
  static constexpr std::array names{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
};
enum class PadMode : uint8_t { Constant, Reflect, Edge };
template <> struct EnumNames<PadMode> { static constexpr std::array names{"constant", "reflect", "edge"}; };
// Block formats of DequantMatMul's weight (the GGUF / ggml block layouts, src/quant/ggml_blocks.h).
// F16 and BF16: plain 16-bit floats, taken in "blocks" of 32 values (64 bytes, no scale), so that a
// 16-bit GGUF matrix stays 2 bytes a weight in memory (K a multiple of 32).
enum class QuantFormat : uint8_t { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16 };
template <> struct EnumNames<QuantFormat> {
  static constexpr std::array names{"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
                                    "q3_k", "q4_k", "q5_k", "q6_k", "f16",  "bf16"};
};
// Values and bytes per block of a format (Q4_0: 32 values in 18 bytes, Q4_K: 256 in 144, ...).
struct QuantBlock {
  int64_t elements = 0;
  int64_t bytes = 0;
};
QuantBlock quant_block(QuantFormat f);
// Recurrent: the cell of each time step and the direction(s) the sequence is walked in.
enum class RnnCell : uint8_t { Rnn, Gru, Lstm };
template <> struct EnumNames<RnnCell> { static constexpr std::array names{"rnn", "gru", "lstm"}; };
enum class RnnDirection : uint8_t { Forward, Reverse, Bidirectional };
template <> struct EnumNames<RnnDirection> {
  static constexpr std::array names{"forward", "reverse", "bidirectional"};
};
enum class RegionStepKind : uint8_t { Binary, Compare, Activation, Cast, Where };
template <> struct EnumNames<RegionStepKind> {
  static constexpr std::array names{"binary", "compare", "activation", "cast", "where"};
};

// Shorthand for the common members.
#define RLX_OP_HEADER(NAME, MIN_IN, MAX_IN)                      \
  static constexpr const char* kName = NAME;                     \
  static constexpr int kMinInputs = MIN_IN;                      \
  static constexpr int kMaxInputs = MAX_IN;                      \
  std::vector<Shape> infer(std::span<const Shape> in) const;

namespace ops {

// ---- leaves ----------------------------------------------------------------
// The node's declared shape is its output (inputs: 0). Inputs are fed at run time.
struct Input {
  RLX_OP_HEADER("input", 0, 0)
  std::string name;
  Shape shape;
  template <class V> void visit(V&& v) { v("name", name); v("shape", shape); }
};
// Weights set with CompiledGraph::set_param (or carried in the graph's JSON side file).
struct Param {
  RLX_OP_HEADER("param", 0, 0)
  std::string name;
  Shape shape;
  template <class V> void visit(V&& v) { v("name", name); v("shape", shape); }
};
struct Constant {
  RLX_OP_HEADER("constant", 0, 0)
  Tensor value;
  template <class V> void visit(V&& v) { v("value", value); }
};

// ---- elementwise -----------------------------------------------------------
// Numpy-broadcast binary op; both operands must have the same dtype. And/Or/Xor take bool
// (logical) or integers (bitwise). Shl/Shr shift unsigned integers left / right by rhs bits; a
// shift by the bit width or more gives 0. Mod is the floored (Python) modulus, FMod the
// truncated (C) one.
struct Binary {
  RLX_OP_HEADER("binary", 2, 2)
  BinaryKind kind = BinaryKind::Add;
  template <class V> void visit(V&& v) { v("kind", kind); }
};
// Broadcast comparison -> bool.
struct Compare {
  RLX_OP_HEADER("compare", 2, 2)
  CompareKind kind = CompareKind::Eq;
  template <class V> void visit(V&& v) { v("kind", kind); }
};
// [cond(bool), a, b] broadcast together; a and b share a dtype.
struct Where {
  RLX_OP_HEADER("where", 3, 3)
  template <class V> void visit(V&&) {}
};
// Unary elementwise. Float-only kinds reject integer inputs; Neg/Abs/Relu/Sign also take ints;
// Not takes bool (logical) and integers (bitwise). Round is half-to-even. Gelu is the exact erf form, GeluApprox the tanh form.
struct Activation {
  RLX_OP_HEADER("activation", 1, 1)
  ActKind kind = ActKind::Relu;
  template <class V> void visit(V&& v) { v("kind", kind); }
};
// Converts values (not bits). Float->int truncates toward zero; ->bool is (x != 0). To and from
// the storage-only dtypes by rlx/dtype_narrow.h: `saturate` (float8 targets: out-of-range
// values clamp to the largest finite value, else become inf/NaN) and `round_mode` (e8m0
// targets) are ONNX Cast's attributes; they change nothing for other targets.
struct Cast {
  RLX_OP_HEADER("cast", 1, 1)
  DType to = DType::F32;
  bool saturate = true;
  E8M0Round round_mode = E8M0Round::Up;
  NarrowCast narrow() const { return {saturate, round_mode}; }
  template <class V> void visit(V&& v) {
    v("to", to);
    v("saturate", saturate);
    v("round_mode", round_mode);
  }
};

// ---- shape -----------------------------------------------------------------
// New dims with at most one -1 (inferred); 0 is a real zero-size dim.
struct Reshape {
  RLX_OP_HEADER("reshape", 1, 1)
  std::vector<Dim> shape;
  template <class V> void visit(V&& v) { v("shape", shape); }
};
struct Transpose {
  RLX_OP_HEADER("transpose", 1, 1)
  std::vector<int64_t> perm;
  template <class V> void visit(V&& v) { v("perm", perm); }
};
// Slice [start, start+len) of one axis (negative axis allowed; start must be in range).
struct Narrow {
  RLX_OP_HEADER("narrow", 1, 1)
  int64_t axis = 0;
  int64_t start = 0;
  int64_t len = 0;
  template <class V> void visit(V&& v) { v("axis", axis); v("start", start); v("len", len); }
};
struct Concat {
  RLX_OP_HEADER("concat", 1, -1)
  int64_t axis = 0;
  template <class V> void visit(V&& v) { v("axis", axis); }
};
// Numpy broadcast of the input to `shape` (rank may grow).
struct Expand {
  RLX_OP_HEADER("expand", 1, 1)
  std::vector<Dim> shape;
  template <class V> void visit(V&& v) { v("shape", shape); }
};
struct Reverse {
  RLX_OP_HEADER("reverse", 1, 1)
  std::vector<int64_t> axes;
  template <class V> void visit(V&& v) { v("axes", axes); }
};
struct StopGradient {
  RLX_OP_HEADER("stop_gradient", 1, 1)
  template <class V> void visit(V&&) {}
};

// ---- indexing --------------------------------------------------------------
// [data, indices(int)] -> data.shape[:axis] + indices.shape + data.shape[axis+1:].
// Negative indices count from the end; out of range -> rlx::Error at run time.
struct Gather {
  RLX_OP_HEADER("gather", 2, 2)
  int64_t axis = 0;
  template <class V> void visit(V&& v) { v("axis", axis); }
};
// [data, indices(int), updates]: indices and updates have the same shape and data's rank;
// out = data; out[i0..][idx[i]][..] += updates[i] along `axis` (torch.scatter_add).
struct ScatterAdd {
  RLX_OP_HEADER("scatter_add", 3, 3)
  int64_t axis = 0;
  template <class V> void visit(V&& v) { v("axis", axis); }
};
// [cache (B, M, ...), rows (B, S, ...), positions (S) or (B, S) integer] -> cache's shape and
// dtype: the cache with rows[b, s] written at row positions[(b,) s] of axis 1 (a KV cache at
// run-time positions; (B, S) positions: each sequence of a batch at its own); the other rows
// unchanged. Every position must be in [0, M) (rlx::Error otherwise, before anything is
// written); when two rows of a batch entry name one position the later row wins. When the
// cache is carried state (CompiledGraph::bind_state) the CPU writes only the S rows in place
// (docs/generation.md).
struct CacheWrite {
  RLX_OP_HEADER("cache_write", 3, 3)
  template <class V> void visit(V&&) {}
};
// -> i64 index of the first max (or min) along axis; select_last picks the last tie.
struct ArgMax {
  RLX_OP_HEADER("argmax", 1, 1)
  int64_t axis = 0;
  bool keep_dims = false;
  bool select_last = false;
  template <class V> void visit(V&& v) { v("axis", axis); v("keep_dims", keep_dims); v("select_last", select_last); }
};
struct ArgMin {
  RLX_OP_HEADER("argmin", 1, 1)
  int64_t axis = 0;
  bool keep_dims = false;
  bool select_last = false;
  template <class V> void visit(V&& v) { v("axis", axis); v("keep_dims", keep_dims); v("select_last", select_last); }
};
// Two outputs: values (input dtype) and i64 indices, sorted (largest first when largest);
// ties keep the lower index first.
struct TopK {
  RLX_OP_HEADER("topk", 1, 1)
  int64_t k = 1;
  int64_t axis = -1;
  bool largest = true;
  template <class V> void visit(V&& v) { v("k", k); v("axis", axis); v("largest", largest); }
};
struct Cumsum {
  RLX_OP_HEADER("cumsum", 1, 1)
  int64_t axis = 0;
  bool exclusive = false;
  bool reverse = false;
  template <class V> void visit(V&& v) { v("axis", axis); v("exclusive", exclusive); v("reverse", reverse); }
};

// ---- contraction -----------------------------------------------------------
// numpy matmul: rank >= 1 operands (1-d promoted and squeezed back), batch dims broadcast.
struct MatMul {
  RLX_OP_HEADER("matmul", 2, 2)
  template <class V> void visit(V&&) {}
};
// XLA-style dot: output = batch dims, lhs free dims (in order), rhs free dims (in order).
struct DotGeneral {
  RLX_OP_HEADER("dot_general", 2, 2)
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  template <class V> void visit(V&& v) {
    v("lhs_batch", lhs_batch); v("rhs_batch", rhs_batch);
    v("lhs_contract", lhs_contract); v("rhs_contract", rhs_contract);
  }
};

// Integer product of 8-bit operands with zero points (ONNX MatMulInteger):
// [a (..., M, K) u8|i8, b (..., K, N) u8|i8, a_zero (a's dtype), b_zero (b's dtype)] -> (..., M, N) i32,
//   y = sum_k (a - a_zero) * (b - b_zero), exact (the sum wraps modulo 2^32 past the int32 range).
// numpy matmul geometry (rank >= 1, 1-d operands promoted and squeezed back, batch dims broadcast).
// a_zero: one value (every dim 1), or one per row of a (a's dims with K replaced by 1; a of rank
// >= 2); b_zero: one value, or one per column of b (b's dims with K replaced by 1; b of rank >= 2).
struct MatMulInteger {
  RLX_OP_HEADER("matmul_integer", 4, 4)
  template <class V> void visit(V&&) {}
};

// ---- sequence --------------------------------------------------------------
// A recurrent layer over a whole sequence (ONNX RNN / GRU / LSTM), G = 1 / 3 / 4 gates,
// D = 1 (forward, reverse) or 2 (bidirectional) directions, H = hidden_size:
// [x (S, B, I), w (D, G*H, I), r (D, G*H, H), b (D, 2*G*H)?, initial_h (D, B, H)?,
//  initial_c (D, B, H)?, p (D, 3*H)?] -> [y (S, D, B, H), y_h (D, B, H), y_c (D, B, H) (lstm only)].
// batch_first: x (B, S, I), initial_h / initial_c (B, D, H), y (B, S, D, H), y_h / y_c (B, D, H).
// The optional inputs are present as has_bias / has_initial_h / has_initial_c (lstm) /
// has_peepholes (lstm) say, in that order after r. S may be symbolic; every other dim must agree.
// Gate order of w, r and b (w's biases, then r's): rnn i; gru z, r, h; lstm i, o, f, c
// (peepholes i, o, f). With X = x_t W^T + Wb, Hr = h R^T + Rb, per direction activations f, g, h
// (`activations`: 1 / 2 / 3 per direction, the first direction's first; empty = Tanh / Sigmoid,
// Tanh / Sigmoid, Tanh, Tanh for each), clip(v) = min(max(v, -clip), clip) when clip > 0:
//   rnn:  h = f(clip(X + Hr))
//   gru:  z = f(clip(Xz + Hrz)), r = f(clip(Xr + Hrr)),
//         n = g(clip(Xh + (r * h) Rh^T + Rbh))  or, linear_before_reset, g(clip(Xh + r * Hrh));
//         h = (1 - z) * n + z * h
//   lstm: i = f(clip(Xi + Hri + Pi * c)), f_ = f(clip(Xf + Hrf + Pf * c)), c' = g(clip(Xc + Hrc)),
//         c = f_ * c + i * c', o = f(clip(Xo + Hro + Po * c)), h = o * h(c)
// starting from initial_h / initial_c (zeros when absent). The reverse direction (and the second
// one of bidirectional) walks t = S-1 .. 0. y holds every step's h at its time index, y_h / y_c the
// last step's h and c. Activations: Sigmoid, Tanh, Relu.
struct Recurrent {
  RLX_OP_HEADER("recurrent", 3, 7)
  RnnCell cell = RnnCell::Lstm;
  RnnDirection direction = RnnDirection::Forward;
  int64_t hidden_size = 0;
  bool batch_first = false;
  std::vector<ActKind> activations;
  double clip = 0.0;  // 0: none
  bool linear_before_reset = false;  // gru only
  bool has_bias = false, has_initial_h = false, has_initial_c = false, has_peepholes = false;
  template <class V> void visit(V&& v) {
    v("cell", cell); v("direction", direction); v("hidden_size", hidden_size); v("batch_first", batch_first);
    v("activations", activations); v("clip", clip); v("linear_before_reset", linear_before_reset);
    v("has_bias", has_bias); v("has_initial_h", has_initial_h); v("has_initial_c", has_initial_c);
    v("has_peepholes", has_peepholes);
  }
  // Gates per cell (1, 3, 4), directions (1, 2) and activations per direction (1, 2, 3).
  int64_t gates() const { return cell == RnnCell::Rnn ? 1 : cell == RnnCell::Gru ? 3 : 4; }
  int64_t directions() const { return direction == RnnDirection::Bidirectional ? 2 : 1; }
  int64_t activations_per_direction() const { return cell == RnnCell::Rnn ? 1 : cell == RnnCell::Gru ? 2 : 3; }
  // Activation k (0 = f, 1 = g, 2 = h) of direction d, the default when `activations` is empty.
  ActKind activation(int64_t d, int64_t k) const {
    if (!activations.empty()) return activations[static_cast<size_t>(d * activations_per_direction() + k)];
    return cell == RnnCell::Rnn || k > 0 ? ActKind::Tanh : ActKind::Sigmoid;
  }
  // The input index of b / initial_h / initial_c / p, -1 when absent.
  int bias_input() const { return has_bias ? 3 : -1; }
  int initial_h_input() const { return has_initial_h ? 3 + has_bias : -1; }
  int initial_c_input() const { return has_initial_c ? 3 + has_bias + has_initial_h : -1; }
  int peepholes_input() const { return has_peepholes ? 3 + has_bias + has_initial_h + has_initial_c : -1; }
  // The number of outputs: y, y_h and (lstm) y_c.
  size_t num_outputs() const { return cell == RnnCell::Lstm ? 3 : 2; }
};

// ---- reductions ------------------------------------------------------------
// axes empty = all axes. Negative axes allowed, duplicates rejected.
struct Reduce {
  RLX_OP_HEADER("reduce", 1, 1)
  ReduceKind kind = ReduceKind::Sum;
  std::vector<int64_t> axes;
  bool keep_dims = false;
  template <class V> void visit(V&& v) { v("kind", kind); v("axes", axes); v("keep_dims", keep_dims); }
};
struct Softmax {
  RLX_OP_HEADER("softmax", 1, 1)
  int64_t axis = -1;
  template <class V> void visit(V&& v) { v("axis", axis); }
};
struct LogSoftmax {
  RLX_OP_HEADER("log_softmax", 1, 1)
  int64_t axis = -1;
  template <class V> void visit(V&& v) { v("axis", axis); }
};

// ---- norms -----------------------------------------------------------------
// [x, gamma, beta?]: normalizes over dims [axis, rank); gamma/beta have shape x.shape[axis:].
struct LayerNorm {
  RLX_OP_HEADER("layer_norm", 2, 3)
  int64_t axis = -1;
  double eps = 1e-5;
  template <class V> void visit(V&& v) { v("axis", axis); v("eps", eps); }
};
// [x, gamma, beta?]: x / sqrt(mean(x^2) + eps) * gamma (+ beta) over dims [axis, rank).
struct RmsNorm {
  RLX_OP_HEADER("rms_norm", 2, 3)
  int64_t axis = -1;
  double eps = 1e-6;
  template <class V> void visit(V&& v) { v("axis", axis); v("eps", eps); }
};
// [x (N, C, ...), gamma[C], beta[C]]: statistics over each group of C/groups channels.
struct GroupNorm {
  RLX_OP_HEADER("group_norm", 3, 3)
  int64_t groups = 1;
  double eps = 1e-5;
  template <class V> void visit(V&& v) { v("groups", groups); v("eps", eps); }
};
// [x (N, C, H, W), gamma[C], beta[C]]: LayerNorm over C at each (n, h, w).
struct LayerNorm2d {
  RLX_OP_HEADER("layer_norm_2d", 3, 3)
  double eps = 1e-6;
  template <class V> void visit(V&& v) { v("eps", eps); }
};
// [x (N, C, ...), scale[C], bias[C], mean[C], var[C]].
struct BatchNormInference {
  RLX_OP_HEADER("batch_norm_inference", 5, 5)
  double eps = 1e-5;
  template <class V> void visit(V&& v) { v("eps", eps); }
};

// ---- transformer -----------------------------------------------------------
// [x (B, S, H, head_dim), cos (S, n_rot/2) or (B, S, n_rot/2), sin (same)].
// Rotates the first n_rot dims of each head; NeoX pairs (i, i + n_rot/2), GptJ pairs (2i, 2i+1).
struct Rope {
  RLX_OP_HEADER("rope", 3, 3)
  int64_t head_dim = 0;
  int64_t n_rot = 0;
  RopeStyle style = RopeStyle::NeoX;
  template <class V> void visit(V&& v) { v("head_dim", head_dim); v("n_rot", n_rot); v("style", style); }
};
// [q, k, v, mask?]. BSHD: q (B, Sq, Hq, D), k/v (B, Skv, Hkv, D); BHSD: (B, H, S, D).
// Output has q's layout and shape. Hq = num_heads, Hkv = num_kv_heads (divides Hq).
// score_scale 0 means 1/sqrt(head_dim); softcap > 0 applies softcap*tanh(s/softcap).
// Query i sits at position Skv - Sq + i (decode with a KV cache).
// Causal: key j visible when j <= pos; SlidingWindow: also j > pos - window.
// Custom: mask (B, Skv), nonzero = keep (key padding). Bias: additive, broadcastable to (B, Hq, Sq, Skv).
// Positions: mask (Sq) or (B, Sq) integer positions; key j visible to query row i when
// j <= positions[(b,) i] (a KV cache's valid prefix; kernels read only keys up to it, a run-time
// length); a negative position hides every key.
// A row with every key masked outputs zeros.
struct Attention {
  RLX_OP_HEADER("attention", 3, 4)
  int64_t num_heads = 1;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 0;
  MaskKind mask_kind = MaskKind::None;
  int64_t window = 0;
  double score_scale = 0.0;
  double softcap = 0.0;
  AttnLayout layout = AttnLayout::BSHD;
  template <class V> void visit(V&& v) {
    v("num_heads", num_heads); v("num_kv_heads", num_kv_heads); v("head_dim", head_dim);
    v("mask_kind", mask_kind); v("window", window); v("score_scale", score_scale);
    v("softcap", softcap); v("layout", layout);
  }
};

// ---- vision ----------------------------------------------------------------
// [x (N, C, d1..dk), w (Cout, C/groups, k1..kk), bias (Cout)?], k = 1..3.
// pads = [begin_1..begin_k, end_1..end_k]; empty stride/dilation/pads mean 1/1/0.
struct Conv {
  RLX_OP_HEADER("conv", 2, 3)
  std::vector<int64_t> stride, pads, dilation;
  int64_t groups = 1;
  template <class V> void visit(V&& v) { v("stride", stride); v("pads", pads); v("dilation", dilation); v("groups", groups); }
};
// Integer conv of 8-bit operands with zero points (ONNX ConvInteger): [x (N, C, d1..dk) u8|i8,
// w (Cout, C/groups, k1..kk) u8|i8, x_zero (one value, x's dtype), w_zero (one value or (Cout),
// w's dtype)] -> (N, Cout, o1..ok) i32, k = 1..3: conv(x - x_zero, w - w_zero), exact (the sum
// wraps modulo 2^32 past the int32 range); padding reads x_zero (0 after the subtraction).
// Attributes as Conv's.
struct ConvInteger {
  RLX_OP_HEADER("conv_integer", 4, 4)
  std::vector<int64_t> stride, pads, dilation;
  int64_t groups = 1;
  template <class V> void visit(V&& v) { v("stride", stride); v("pads", pads); v("dilation", dilation); v("groups", groups); }
};
// 2-d: [x (N, Cin, H, W), w (Cin, Cout/groups, kh, kw), bias (Cout)?].
// out = (in - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + output_padding + 1.
struct ConvTranspose {
  RLX_OP_HEADER("conv_transpose", 2, 3)
  std::vector<int64_t> stride, pads, dilation, output_padding;
  int64_t groups = 1;
  template <class V> void visit(V&& v) {
    v("stride", stride); v("pads", pads); v("dilation", dilation);
    v("output_padding", output_padding); v("groups", groups);
  }
};
// x (N, C, d1..dk), k = 1..3. Padded positions are ignored by Max; Avg divides by the
// window's full size when count_include_pad, else by the count of real elements.
struct Pool {
  RLX_OP_HEADER("pool", 1, 1)
  PoolKind kind = PoolKind::Max;
  std::vector<int64_t> kernel, stride, pads, dilation;
  bool count_include_pad = false;
  bool ceil_mode = false;
  template <class V> void visit(V&& v) {
    v("kind", kind); v("kernel", kernel); v("stride", stride); v("pads", pads);
    v("dilation", dilation); v("count_include_pad", count_include_pad); v("ceil_mode", ceil_mode);
  }
};
// Per-axis scales (one per dim of x; out = floor(in * scale)) or explicit sizes (non-empty wins).
// Linear interpolates every axis whose scale != 1 (n-linear).
struct Resize {
  RLX_OP_HEADER("resize", 1, 1)
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoord coord = ResizeCoord::HalfPixel;
  NearestRound nearest = NearestRound::RoundPreferFloor;
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  template <class V> void visit(V&& v) {
    v("mode", mode); v("coord", coord); v("nearest", nearest); v("scales", scales); v("sizes", sizes);
  }
};
// pads = [begin_0..begin_{r-1}, end_0..end_{r-1}], negative pads crop.
struct Pad {
  RLX_OP_HEADER("pad", 1, 1)
  PadMode mode = PadMode::Constant;
  std::vector<int64_t> pads;
  double value = 0.0;
  template <class V> void visit(V&& v) { v("mode", mode); v("pads", pads); v("value", value); }
};
// x (N, C, H, W) -> (N, C*kh*kw, out_h*out_w), torch.nn.functional.unfold order.
struct Im2Col {
  RLX_OP_HEADER("im2col", 1, 1)
  std::vector<int64_t> kernel, stride, pads, dilation;
  template <class V> void visit(V&& v) { v("kernel", kernel); v("stride", stride); v("pads", pads); v("dilation", dilation); }
};

// ---- random / sampling -----------------------------------------------------
// Counter-based (Philox-4x32-10) streams: element i of the output depends only on
// (seed, offset, i). Optional input: an i64 scalar offset (e.g. the decode step).
struct RngUniform {
  RLX_OP_HEADER("rng_uniform", 0, 1)
  Shape shape;
  double low = 0.0, high = 1.0;
  uint64_t seed = 0;
  template <class V> void visit(V&& v) { v("shape", shape); v("low", low); v("high", high); v("seed", seed); }
};
struct RngNormal {
  RLX_OP_HEADER("rng_normal", 0, 1)
  Shape shape;
  double mean = 0.0, stddev = 1.0;
  uint64_t seed = 0;
  template <class V> void visit(V&& v) { v("shape", shape); v("mean", mean); v("stddev", stddev); v("seed", seed); }
};
// [logits (B, V) or (V), offset(i64 scalar)?] -> i64 token ids (B) or scalar.
// temperature 0 = greedy argmax; top_k 0 = off; top_p 1 = off.
struct Sample {
  RLX_OP_HEADER("sample", 1, 2)
  int64_t top_k = 0;
  double top_p = 1.0;
  double temperature = 1.0;
  uint64_t seed = 0;
  template <class V> void visit(V&& v) { v("top_k", top_k); v("top_p", top_p); v("temperature", temperature); v("seed", seed); }
};

// ---- control flow ----------------------------------------------------------
// [cond (bool scalar), operands...]. Each branch is a Graph whose Input nodes, in node
// order, receive the operands; both branches' outputs must agree in count, dtype and shape.
struct If {
  RLX_OP_HEADER("if", 1, -1)
  SubgraphPtr then_branch, else_branch;
  template <class V> void visit(V&& v) { v("then_branch", then_branch); v("else_branch", else_branch); }
};
// [carried...]. cond: carried -> bool scalar; body: carried -> next carried (same shapes).
// Runs while cond is true, at most max_iterations times (0 = no limit); outputs the final
// carried values (the inputs themselves when the body never runs).
struct While {
  RLX_OP_HEADER("while", 1, -1)
  int64_t max_iterations = 0;
  SubgraphPtr cond, body;
  template <class V> void visit(V&& v) { v("max_iterations", max_iterations); v("cond", cond); v("body", body); }
};

// ---- fused ops (created by the optimizer; executable everywhere) -----------
// [x, w, bias?, residual?]: act(x @ w + bias) + residual. bias: rank <= 1 over the last axis;
// residual (present when `residual` is set, always the last input): exactly the product's shape.
struct FusedMatMulBiasAct {
  RLX_OP_HEADER("fused_matmul_bias_act", 2, 4)
  std::optional<ActKind> activation;
  bool residual = false;
  // Whether a node of this op with `num_inputs` operands has a bias (input 2).
  bool has_bias(size_t num_inputs) const { return num_inputs > (residual ? 3u : 2u); }
  template <class V> void visit(V&& v) { v("activation", activation); v("residual", residual); }
};
// [x, residual, gamma, beta?]: LayerNorm(x + residual) over the last axis.
struct FusedResidualLN {
  RLX_OP_HEADER("fused_residual_ln", 3, 4)
  bool has_bias = false;
  double eps = 1e-5;
  template <class V> void visit(V&& v) { v("has_bias", has_bias); v("eps", eps); }
};
// [x, residual, gamma, beta?]: RmsNorm(x + residual) over the last axis.
struct FusedResidualRmsNorm {
  RLX_OP_HEADER("fused_residual_rms_norm", 3, 4)
  bool has_bias = false;
  double eps = 1e-6;
  template <class V> void visit(V&& v) { v("has_bias", has_bias); v("eps", eps); }
};
// [x (..., 2N)] -> (..., N). gate_first: silu(x[..,:N]) * x[..,N:]; else x[..,:N] * silu(x[..,N:]).
struct FusedSwiGLU {
  RLX_OP_HEADER("fused_swiglu", 1, 1)
  bool gate_first = false;
  template <class V> void visit(V&& v) { v("gate_first", gate_first); }
};
// [hidden (B, S, E), qkv_w (E, 3E), out_w (E, E), mask (B, S) key padding, qkv_b (3E)?, out_b (E)?,
//  cos?, sin? (when has_rope)] with E = num_heads * head_dim:
// qkv = hidden @ qkv_w + qkv_b; q, k, v = split(qkv); attention with the custom mask;
// out = attn @ out_w + out_b.
struct FusedAttentionBlock {
  RLX_OP_HEADER("fused_attention_block", 4, 8)
  int64_t num_heads = 1;
  int64_t head_dim = 0;
  bool has_bias = true;
  bool has_rope = false;
  template <class V> void visit(V&& v) { v("num_heads", num_heads); v("head_dim", head_dim); v("has_bias", has_bias); v("has_rope", has_rope); }
};
// Post-norm BERT layer, inputs [hidden, qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b, fc1_w,
// fc1_b, fc2_w, fc2_b, ln2_g, ln2_b, mask]:
//   a = attention_block(hidden); h = LN1(hidden + a); f = act(h @ fc1_w + fc1_b) @ fc2_w + fc2_b;
//   out = LN2(h + f).
struct FusedTransformerLayer {
  RLX_OP_HEADER("fused_transformer_layer", 14, 14)
  int64_t num_heads = 1;
  int64_t head_dim = 0;
  double eps = 1e-12;
  ActKind activation = ActKind::Gelu;
  template <class V> void visit(V&& v) { v("num_heads", num_heads); v("head_dim", head_dim); v("eps", eps); v("activation", activation); }
};
// One step of an ElementwiseRegion. args: value >= 0 is the region's external input of that
// index; value < 0 is the result of step (-value - 1). `op` holds the BinaryKind, CompareKind
// or ActKind as an integer; `to` is the Cast target.
struct RegionStep {
  RegionStepKind kind = RegionStepKind::Binary;
  int32_t op = 0;
  DType to = DType::F32;
  std::vector<int32_t> args;
  bool operator==(const RegionStep&) const = default;
};
// A straight-line chain of elementwise steps over broadcast external inputs; the result of
// the last step is the output. Each input broadcasts to the output shape (numpy rules).
struct ElementwiseRegion {
  RLX_OP_HEADER("elementwise_region", 1, -1)
  std::vector<RegionStep> steps;
  template <class V> void visit(V&& v) { v("steps", steps); }
};
// [x, w, a, b]: x @ w + scale * ((x @ a) @ b).
struct LoraMatMul {
  RLX_OP_HEADER("lora_matmul", 4, 4)
  double scale = 1.0;
  template <class V> void visit(V&& v) { v("scale", scale); }
};
// [x (..., M, K) f32/f16/bf16, w (N, row_bytes) u8] -> (..., M, N) in x's dtype:
// y = x @ dequant(w)^T, where w holds N rows of a logical (N, K) weight (rows = output features,
// as GGUF stores them), each row K / block.elements blocks of `format` one after another
// (row_bytes = K / block.elements * block.bytes). `k` is K (a multiple of the block size).
struct DequantMatMul {
  RLX_OP_HEADER("dequant_matmul", 2, 2)
  QuantFormat format = QuantFormat::Q8_0;
  int64_t k = 0;
  template <class V> void visit(V&& v) { v("format", format); v("k", k); }
};
// MoE: [x (M, K), w (E, K, N), idx (M) int] -> (M, N); row m uses expert idx[m].
struct GroupedMatMul {
  RLX_OP_HEADER("grouped_matmul", 3, 3)
  template <class V> void visit(V&&) {}
};

}  // namespace ops

using ops::RegionStep;

#undef RLX_OP_HEADER

using Op = std::variant<
    ops::Input, ops::Param, ops::Constant,
    ops::Binary, ops::Compare, ops::Where, ops::Activation, ops::Cast,
    ops::Reshape, ops::Transpose, ops::Narrow, ops::Concat, ops::Expand, ops::Reverse, ops::StopGradient,
    ops::Gather, ops::ScatterAdd, ops::ArgMax, ops::ArgMin, ops::TopK, ops::Cumsum,
    ops::MatMul, ops::DotGeneral,
    ops::Reduce, ops::Softmax, ops::LogSoftmax,
    ops::LayerNorm, ops::RmsNorm, ops::GroupNorm, ops::LayerNorm2d, ops::BatchNormInference,
    ops::Rope, ops::Attention,
    ops::Conv, ops::ConvTranspose, ops::Pool, ops::Resize, ops::Pad, ops::Im2Col,
    ops::RngUniform, ops::RngNormal, ops::Sample,
    ops::If, ops::While,
    ops::FusedMatMulBiasAct, ops::FusedResidualLN, ops::FusedResidualRmsNorm, ops::FusedSwiGLU,
    ops::FusedAttentionBlock, ops::FusedTransformerLayer, ops::ElementwiseRegion,
    ops::LoraMatMul, ops::GroupedMatMul, ops::DequantMatMul, ops::CacheWrite,
    ops::MatMulInteger, ops::ConvInteger, ops::Recurrent>;

// The op's name ("matmul", ...).
const char* op_name(const Op& op);
// Input, Param or Constant: a node whose value is given, not computed.
inline bool is_leaf_op(const Op& op) {
  return std::holds_alternative<ops::Input>(op) || std::holds_alternative<ops::Param>(op) ||
         std::holds_alternative<ops::Constant>(op);
}
// Arity check + inference: throws rlx::Error (without node context) on invalid operands.
std::vector<Shape> infer_op(const Op& op, std::span<const Shape> inputs);
// A one-line rendering of the attributes, e.g. "axis=-1 eps=1e-05".
std::string op_attrs_str(const Op& op);
// Structural equality of two ops (kind and every attribute; constants by bytes).
bool op_equal(const Op& a, const Op& b);

}  // namespace rlx
