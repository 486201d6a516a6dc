// Row-op parity cases: softmax / log-softmax over rows and columns (and a 150k vocabulary row),
// layer / RMS norms and the fused residual norms at every row block size, fused SwiGLU.
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string dt(DType t) { return dtype_name(t); }

void add_softmax(CaseList& l) {
  for (DType t : kFloats)
    for (int64_t axis : {-1, 1})
      add_case(l, "rows", std::string("softmax_") + (axis < 0 ? "rows" : "axis1") + "_" + dt(t), [t, axis] {
        Graph g;
        const Value x = g.input("x", Shape::of({3, 50, 1000}, t));
        g.add_output(g.softmax(x, axis));
        g.add_output(g.log_softmax(x, axis));
        ParityOptions o;
        o.lo = -8, o.hi = 8;
        return one(std::move(g), o);
      });
  add_case(l, "rows", "softmax_vocab_150k_f32", [] {
    Graph g;
    g.add_output(g.softmax(g.input("x", Shape::of({2, 151936}))));
    return one(std::move(g));
  });
}

void add_norms(CaseList& l) {
  for (DType t : kFloats)
    add_case(l, "rows", "norms_and_residual_norms_" + dt(t), [t] {
      Graph g;
      const Value x = g.input("x", Shape::of({2, 9, 768}, t));
      const Value r = g.input("r", Shape::of({2, 9, 768}, t));
      const Value gamma = g.param("gamma", Shape::of({768}, t));
      const Value beta = g.param("beta", Shape::of({768}, t));
      g.add_output(g.layer_norm(x, gamma, beta, 1e-12));
      g.add_output(g.layer_norm(x, gamma, std::nullopt, 1e-5));
      g.add_output(g.rms_norm(x, gamma, std::nullopt, 1e-6));
      g.add_output(g.rms_norm(x, gamma, beta, 1e-6));
      g.add_output(g.apply(ops::FusedResidualLN{true, 1e-12}, {x, r, gamma, beta}));
      g.add_output(g.apply(ops::FusedResidualRmsNorm{false, 1e-6}, {x, r, gamma}));
      const Value x2 = g.input("x2", Shape::of({3, 4, 5, 6}, t));  // normalized over the last two dims
      g.add_output(
          g.layer_norm(x2, g.param("g2", Shape::of({5, 6}, t)), g.param("b2", Shape::of({5, 6}, t)), 1e-5, 2));
      return one(std::move(g));
    });
  // Row lengths around the block-size steps (blocks sized by the row's 16-byte vectors) and the
  // shared-memory row cache's limit (11264), rows in whole 16-byte vectors or not (4098).
  for (DType t : kFloats)
    for (int64_t len : {256, 1000, 2048, 4096, 4098, 8192, 11264, 20000})
      add_case(l, "rows", "norm_softmax_len" + std::to_string(len) + "_" + dt(t), [t, len] {
        Graph g;
        const Value x = g.input("x", Shape::of({5, len}, t));
        const Value gamma = g.param("gamma", Shape::of({len}, t));
        g.add_output(g.layer_norm(x, gamma, g.param("beta", Shape::of({len}, t)), 1e-5));
        g.add_output(
            g.apply(ops::FusedResidualRmsNorm{false, 1e-6}, {x, g.input("r", Shape::of({5, len}, t)), gamma}));
        g.add_output(g.softmax(x, -1));
        ParityOptions o;
        o.lo = -4, o.hi = 4;
        return one(std::move(g), o);
      });
}

void add_swiglu(CaseList& l) {
  for (DType t : kFloats)
    add_case(l, "rows", "swiglu_" + dt(t), [t] {
      std::vector<CaseGraph> v;
      for (bool gf : {false, true}) {
        Graph g;
        g.add_output(g.apply(ops::FusedSwiGLU{gf}, {g.input("x", Shape::of({3, 5, 2 * 88}, t))}));
        v.push_back({gf ? "gate first" : "gate second", std::move(g), {}});
      }
      return v;
    });
}

}  // namespace

void add_rows_cases(CaseList& l) {
  add_softmax(l);
  add_norms(l);
  add_swiglu(l);
}

}  // namespace rlx::testing
