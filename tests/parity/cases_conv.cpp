// Convolution-family parity cases: Conv 1-d / 2-d / 3-d over every attribute (groups incl.
// depthwise, strides, dilations, pads, bias), ConvTranspose, Max / Avg Pool (ceil mode, counted
// pads, NaN windows, asymmetric pads, dilation, small integers), Resize in every mode and
// coordinate rule, Im2Col.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "parity/parity_cases.h"
#include "support/conv_graphs.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string dt(DType t) { return dtype_name(t); }

std::string label(const ConvCase& c) {
  return "x" + dims_str(c.x) + " w" + dims_str(c.w) + " stride" + dims_str(c.stride) + " pads" + dims_str(c.pads) +
         " dil" + dims_str(c.dilation) + " groups " + std::to_string(c.groups) + (c.bias ? " +bias" : "");
}

std::vector<CaseGraph> conv_graphs(const std::vector<ConvCase>& cases, DType t) {
  std::vector<CaseGraph> v;
  for (const ConvCase& c : cases) {
    v.push_back({label(c), conv_graph(c, t), {}});
  }
  return v;
}

void add_conv(CaseList& l) {
  // 2-d: plain, depthwise, grouped with dilation and mixed strides, pointwise, asymmetric pads
  // that keep cuDNN's window count, large odd kernels, depthwise with a channel multiplier.
  const std::vector<ConvCase> conv2d = {
      {{2, 3, 9, 11}, {8, 3, 3, 3}, {}, {1, 1, 1, 1}, {}, 1, true},
      {{1, 8, 13, 7}, {8, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 8, true},
      {{2, 6, 10, 10}, {9, 2, 3, 3}, {1, 2}, {2, 1, 2, 1}, {2, 1}, 3, false},
      {{3, 5, 8, 8}, {4, 5, 1, 1}, {}, {}, {}, 1, false},
      {{1, 4, 8, 8}, {6, 4, 3, 3}, {2, 2}, {1, 1, 0, 0}, {}, 1, true},
      {{1, 2, 17, 5}, {3, 2, 5, 2}, {3, 1}, {2, 0, 2, 0}, {}, 1, true},
      {{2, 4, 6, 6}, {8, 1, 3, 3}, {}, {2, 2, 2, 2}, {2, 2}, 4, true},
  };
  const std::vector<ConvCase> conv1d = {
      {{2, 6, 29}, {4, 3, 5}, {2}, {2, 2}, {}, 2, true},
      {{1, 3, 16}, {5, 3, 3}, {}, {3, 3}, {3}, 1, false},
      {{3, 4, 7}, {4, 1, 3}, {}, {1, 1}, {}, 4, true},
  };
  const std::vector<ConvCase> conv3d = {
      {{1, 4, 5, 6, 7}, {6, 2, 3, 3, 3}, {1, 2, 1}, {1, 1, 1, 1, 1, 1}, {}, 2, true},
      {{2, 2, 4, 5, 3}, {3, 2, 2, 2, 2}, {}, {}, {1, 2, 1}, 1, false},
  };
  for (DType t : kFloats) {
    add_case(l, "conv", "conv2d_" + dt(t), [t, conv2d] { return conv_graphs(conv2d, t); });
    add_case(l, "conv", "conv1d_" + dt(t), [t, conv1d] { return conv_graphs(conv1d, t); });
    add_case(l, "conv", "conv3d_" + dt(t), [t, conv3d] { return conv_graphs(conv3d, t); });
  }
}

void add_conv_transpose(CaseList& l) {
  struct ConvTCase {
    std::vector<int64_t> x, w, stride, pads, dilation, output_padding;
    int64_t groups = 1;
    bool bias = false;
  };
  // w is (Cin, Cout/groups, kh, kw). Output padding, groups (depthwise too), dilation and
  // asymmetric pads whose output_padding + pad_begin - pad_end stays in [0, stride).
  const std::vector<ConvTCase> cases = {
      {{2, 4, 5, 6}, {4, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}, {}, {1, 1}, 1, true},
      {{1, 6, 7, 5}, {6, 2, 3, 3}, {}, {1, 1, 1, 1}, {}, {}, 3, true},
      {{2, 2, 4, 4}, {2, 5, 4, 4}, {2, 2}, {1, 1, 1, 1}, {}, {}, 1, false},
      {{1, 3, 5, 5}, {3, 2, 3, 3}, {2, 2}, {2, 2, 2, 2}, {2, 2}, {1, 0}, 1, true},
      {{1, 2, 4, 4}, {2, 2, 3, 3}, {2, 2}, {1, 1, 0, 0}, {}, {}, 1, false},
      {{1, 4, 6, 6}, {4, 1, 3, 3}, {2, 2}, {}, {}, {1, 1}, 4, true},
      {{3, 3, 3, 7}, {3, 4, 2, 3}, {3, 1}, {0, 1, 0, 1}, {}, {2, 0}, 1, true},
  };
  for (DType t : kFloats)
    add_case(l, "conv", "conv_transpose_" + dt(t), [t, cases] {
      std::vector<CaseGraph> v;
      for (const ConvTCase& c : cases) {
        Graph g;
        std::vector<Value> in{g.input("x", Shape::from(c.x, t)), g.param("w", Shape::from(c.w, t))};
        if (c.bias) in.push_back(g.param("b", Shape::of({c.w[1] * c.groups}, t)));
        g.add_output(g.apply(convt_op(c.stride, c.pads, c.dilation, c.output_padding, c.groups), in));
        v.push_back({"x" + dims_str(c.x) + " w" + dims_str(c.w) + " stride" + dims_str(c.stride) + " pads" +
                         dims_str(c.pads) + " dil" + dims_str(c.dilation) + " outpad" + dims_str(c.output_padding) +
                         " groups " + std::to_string(c.groups),
                     std::move(g), {}});
      }
      return v;
    });
}

void add_pool(CaseList& l) {
  struct PoolCase {
    std::vector<int64_t> x, kernel, stride, pads;
    bool ceil_mode = false;
  };
  const std::vector<PoolCase> cases = {
      {{2, 3, 9, 10}, {3, 3}, {2, 2}, {1, 1, 1, 1}, false},
      {{1, 4, 7, 7}, {2, 3}, {}, {}, false},
      {{1, 2, 8, 8}, {3, 2}, {3, 2}, {1, 0, 1, 0}, true},  // ceil_mode giving floor's count
      {{1, 3, 6, 6}, {3, 3}, {2, 2}, {1, 1, 0, 0}, true},  // ceil_mode with a begin pad only
      {{2, 5, 17}, {4}, {3}, {2, 2}, false},                // 1-d
      {{3, 2, 12}, {3}, {2}, {1, 0}, false},                // 1-d, asymmetric, same count
      {{1, 3, 6, 7, 5}, {2, 3, 2}, {2, 2, 1}, {0, 1, 1, 0, 1, 1}, false},  // 3-d
  };
  for (DType t : kFloats)
    for (PoolKind kind : {PoolKind::Max, PoolKind::Avg})
      add_case(l, "conv", std::string("pool_") + enum_name(kind) + "_" + dt(t), [t, kind, cases] {
        std::vector<CaseGraph> v;
        for (const PoolCase& c : cases)
          for (bool include_pad : {false, true}) {
            if (kind == PoolKind::Max && include_pad) continue;
            Graph g;
            g.add_output(g.apply(pool_op(kind, c.kernel, c.stride, c.pads, include_pad, c.ceil_mode),
                                 {g.input("x", Shape::from(c.x, t))}));
            v.push_back({"x" + dims_str(c.x) + " k" + dims_str(c.kernel) + " stride" + dims_str(c.stride) + " pads" +
                             dims_str(c.pads) + (c.ceil_mode ? " ceil" : "") + (include_pad ? " count_include_pad" : ""),
                         std::move(g), {}});
          }
        return v;
      });
  // A NaN in exactly one 3x3 window (stride 2, pad 1) of each channel: that window's max is NaN.
  for (DType t : kFloats)
    add_case(l, "conv", "pool_max_nan_" + dt(t), [t] {
      std::vector<double> x = to_doubles(random_tensor(DType::F32, {1, 2, 6, 6}, 7));
      x[0] = std::numeric_limits<double>::quiet_NaN();
      x[36 + 2 * 6 + 2] = std::numeric_limits<double>::quiet_NaN();
      Graph g;
      g.add_output(g.apply(pool_op(PoolKind::Max, {3, 3}, {2, 2}, {1, 1, 1, 1}),
                           {g.input("x", Shape::of({1, 2, 6, 6}, t))}));
      ParityOptions o;
      o.fixed_inputs = {{"x", from_doubles(t, {1, 2, 6, 6}, x)}};
      return one(std::move(g), o);
    });
  // Pads that differ between the two ends of an axis (TensorFlow's "SAME"), pools whose divisor
  // skips the pads or whose ceil_mode windows run past the end.
  for (DType t : {DType::F32, DType::BF16})
    add_case(l, "conv", "conv_pool_asymmetric_pads_" + dt(t), [t] {
      Graph g;
      const Value x = g.input("x", Shape::of({1, 2, 8, 8}, t));
      g.add_output(g.apply(conv_op({}, {0, 0, 2, 2}), {x, g.param("w", Shape::of({4, 2, 3, 3}, t))}));
      g.add_output(g.apply(pool_op(PoolKind::Max, {3, 3}, {2, 2}, {0, 1, 2, 1}), {x}));
      g.add_output(g.apply(pool_op(PoolKind::Avg, {2, 3}, {}, {1, 0, 0, 2}, true), {x}));
      g.add_output(g.apply(pool_op(PoolKind::Avg, {3, 3}, {}, {0, 0, 2, 2}), {x}));
      g.add_output(g.apply(pool_op(PoolKind::Avg, {3, 3}, {2, 2}, {1, 1, 1, 1}, false, true), {x}));
      return one(std::move(g));
    });
  add_case(l, "conv", "pool_max_u8", [] {
    Graph g;
    g.add_output(g.apply(pool_op(PoolKind::Max, {2, 2}, {2, 2}, {1, 1, 0, 1}),
                         {g.input("x", Shape::of({1, 2, 7, 8}, DType::U8))}));
    return one(std::move(g));
  });
  add_case(l, "conv", "pool_dilated_f32", [] {
    Graph g;
    g.add_output(g.apply(pool_op(PoolKind::Max, {2, 2}, {}, {}, false, false, {2, 2}),
                         {g.input("x", Shape::of({1, 2, 8, 8}))}));
    g.add_output(g.apply(pool_op(PoolKind::Avg, {3, 2}, {2, 1}, {}, false, false, {2, 3}),
                         {g.input("y", Shape::of({2, 3, 9, 9}))}));
    return one(std::move(g));
  });
}

std::vector<Dim> dims_of(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

void add_resize_im2col(CaseList& l) {
  struct ResizeCase {
    std::vector<int64_t> x;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<ResizeCase> cases = {{{2, 3, 17, 24}, {1, 1, 2, 2}, {}},   // a 2x upsample of an image batch
                                         {{1, 4, 30, 22}, {}, {1, 4, 11, 16}},  // a downsample to sizes
                                         {{3, 40}, {1, 1.75}, {}}};
  for (ResizeMode mode : {ResizeMode::Nearest, ResizeMode::Linear})
    for (DType t : kFloats)
      add_case(l, "conv", std::string("resize_") + enum_name(mode) + "_" + dt(t), [mode, t, cases] {
        std::vector<CaseGraph> v;
        for (const ResizeCase& c : cases)
          for (ResizeCoord coord : {ResizeCoord::HalfPixel, ResizeCoord::Asymmetric, ResizeCoord::AlignCorners,
                                    ResizeCoord::PytorchHalfPixel}) {
            ops::Resize op;
            op.mode = mode, op.coord = coord, op.scales = c.scales, op.sizes = c.sizes;
            Graph g;
            g.add_output(g.apply(op, {g.input("x", Shape(dims_of(c.x), t))}));
            v.push_back({std::string(enum_name(coord)) + " " + dims_str(c.x), std::move(g), {}});
          }
        return v;
      });
  // Nearest moves any dtype.
  for (DType t : {DType::I32, DType::I64, DType::Bool})
    add_case(l, "conv", "resize_nearest_floor_" + dt(t), [t] {
      ops::Resize op;
      op.nearest = NearestRound::Floor, op.sizes = {7, 9};
      Graph g;
      g.add_output(g.apply(op, {g.input("x", Shape::of({4, 5}, t))}));
      return one(std::move(g));
    });
  struct ColCase {
    std::vector<int64_t> x, kernel, stride, pads, dilation;
  };
  const std::vector<ColCase> cols = {{{2, 3, 16, 16}, {3, 3}, {}, {1, 1, 1, 1}, {}},
                                     {{1, 8, 15, 12}, {2, 3}, {2, 1}, {1, 0, 2, 1}, {}},
                                     {{2, 2, 20, 18}, {3, 2}, {1, 2}, {0, 1, 1, 0}, {2, 3}}};
  for (DType t : kFloats)
    add_case(l, "conv", "im2col_" + dt(t), [t, cols] {
      std::vector<CaseGraph> v;
      for (const ColCase& c : cols) {
        ops::Im2Col op;
        op.kernel = c.kernel, op.stride = c.stride, op.pads = c.pads, op.dilation = c.dilation;
        Graph g;
        g.add_output(g.apply(op, {g.input("x", Shape(dims_of(c.x), t))}));
        v.push_back({"x" + dims_str(c.x) + " k" + dims_str(c.kernel), std::move(g), {}});
      }
      return v;
    });
}

}  // namespace

void add_conv_cases(CaseList& l) {
  add_conv(l);
  add_conv_transpose(l);
  add_pool(l);
  add_resize_im2col(l);
}

}  // namespace rlx::testing
