#pragma once
// Builders of Conv / ConvTranspose / Pool ops and one-Conv graphs, shared by the parity cases
// and the CUDA conv tests (designated initializers would warn about every member left out).
#include <cstdint>
#include <utility>
#include <vector>

#include "rlx/rlx.h"

namespace rlx::testing {

inline ops::Conv conv_op(std::vector<int64_t> stride = {}, std::vector<int64_t> pads = {},
                         std::vector<int64_t> dilation = {}, int64_t groups = 1) {
  ops::Conv op;
  op.stride = std::move(stride), op.pads = std::move(pads), op.dilation = std::move(dilation), op.groups = groups;
  return op;
}

inline ops::ConvTranspose convt_op(std::vector<int64_t> stride = {}, std::vector<int64_t> pads = {},
                                   std::vector<int64_t> dilation = {}, std::vector<int64_t> output_padding = {},
                                   int64_t groups = 1) {
  ops::ConvTranspose op;
  op.stride = std::move(stride), op.pads = std::move(pads), op.dilation = std::move(dilation);
  op.output_padding = std::move(output_padding), op.groups = groups;
  return op;
}

inline ops::Pool pool_op(PoolKind kind, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                         std::vector<int64_t> pads = {}, bool count_include_pad = false, bool ceil_mode = false,
                         std::vector<int64_t> dilation = {}) {
  ops::Pool op;
  op.kind = kind, op.kernel = std::move(kernel), op.stride = std::move(stride), op.pads = std::move(pads);
  op.count_include_pad = count_include_pad, op.ceil_mode = ceil_mode, op.dilation = std::move(dilation);
  return op;
}

// One Conv: input x and param w (and param b when `bias`) of the given dims.
struct ConvCase {
  std::vector<int64_t> x, w, stride, pads, dilation;
  int64_t groups = 1;
  bool bias = false;
};

// The graph of one ConvCase in dtype t.
inline Graph conv_graph(const ConvCase& c, DType t) {
  Graph g;
  std::vector<Value> in{g.input("x", Shape::from(c.x, t)), g.param("w", Shape::from(c.w, t))};
  if (c.bias) in.push_back(g.param("b", Shape::of({c.w[0]}, t)));
  g.add_output(g.apply(conv_op(c.stride, c.pads, c.dilation, c.groups), in));
  return g;
}

}  // namespace rlx::testing
