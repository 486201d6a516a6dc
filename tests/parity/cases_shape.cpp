// Data-movement parity cases: transpose / narrow / expand / reverse / concat / reshape in every
// storage width, Pad in every mode (crops too), Gather with negative indices, ScatterAdd with
// collisions and negative indices, and the same moves in f64.
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

std::string dt(DType t) { return dtype_name(t); }

void add_moves(CaseList& l) {
  for (DType t : {DType::F32, DType::BF16, DType::I64, DType::U8, DType::I16})
    add_case(l, "shape", "shape_ops_" + dt(t), [t] {
      Graph g;
      const Value x = g.input("x", Shape::of({2, 3, 4, 5}, t));
      g.add_output(g.transpose(x, {2, 0, 3, 1}));
      g.add_output(g.narrow(x, 2, 1, 2));
      g.add_output(g.narrow(x, 0, 1, 1));
      g.add_output(g.expand(g.input("y", Shape::of({3, 1, 5}, t)), {2, 3, 4, 5}));
      g.add_output(g.reverse(x, {1, 3}));
      g.add_output(g.concat({x, g.narrow(x, 3, 0, 2), g.input("z", Shape::of({2, 3, 4, 1}, t))}, 3));
      g.add_output(g.concat({x, x}, 0));
      g.add_output(g.reshape(g.transpose(x, {1, 0, 2, 3}), {6, 20}));
      return one(std::move(g));
    });
  add_case(l, "shape", "shape_ops_f64", [] {
    Graph g;
    const Value x = g.input("x", Shape::of({3, 4, 5}, DType::F64));
    const Value idx = g.input("i", Shape::of({6}, DType::I64));
    g.add_output(g.transpose(x, {2, 0, 1}));
    g.add_output(g.concat({x, g.reverse(x, {1})}, 1));
    g.add_output(g.narrow(x, 2, 1, 3));
    g.add_output(g.expand(g.narrow(x, 0, 0, 1), {Dim(2), Dim(4), Dim(5)}));
    g.add_output(g.gather(x, idx, 1));
    ops::Pad pad;
    pad.pads = {0, 1, 2, 1, 0, 3};
    pad.value = 0.1234567890123;  // an f64 constant a 4-byte fill would round
    g.add_output(g.apply(pad, {x}));
    ParityOptions o;
    o.int_hi = 4;
    return one(std::move(g), o);
  });
}

// Pad: every mode, growing and cropping (negative pads) on several axes, several dtypes.
void add_pad(CaseList& l) {
  struct PadCase {
    PadMode mode;
    std::vector<int64_t> pads;
  };
  const std::vector<PadCase> cases = {{PadMode::Constant, {1, 0, 2, 3, 0, 1}}, {PadMode::Constant, {-1, 2, 0, 0, -2, 1}},
                                      {PadMode::Reflect, {0, 2, 3, 1, 1, 2}},  {PadMode::Edge, {2, 0, 1, 0, 3, 4}},
                                      {PadMode::Reflect, {-1, 1, 0, 0, 2, -1}}};
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::Bool, DType::I64})
    add_case(l, "shape", "pad_" + dt(t), [t, cases] {
      std::vector<CaseGraph> v;
      for (const PadCase& c : cases) {
        Graph g;
        ops::Pad p;
        p.mode = c.mode, p.pads = c.pads, p.value = 2.5;
        g.add_output(g.apply(p, {g.input("x", Shape::of({3, 5, 6}, t))}));
        v.push_back({std::string(enum_name(c.mode)) + " " + dims_str(c.pads), std::move(g), {}});
      }
      return v;
    });
}

void add_gather_scatter(CaseList& l) {
  for (DType it : {DType::I32, DType::I64})
    add_case(l, "shape", "gather_negative_indices_idx" + dt(it), [it] {
      Graph g;
      const Value data = g.input("data", Shape::of({10, 6, 4}));
      const Value idx = g.input("idx", Shape::of({2, 3}, it));
      g.add_output(g.gather(data, idx, 1));
      g.add_output(g.gather(data, idx, 0));
      ParityOptions o;
      o.fixed_inputs = {{"idx", from_doubles(it, {2, 3}, {0, 5, -1, 2, -6, 3})}};
      return one(std::move(g), o);
    });
  // data (6, 5, 4); indices / updates (4, 3, 4): smaller than data off the axis, with collisions
  // and negative indices.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::I8, DType::U8,
                  DType::I16, DType::U32})
    add_case(l, "shape", "scatter_add_" + dt(t), [t] {
      const std::vector<int64_t> data_dims = {6, 5, 4}, idx_dims = {4, 3, 4};
      std::vector<CaseGraph> v;
      for (int64_t axis = 0; axis < 3; ++axis)
        for (DType it : {DType::I32, DType::I64, DType::I16}) {
          const int64_t n = data_dims[static_cast<size_t>(axis)];
          std::vector<double> ix(48);
          for (size_t i = 0; i < ix.size(); ++i)
            ix[i] = static_cast<double>(static_cast<int64_t>((i * 7) % (2 * n)) - n);
          Graph g;
          const Value data = g.input("data", Shape::from(data_dims, t));
          const Value idx = g.input("idx", Shape::from(idx_dims, it));
          const Value upd = g.input("upd", Shape::from(idx_dims, t));
          g.add_output(g.scatter_add(data, idx, upd, axis));
          ParityOptions o;
          o.int_hi = 60;
          o.fixed_inputs = {{"idx", from_doubles(it, idx_dims, ix)}};
          v.push_back({"axis " + std::to_string(axis) + " indices " + dt(it), std::move(g), o});
        }
      return v;
    });
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    add_case(l, "shape", "scatter_add_collisions_" + dt(t), [t] {
      Graph g;
      const Value data = g.input("data", Shape::of({50, 33}, t));
      const Value idx = g.input("idx", Shape::of({4000, 33}, DType::I64));
      g.add_output(g.scatter_add(data, idx, g.input("upd", Shape::of({4000, 33}, t)), 0));
      ParityOptions o;
      o.int_hi = 50;
      o.lo = -0.01, o.hi = 0.01;  // ~80 additions per element stay within the half types' range
      return one(std::move(g), o);
    });
}

}  // namespace

void add_shape_cases(CaseList& l) {
  add_moves(l);
  add_pad(l);
  add_gather_scatter(l);
}

}  // namespace rlx::testing
