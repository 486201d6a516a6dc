// Recurrent parity cases (ONNX RNN / GRU / LSTM layers): every cell, both layouts, bidirectional
// with every optional input, clip, linear_before_reset and per-direction activations. The CPU
// runs its kernel; Vulkan, WebGPU and CUDA run the layer unrolled by the shared legalize
// (passes/expand_recurrent.h), so these cases check the decomposition against the kernel.
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

// A layer on inputs x, w, r (and b, h0, c0, p as the op's flags say) of B=3, I=7, H=5, S steps.
Graph layer(const ops::Recurrent& op, int64_t S, DType t) {
  const int64_t B = 3, I = 7, H = op.hidden_size, D = op.directions(), GH = op.gates() * H;
  Graph g;
  std::vector<Value> in;
  in.push_back(g.input("x", op.batch_first ? Shape::of({B, S, I}, t) : Shape::of({S, B, I}, t)));
  in.push_back(g.input("w", Shape::of({D, GH, I}, t)));
  in.push_back(g.input("r", Shape::of({D, GH, H}, t)));
  const Shape state = op.batch_first ? Shape::of({B, D, H}, t) : Shape::of({D, B, H}, t);
  if (op.has_bias) in.push_back(g.input("b", Shape::of({D, 2 * GH}, t)));
  if (op.has_initial_h) in.push_back(g.input("h0", state));
  if (op.has_initial_c) in.push_back(g.input("c0", state));
  if (op.has_peepholes) in.push_back(g.input("p", Shape::of({D, 3 * H}, t)));
  for (Value v : g.apply_multi(op, in)) g.add_output(v);
  return g;
}

ops::Recurrent make(RnnCell cell, RnnDirection dir, bool batch_first, bool full) {
  ops::Recurrent op;
  op.cell = cell, op.direction = dir, op.hidden_size = 5, op.batch_first = batch_first;
  op.has_bias = op.has_initial_h = full;
  op.has_initial_c = op.has_peepholes = full && cell == RnnCell::Lstm;
  return op;
}

}  // namespace

void add_recurrent_cases(CaseList& l) {
  for (RnnCell cell : {RnnCell::Rnn, RnnCell::Gru, RnnCell::Lstm})
    for (DType t : {DType::F32, DType::F16}) {
      const std::string name = std::string(enum_name(cell)) + "_layer_" + dtype_name(t);
      add_case(l, "recurrent", name, [cell, t] {
        std::vector<CaseGraph> v;
        for (RnnDirection dir : {RnnDirection::Forward, RnnDirection::Reverse, RnnDirection::Bidirectional})
          for (bool bf : {false, true}) {
            const bool full = dir == RnnDirection::Bidirectional || bf;
            v.push_back({std::string(enum_name(dir)) + (bf ? " batch_first" : "") + (full ? " all inputs" : ""),
                         layer(make(cell, dir, bf, full), 6, t), ParityOptions{}});
          }
        ops::Recurrent op = make(cell, RnnDirection::Bidirectional, false, true);
        op.clip = 0.4;
        op.linear_before_reset = cell == RnnCell::Gru;
        if (cell == RnnCell::Rnn) op.activations = {ActKind::Relu, ActKind::Sigmoid};
        if (cell == RnnCell::Gru) op.activations = {ActKind::Sigmoid, ActKind::Relu, ActKind::Tanh, ActKind::Tanh};
        if (cell == RnnCell::Lstm)
          op.activations = {ActKind::Sigmoid, ActKind::Tanh, ActKind::Relu, ActKind::Tanh, ActKind::Sigmoid, ActKind::Tanh};
        v.push_back({"clip, activations" + std::string(cell == RnnCell::Gru ? ", linear_before_reset" : ""),
                     layer(op, 9, t), ParityOptions{}});
        return v;
      });
    }
}

}  // namespace rlx::testing
