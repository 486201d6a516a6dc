// Select / scan parity cases: ArgMax / ArgMin (every dtype, axis, tie rule, NaN and signed
// zeros), TopK (every dtype, k and axis, 150k-wide rows), Sample (every rule, seeds, offsets,
// infinite logits), Cumsum (every dtype and axis, exclusive, reverse).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string dt(DType t) { return dtype_name(t); }

void add_arg(CaseList& l) {
  struct ArgCase {
    std::vector<int64_t> dims;
    int64_t axis;
  };
  const std::vector<ArgCase> cases = {{{7, 150001}, 1}, {{3, 37}, 1}, {{5, 300, 3}, 1}, {{64, 9}, 0},
                                      {{2, 3, 1500}, -1}, {{1}, 0}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8, DType::I8})
    add_case(l, "select", "argmax_argmin_" + dt(t), [t, cases] {
      std::vector<CaseGraph> v;
      for (const ArgCase& c : cases)
        for (bool last : {false, true})
          for (bool keep : {false, true}) {
            Graph g;
            const Value x = g.input("x", Shape::from(c.dims, t));
            ops::ArgMax amax;
            amax.axis = c.axis, amax.keep_dims = keep, amax.select_last = last;
            ops::ArgMin amin;
            amin.axis = c.axis, amin.keep_dims = keep, amin.select_last = last;
            g.add_output(g.apply(amax, {x}));
            g.add_output(g.apply(amin, {x}));
            ParityOptions o;
            o.int_hi = 3;  // integers: many ties, so the first/last rule decides
            o.lo = -4, o.hi = 4;
            v.push_back({dims_str(c.dims) + " axis " + std::to_string(c.axis) + (last ? " last" : "") +
                             (keep ? " keep" : ""),
                         std::move(g), o});
          }
      return v;
    });
  // Row 0: NaN twice; row 1: +0 / -0 ties with the max; row 2: -inf only.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    add_case(l, "select", "argmax_argmin_nan_signed_zero_" + dt(t), [t] {
      const double nan = std::nan("");
      const std::vector<double> x = {1,   nan,  3,         nan,       -2,        0.0,       -0.0,     -1,
                                     0.0, -0.0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
      std::vector<CaseGraph> v;
      for (bool last : {false, true}) {
        Graph g;
        const Value in = g.input("x", Shape::of({3, 5}, t));
        ops::ArgMax amax;
        amax.axis = 1, amax.select_last = last;
        ops::ArgMin amin;
        amin.axis = 1, amin.select_last = last;
        g.add_output(g.apply(amax, {in}));
        g.add_output(g.apply(amin, {in}));
        ParityOptions o;
        o.fixed_inputs = {{"x", from_doubles(t, {3, 5}, x)}};
        v.push_back({last ? "last" : "first", std::move(g), o});
      }
      return v;
    });
}

void add_topk(CaseList& l) {
  struct TopKCase {
    std::vector<int64_t> dims;
    int64_t k, axis;
  };
  const std::vector<TopKCase> cases = {{{3, 150001}, 50, -1}, {{5, 1000}, 1000, 1}, {{4, 777}, 1, 1},
                                       {{2, 3000}, 1024, 1},  {{6, 129, 5}, 17, 1},  {{33, 4}, 33, 0},
                                       {{2, 2049}, 300, -1}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64, DType::U8})
    add_case(l, "select", "topk_" + dt(t), [t, cases] {
      std::vector<CaseGraph> v;
      for (const TopKCase& c : cases)
        for (bool largest : {true, false}) {
          Graph g;
          const auto [vals, idx] = g.topk(g.input("x", Shape::from(c.dims, t)), c.k, c.axis, largest);
          g.add_output(vals);
          g.add_output(idx);
          ParityOptions o;
          o.int_hi = 7;  // integers: heavy ties, ordered by index
          o.lo = -100, o.hi = 100;
          v.push_back({dims_str(c.dims) + " k " + std::to_string(c.k) + " axis " + std::to_string(c.axis) +
                           (largest ? " largest" : " smallest"),
                       std::move(g), o});
        }
      return v;
    });
}

Graph sample_graph(DType t, std::vector<int64_t> dims, const ops::Sample& op, bool with_offset) {
  Graph g;
  std::vector<Value> ins{g.input("logits", Shape::from(dims, t))};
  if (with_offset) ins.push_back(g.input("offset", Shape::of({}, DType::I64)));
  g.add_output(g.apply(op, ins));
  return g;
}

void add_sample(CaseList& l) {
  struct Rule {
    double temperature;
    int64_t top_k;
    double top_p;
  };
  const std::vector<Rule> rules = {{0.0, 0, 1.0},  {1.0, 0, 1.0}, {0.7, 40, 1.0}, {1.3, 0, 0.9},
                                   {1.0, 50, 0.5}, {2.0, 1, 1.0}, {0.5, 0, 0.3},  {1.0, 100000, 1.0}};
  const std::vector<std::vector<int64_t>> shapes = {{150001}, {4, 1000}, {3, 7}, {2, 1}};
  for (DType t : kFloats)
    for (const auto& dims : shapes) {
      std::string shape_name;
      for (int64_t d : dims) shape_name += (shape_name.empty() ? "" : "x") + std::to_string(d);
      add_case(l, "select", "sample_" + shape_name + "_" + dt(t), [t, dims, rules] {
        std::vector<CaseGraph> v;
        for (const Rule& r : rules)
          for (uint64_t seed : {uint64_t{1}, uint64_t{0x123456789abcdefULL}}) {
            const bool with_offset = seed != 1;
            ops::Sample op;
            op.temperature = r.temperature, op.top_k = r.top_k, op.top_p = r.top_p, op.seed = seed;
            ParityOptions o;
            o.lo = -6, o.hi = 6;  // peaked and flat regions both
            o.seed = seed * 7 + static_cast<uint64_t>(r.top_k);
            if (with_offset) o.fixed_inputs = {{"offset", Tensor::scalar_i64(int64_t{5} << 33)}};
            v.push_back({"T " + std::to_string(r.temperature) + " top_k " + std::to_string(r.top_k) + " top_p " +
                             std::to_string(r.top_p) + " seed " + std::to_string(seed),
                         sample_graph(t, dims, op, with_offset), o});
          }
        return v;
      });
    }
  // +inf / -inf logits: two +inf share the mass; a -inf masked vocabulary.
  for (DType t : kFloats)
    add_case(l, "select", "sample_infinite_logits_" + dt(t), [t] {
      std::vector<double> logits(2 * 6, -INFINITY);
      logits[2] = INFINITY, logits[4] = INFINITY, logits[5] = 1.0;
      logits[6 + 3] = 0.5, logits[6 + 1] = 0.25;
      std::vector<CaseGraph> v;
      for (uint64_t seed = 0; seed < 6; ++seed) {
        ops::Sample s;
        s.seed = seed, s.top_p = 0.95;
        ParityOptions o;
        o.fixed_inputs = {{"logits", from_doubles(t, {2, 6}, logits)}};
        v.push_back({"seed " + std::to_string(seed), sample_graph(t, {2, 6}, s, false), o});
      }
      return v;
    });
}

void add_cumsum(CaseList& l) {
  struct CumCase {
    std::vector<int64_t> dims;
    int64_t axis;
  };
  const std::vector<CumCase> cases = {{{3, 100003}, 1}, {{5, 7, 9}, 0},    {{5, 7, 9}, 1},
                                      {{5, 7, 9}, 2},   {{2, 5000, 3}, 1}, {{2, 20000, 3}, 1},
                                      {{4, 10, 600}, 1}, {{1}, 0},         {{4097}, 0}};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::I8, DType::U8})
    add_case(l, "select", "cumsum_" + dt(t), [t, cases] {
      std::vector<CaseGraph> v;
      for (const CumCase& c : cases)
        for (bool excl : {false, true})
          for (bool rev : {false, true}) {
            Graph g;
            g.add_output(g.cumsum(g.input("x", Shape::from(c.dims, t)), c.axis, excl, rev));
            ParityOptions o;
            o.int_hi = 100;  // i8 / u8 wrap around on long rows, like the CPU
            v.push_back({dims_str(c.dims) + " axis " + std::to_string(c.axis) + (excl ? " exclusive" : "") +
                             (rev ? " reverse" : ""),
                         std::move(g), o});
          }
      return v;
    });
}

// RngUniform / RngNormal: the Philox stream of (seed, offset), element by element as the CPU
// computes it; odd lengths (a partial last block of 4). rng_uniform_*: ranges whose double
// computation is exact (every device with f32 runs them, WebGPU included), one that rounds to
// its ends in f16, offsets within 32 bits. rng_*: a range whose double computation rounds, the
// normal transform and an offset past 32 bits.
void add_random(CaseList& l) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    add_case(l, "select", "rng_uniform_" + dt(t), [t] {
      std::vector<CaseGraph> v;
      for (bool with_offset : {false, true}) {
        Graph g;
        std::vector<Value> ins;
        if (with_offset) ins.push_back(g.input("offset", Shape::of({}, DType::I64)));
        ops::RngUniform u;
        u.shape = Shape::of({3, 1001}, t);
        u.low = -2.5, u.high = 7.0, u.seed = 42;
        g.add_output(g.apply(u, ins));
        ops::RngUniform unit = u;
        unit.shape = Shape::of({2, 333}, t);
        unit.low = 0.0, unit.high = 1.0, unit.seed = 0x123456789abcdefULL;
        g.add_output(g.apply(unit, ins));
        ops::RngUniform narrow = u;
        narrow.shape = Shape::of({7}, t);
        narrow.low = 1.0, narrow.high = 1.0009765625, narrow.seed = 3;  // one f16 step
        g.add_output(g.apply(narrow, ins));
        ParityOptions o;
        if (with_offset) o.fixed_inputs = {{"offset", Tensor::scalar_i64(-123456789)}};
        v.push_back({with_offset ? "offset" : "no offset", std::move(g), o});
      }
      return v;
    });
    add_case(l, "select", "rng_" + dt(t), [t] {
      Graph g;
      const Value off = g.input("offset", Shape::of({}, DType::I64));
      ops::RngUniform u;
      u.shape = Shape::of({3, 1001}, t);
      u.low = 0.1, u.high = 0.7, u.seed = 42;
      g.add_output(g.apply(u, {off}));
      ops::RngNormal n;
      n.shape = Shape::of({2, 501}, t);
      n.mean = 0.5, n.stddev = 2.0, n.seed = 7;
      g.add_output(g.apply(n, {off}));
      ParityOptions o;
      o.fixed_inputs = {{"offset", Tensor::scalar_i64(int64_t{3} << 33)}};
      return one(std::move(g), o);
    });
  }
}

}  // namespace

void add_select_cases(CaseList& l) {
  add_arg(l);
  add_topk(l);
  add_sample(l);
  add_cumsum(l);
  add_random(l);
}

}  // namespace rlx::testing
