// Shape inference for the sequence family: Recurrent (ONNX RNN / GRU / LSTM over a whole sequence).
//
// Dims are compared with `dims_compatible` (ir/infer_util.h): equal, or at least one side
// symbolic (the sequence length usually is; the CPU kernel sees concrete shapes).
#include <cmath>
#include <string>

#include "ir/infer_util.h"
#include "rlx/ops.h"

namespace rlx {
namespace {

using infer::dims_compatible;

constexpr const char* kOp = "recurrent";

[[noreturn]] void fail(const std::string& msg) { throw Error(std::string(kOp) + ": " + msg); }

// Operand `s` (named `what`, input `index`) must have `want` (dims compatible) and x's dtype.
void require_shape(const char* what, size_t index, const Shape& s, const std::vector<Dim>& want, const Shape& x,
                   const std::string& layout) {
  bool ok = s.rank() == static_cast<int64_t>(want.size());
  for (size_t i = 0; ok && i < want.size(); ++i) ok = dims_compatible(s.dims[i], want[i]);
  if (!ok)
    fail(std::string(what) + " (input " + std::to_string(index) + ") must have shape " + dims_str(want) + " " + layout +
         ", got " + s.str());
  if (s.dtype != x.dtype)
    fail(std::string(what) + " (input " + std::to_string(index) + ") must have x's dtype " + dtype_name(x.dtype) +
         ", got " + s.str());
}

}  // namespace

std::vector<Shape> ops::Recurrent::infer(std::span<const Shape> in) const {
  const size_t want_inputs = 3u + has_bias + has_initial_h + has_initial_c + has_peepholes;
  if (in.size() != want_inputs)
    fail("takes " + std::to_string(want_inputs) + " inputs (x, w, r" + (has_bias ? ", b" : "") +
         (has_initial_h ? ", initial_h" : "") + (has_initial_c ? ", initial_c" : "") + (has_peepholes ? ", p" : "") +
         " as has_bias / has_initial_h / has_initial_c / has_peepholes say), got " + std::to_string(in.size()));
  const std::string cell_name = enum_name(cell);
  if (static_cast<size_t>(cell) > 2) fail("invalid cell value");
  if (static_cast<size_t>(direction) > 2) fail("invalid direction value");
  if (hidden_size <= 0) fail("hidden_size must be >= 1, got " + std::to_string(hidden_size));
  if (!(clip >= 0) || std::isinf(clip)) fail("clip must be a finite value >= 0 (0: none)");
  if (linear_before_reset && cell != RnnCell::Gru)
    fail("linear_before_reset applies to the gru cell only (this one is " + cell_name + ")");
  if ((has_initial_c || has_peepholes) && cell != RnnCell::Lstm)
    fail(std::string(has_initial_c ? "initial_c" : "peepholes") + " apply to the lstm cell only (this one is " +
         cell_name + ")");
  const int64_t D = directions(), G = gates(), per_dir = activations_per_direction();
  if (!activations.empty()) {
    if (static_cast<int64_t>(activations.size()) != per_dir * D)
      fail("activations must list " + std::to_string(per_dir) + " per direction (" + std::to_string(per_dir * D) +
           " for " + enum_name(direction) + " " + cell_name + "), got " + std::to_string(activations.size()) +
           " (or none for the defaults)");
    for (ActKind a : activations)
      if (a != ActKind::Sigmoid && a != ActKind::Tanh && a != ActKind::Relu)
        fail(std::string("activation '") + enum_name(a) + "' is not supported (sigmoid, tanh, relu)");
  }

  const Shape& x = in[0];
  if (x.rank() != 3)
    fail("x must be rank 3 " + std::string(batch_first ? "(batch, seq, input)" : "(seq, batch, input)") + ", got " +
         x.str());
  if (!is_float(x.dtype)) fail("x must be a float tensor (f32, f16, bf16, f64), got " + x.str());
  const Dim S = batch_first ? x[1] : x[0], B = batch_first ? x[0] : x[1], I = x[2];
  const int64_t GH = infer::mul(G, hidden_size, "recurrent: gates x hidden_size");
  const Dim Dd(D), H(hidden_size);
  require_shape("w", 1, in[1], {Dd, Dim(GH), I}, x, "(directions, gates * hidden, input)");
  require_shape("r", 2, in[2], {Dd, Dim(GH), H}, x, "(directions, gates * hidden, hidden)");
  const std::vector<Dim> state = batch_first ? std::vector<Dim>{B, Dd, H} : std::vector<Dim>{Dd, B, H};
  const std::string state_layout = batch_first ? "(batch, directions, hidden)" : "(directions, batch, hidden)";
  if (has_bias)
    require_shape("b", static_cast<size_t>(bias_input()), in[static_cast<size_t>(bias_input())],
                  {Dd, Dim(infer::mul(2, GH, "recurrent: 2 x gates x hidden_size"))}, x,
                  "(directions, 2 * gates * hidden)");
  if (has_initial_h)
    require_shape("initial_h", static_cast<size_t>(initial_h_input()), in[static_cast<size_t>(initial_h_input())],
                  state, x, state_layout);
  if (has_initial_c)
    require_shape("initial_c", static_cast<size_t>(initial_c_input()), in[static_cast<size_t>(initial_c_input())],
                  state, x, state_layout);
  if (has_peepholes)
    require_shape("p", static_cast<size_t>(peepholes_input()), in[static_cast<size_t>(peepholes_input())],
                  {Dd, Dim(infer::mul(3, hidden_size, "recurrent: 3 x hidden_size"))}, x, "(directions, 3 * hidden)");

  std::vector<Shape> out;
  out.emplace_back(batch_first ? std::vector<Dim>{B, S, Dd, H} : std::vector<Dim>{S, Dd, B, H}, x.dtype);
  out.emplace_back(state, x.dtype);
  if (cell == RnnCell::Lstm) out.emplace_back(state, x.dtype);
  return out;
}

}  // namespace rlx
