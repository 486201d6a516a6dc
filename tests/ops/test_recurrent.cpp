// Recurrent (ONNX RNN / GRU / LSTM over a whole sequence) on the CPU against a naive double
// reference written here from the ONNX definitions; its unrolled decomposition (the shared
// legalize's, for backends without the kernel) against the CPU kernel; inference errors.
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "passes/expand_recurrent.h"
#include "passes/legalize.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::testing;
using ::testing::HasSubstr;
using Vec = std::vector<double>;

// ---- the reference ----------------------------------------------------------------------

struct Layer {
  RnnCell cell = RnnCell::Lstm;
  RnnDirection dir = RnnDirection::Forward;
  bool batch_first = false;
  std::vector<ActKind> acts;  // empty: the defaults
  double clip = 0;
  bool lbr = false;
  bool bias = false, h0 = false, c0 = false, peep = false;
  int64_t S = 4, B = 3, I = 7, H = 5;
  double r_range = 0.6;  // r's values are uniform in [-r_range, r_range)

  int64_t gates() const { return cell == RnnCell::Rnn ? 1 : cell == RnnCell::Gru ? 3 : 4; }
  int64_t dirs() const { return dir == RnnDirection::Bidirectional ? 2 : 1; }
  ops::Recurrent op() const {
    ops::Recurrent o;
    o.cell = cell, o.direction = dir, o.hidden_size = H, o.batch_first = batch_first, o.activations = acts;
    o.clip = clip, o.linear_before_reset = lbr, o.has_bias = bias, o.has_initial_h = h0, o.has_initial_c = c0;
    o.has_peepholes = peep;
    return o;
  }
  std::string label() const {
    return std::string(enum_name(cell)) + " " + enum_name(dir) + (batch_first ? " batch_first" : "") +
           (bias ? " bias" : "") + (h0 ? " h0" : "") + (c0 ? " c0" : "") + (peep ? " peep" : "") +
           (clip > 0 ? " clip" : "") + (lbr ? " lbr" : "") + (acts.empty() ? "" : " acts") + " S=" +
           std::to_string(S) + " B=" + std::to_string(B) + " I=" + std::to_string(I) + " H=" + std::to_string(H);
  }
  std::vector<int64_t> x_dims() const { return batch_first ? std::vector<int64_t>{B, S, I} : std::vector<int64_t>{S, B, I}; }
  std::vector<int64_t> state_dims() const {
    return batch_first ? std::vector<int64_t>{B, dirs(), H} : std::vector<int64_t>{dirs(), B, H};
  }
  std::vector<int64_t> y_dims() const {
    return batch_first ? std::vector<int64_t>{B, S, dirs(), H} : std::vector<int64_t>{S, dirs(), B, H};
  }
};

double act_ref(ActKind k, double v) {
  switch (k) {
    case ActKind::Sigmoid: return 1.0 / (1.0 + std::exp(-v));
    case ActKind::Tanh: return std::tanh(v);
    case ActKind::Relu: return v > 0 ? v : 0.0;
    default: throw Error("act_ref: unexpected activation");
  }
}

// Random operands of `L` in dtype t, in the op's input order (x, w, r, b?, h0?, c0?, p?).
std::vector<Tensor> operands(const Layer& L, DType t, uint64_t seed) {
  const int64_t D = L.dirs(), GH = L.gates() * L.H;
  std::vector<Tensor> v;
  v.push_back(random_tensor(t, L.x_dims(), seed, -1, 1));
  v.push_back(random_tensor(t, {D, GH, L.I}, seed + 1, -0.6, 0.6));
  v.push_back(random_tensor(t, {D, GH, L.H}, seed + 2, -L.r_range, L.r_range));
  if (L.bias) v.push_back(random_tensor(t, {D, 2 * GH}, seed + 3, -0.5, 0.5));
  if (L.h0) v.push_back(random_tensor(t, L.state_dims(), seed + 4, -1, 1));
  if (L.c0) v.push_back(random_tensor(t, L.state_dims(), seed + 5, -1, 1));
  if (L.peep) v.push_back(random_tensor(t, {D, 3 * L.H}, seed + 6, -0.5, 0.5));
  return v;
}

// y, y_h and (lstm) y_c of the layer in the op's layouts, in double, step by step as ONNX
// defines them.
std::vector<Vec> reference(const Layer& L, const std::vector<Tensor>& in) {
  const int64_t S = L.S, B = L.B, I = L.I, H = L.H, D = L.dirs(), G = L.gates(), GH = G * H;
  size_t next = 3;
  const Vec x = to_doubles(in[0]), w = to_doubles(in[1]), r = to_doubles(in[2]);
  const Vec bias = L.bias ? to_doubles(in[next++]) : Vec(static_cast<size_t>(D * 2 * GH), 0.0);
  const std::optional<Vec> h0 = L.h0 ? std::optional<Vec>(to_doubles(in[next++])) : std::nullopt;
  const std::optional<Vec> c0 = L.c0 ? std::optional<Vec>(to_doubles(in[next++])) : std::nullopt;
  const Vec peep = L.peep ? to_doubles(in[next++]) : Vec(static_cast<size_t>(D * 3 * H), 0.0);
  auto X = [&](int64_t t, int64_t b, int64_t i) {
    return x[static_cast<size_t>(L.batch_first ? (b * S + t) * I + i : (t * B + b) * I + i)];
  };
  auto state_at = [&](int64_t d, int64_t b, int64_t j) {
    return static_cast<size_t>(L.batch_first ? (b * D + d) * H + j : (d * B + b) * H + j);
  };
  auto y_at = [&](int64_t t, int64_t d, int64_t b, int64_t j) {
    return static_cast<size_t>(L.batch_first ? ((b * S + t) * D + d) * H + j : ((t * D + d) * B + b) * H + j);
  };
  const int64_t per_dir = L.cell == RnnCell::Rnn ? 1 : L.cell == RnnCell::Gru ? 2 : 3;
  auto act_of = [&](int64_t d, int64_t k) {
    if (!L.acts.empty()) return L.acts[static_cast<size_t>(d * per_dir + k)];
    return L.cell == RnnCell::Rnn || k > 0 ? ActKind::Tanh : ActKind::Sigmoid;
  };
  auto clip = [&](double v) { return L.clip > 0 ? std::min(std::max(v, -L.clip), L.clip) : v; };
  Vec y(static_cast<size_t>(S * D * B * H)), yh(static_cast<size_t>(D * B * H)), yc(yh.size());
  for (int64_t d = 0; d < D; ++d) {
    const bool rev = L.dir == RnnDirection::Reverse || d == 1;
    // W[d][row][i], R[d][row][k], Wb[d][row], Rb[d][row]
    auto W = [&](int64_t row, int64_t i) { return w[static_cast<size_t>((d * GH + row) * I + i)]; };
    auto R = [&](int64_t row, int64_t k) { return r[static_cast<size_t>((d * GH + row) * H + k)]; };
    auto Wb = [&](int64_t row) { return bias[static_cast<size_t>(d * 2 * GH + row)]; };
    auto Rb = [&](int64_t row) { return bias[static_cast<size_t>(d * 2 * GH + GH + row)]; };
    auto P = [&](int64_t k, int64_t j) { return peep[static_cast<size_t>(d * 3 * H + k * H + j)]; };
    const ActKind f = act_of(d, 0), g = per_dir > 1 ? act_of(d, 1) : f, hk = per_dir > 2 ? act_of(d, 2) : f;
    for (int64_t b = 0; b < B; ++b) {
      Vec h(static_cast<size_t>(H)), c(static_cast<size_t>(H));
      for (int64_t j = 0; j < H; ++j) {
        h[static_cast<size_t>(j)] = h0 ? (*h0)[state_at(d, b, j)] : 0.0;
        c[static_cast<size_t>(j)] = c0 ? (*c0)[state_at(d, b, j)] : 0.0;
      }
      for (int64_t k = 0; k < S; ++k) {
        const int64_t t = rev ? S - 1 - k : k;
        // xw[row] = x_t . W[row] + Wb[row]; hr[row] = h . R[row] + Rb[row]
        Vec xw(static_cast<size_t>(GH)), hr(static_cast<size_t>(GH));
        for (int64_t row = 0; row < GH; ++row) {
          double sx = Wb(row), sh = Rb(row);
          for (int64_t i = 0; i < I; ++i) sx += X(t, b, i) * W(row, i);
          for (int64_t q = 0; q < H; ++q) sh += h[static_cast<size_t>(q)] * R(row, q);
          xw[static_cast<size_t>(row)] = sx;
          hr[static_cast<size_t>(row)] = sh;
        }
        Vec hn(static_cast<size_t>(H)), cn(static_cast<size_t>(H));
        if (L.cell == RnnCell::Rnn) {
          for (int64_t j = 0; j < H; ++j)
            hn[static_cast<size_t>(j)] = act_ref(f, clip(xw[static_cast<size_t>(j)] + hr[static_cast<size_t>(j)]));
        } else if (L.cell == RnnCell::Gru) {
          Vec z(static_cast<size_t>(H)), rr(static_cast<size_t>(H));
          for (int64_t j = 0; j < H; ++j) {
            const size_t u = static_cast<size_t>(j);
            z[u] = act_ref(f, clip(xw[u] + hr[u]));
            rr[u] = act_ref(f, clip(xw[static_cast<size_t>(H + j)] + hr[static_cast<size_t>(H + j)]));
          }
          for (int64_t j = 0; j < H; ++j) {
            const size_t u = static_cast<size_t>(j);
            double pre = xw[static_cast<size_t>(2 * H + j)];
            if (L.lbr) {
              pre += rr[u] * hr[static_cast<size_t>(2 * H + j)];
            } else {
              double s = Rb(2 * H + j);
              for (int64_t q = 0; q < H; ++q) s += rr[static_cast<size_t>(q)] * h[static_cast<size_t>(q)] * R(2 * H + j, q);
              pre += s;
            }
            const double n = act_ref(g, clip(pre));
            hn[u] = (1 - z[u]) * n + z[u] * h[u];
          }
        } else {
          for (int64_t j = 0; j < H; ++j) {
            const size_t u = static_cast<size_t>(j);
            auto pre = [&](int64_t gate) { return xw[static_cast<size_t>(gate * H + j)] + hr[static_cast<size_t>(gate * H + j)]; };
            const double i_t = act_ref(f, clip(pre(0) + P(0, j) * c[u]));
            const double f_t = act_ref(f, clip(pre(2) + P(2, j) * c[u]));
            const double c_t = act_ref(g, clip(pre(3)));
            cn[u] = f_t * c[u] + i_t * c_t;
            const double o_t = act_ref(f, clip(pre(1) + P(1, j) * cn[u]));
            hn[u] = o_t * act_ref(hk, cn[u]);
          }
          c = cn;
        }
        h = hn;
        for (int64_t j = 0; j < H; ++j) y[y_at(t, d, b, j)] = h[static_cast<size_t>(j)];
      }
      for (int64_t j = 0; j < H; ++j) {
        yh[state_at(d, b, j)] = h[static_cast<size_t>(j)];
        yc[state_at(d, b, j)] = c[static_cast<size_t>(j)];
      }
    }
  }
  std::vector<Vec> out{y, yh};
  if (L.cell == RnnCell::Lstm) out.push_back(yc);
  return out;
}

// The one-node graph of the layer (inputs in0, in1, ...) and its feeds.
Graph layer_graph(const Layer& L, const std::vector<Tensor>& in, NamedTensors& feed, bool symbolic_seq = false) {
  Graph g;
  std::vector<Value> vs;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    Shape s = in[i].shape_info();
    if (i == 0 && symbolic_seq) s.dims[L.batch_first ? 1 : 0] = Dim::symbol("seq");
    vs.push_back(g.input(name, s));
    feed.emplace_back(name, in[i]);
  }
  const std::vector<Value> outs = g.apply_multi(L.op(), vs);
  for (Value v : outs) g.add_output(v);
  return g;
}

Tolerance tol_for(DType t) {
  switch (t) {
    case DType::F64: return {1e-10, 1e-10};
    case DType::F16: return {4e-3, 4e-3};
    case DType::BF16: return {3e-2, 3e-2};
    default: return {2e-5, 2e-6};
  }
}

void check_layer(const Layer& L, DType t = DType::F32, uint64_t seed = 7) {
  SCOPED_TRACE(L.label() + " " + dtype_name(t));
  const std::vector<Tensor> in = operands(L, t, seed);
  NamedTensors feed;
  const Graph g = layer_graph(L, in, feed);
  const std::vector<Tensor> got = run_cpu(g, feed);
  const std::vector<Vec> want = reference(L, in);
  ASSERT_EQ(got.size(), want.size());
  const Tolerance tol = tol_for(t);
  EXPECT_TRUE(all_close(got[0], L.y_dims(), want[0], tol)) << "y";
  EXPECT_TRUE(all_close(got[1], L.state_dims(), want[1], tol)) << "y_h";
  if (want.size() > 2) {
    EXPECT_TRUE(all_close(got[2], L.state_dims(), want[2], tol)) << "y_c";
  }
}

constexpr RnnCell kCells[] = {RnnCell::Rnn, RnnCell::Gru, RnnCell::Lstm};
constexpr RnnDirection kDirs[] = {RnnDirection::Forward, RnnDirection::Reverse, RnnDirection::Bidirectional};

// ---- the CPU kernel against the reference -------------------------------------------------

TEST(RecurrentOp, EveryCellDirectionAndLayout) {
  for (RnnCell cell : kCells)
    for (RnnDirection dir : kDirs)
      for (bool bf : {false, true})
        for (bool full : {false, true}) {
          Layer L;
          L.cell = cell, L.dir = dir, L.batch_first = bf;
          L.bias = L.h0 = full;
          L.c0 = L.peep = full && cell == RnnCell::Lstm;
          check_layer(L);
        }
}

TEST(RecurrentOp, EachOptionalInputAlone) {
  for (RnnCell cell : kCells)
    for (int which = 0; which < 4; ++which) {
      if (cell != RnnCell::Lstm && which >= 2) continue;
      Layer L;
      L.cell = cell, L.dir = RnnDirection::Bidirectional;
      L.bias = which == 0, L.h0 = which == 1, L.c0 = which == 2, L.peep = which == 3;
      check_layer(L);
    }
}

TEST(RecurrentOp, ClipLinearBeforeResetAndActivations) {
  for (RnnCell cell : kCells)
    for (bool bf : {false, true}) {
      Layer L;
      L.cell = cell, L.dir = RnnDirection::Bidirectional, L.batch_first = bf, L.bias = L.h0 = true;
      L.clip = 0.3;  // well inside the pre-activations' range: most gates clip
      check_layer(L);
      L.clip = 0;
      // Per-direction activations, Relu included.
      if (cell == RnnCell::Rnn) L.acts = {ActKind::Relu, ActKind::Sigmoid};
      if (cell == RnnCell::Gru) L.acts = {ActKind::Tanh, ActKind::Relu, ActKind::Sigmoid, ActKind::Tanh};
      if (cell == RnnCell::Lstm)
        L.acts = {ActKind::Sigmoid, ActKind::Relu, ActKind::Tanh, ActKind::Tanh, ActKind::Sigmoid, ActKind::Relu};
      check_layer(L);
    }
  for (bool bias : {false, true})
    for (bool h0 : {false, true}) {
      Layer L;
      L.cell = RnnCell::Gru, L.dir = RnnDirection::Bidirectional, L.lbr = true, L.bias = bias, L.h0 = h0;
      check_layer(L);
      L.clip = 0.4;
      check_layer(L);
    }
}

TEST(RecurrentOp, VectorBodiesAndTails) {
  // H = 37: four 8-lane vectors and a tail of 5; long enough for errors to compound.
  for (RnnCell cell : kCells) {
    Layer L;
    L.cell = cell, L.dir = RnnDirection::Bidirectional, L.bias = L.h0 = true;
    L.c0 = L.peep = cell == RnnCell::Lstm;
    L.S = 40, L.B = 2, L.I = 19, L.H = 37;
    // A recurrence that contracts (r small for H = 37): with gains above 1 the rounding of 40 f32
    // steps grows with every step and the comparison would test the BLAS's summation order.
    L.r_range = 0.15;
    check_layer(L);
    L.r_range = 0.6;
    L.S = 3, L.B = 1, L.I = 1, L.H = 1;
    check_layer(L);
  }
}

TEST(RecurrentOp, F64F16Bf16) {
  for (DType t : {DType::F64, DType::F16, DType::BF16})
    for (RnnCell cell : kCells) {
      Layer L;
      L.cell = cell, L.dir = RnnDirection::Bidirectional, L.bias = L.h0 = true;
      L.c0 = L.peep = cell == RnnCell::Lstm;
      L.lbr = cell == RnnCell::Gru && t == DType::F64;
      check_layer(L, t);
    }
}

TEST(RecurrentOp, EmptySequenceKeepsTheInitialState) {
  for (RnnCell cell : kCells) {
    Layer L;
    L.cell = cell, L.dir = RnnDirection::Bidirectional, L.h0 = true, L.c0 = cell == RnnCell::Lstm, L.S = 0;
    check_layer(L);
    L.h0 = L.c0 = false;
    check_layer(L);  // zeros
  }
}

TEST(RecurrentOp, SymbolicSequenceLengthCompilesOnce) {
  Layer L;
  L.dir = RnnDirection::Bidirectional, L.bias = L.h0 = L.c0 = true;
  L.S = 6;
  const std::vector<Tensor> in6 = operands(L, DType::F32, 3);
  NamedTensors feed;
  const Graph g = layer_graph(L, in6, feed, true);
  EXPECT_TRUE(g.shape(g.outputs()[0]).dims[0].is_symbolic());
  Session s(Device::Cpu);
  CompiledGraph cg = s.compile(g);
  for (int64_t steps : {6, 2, 9}) {
    L.S = steps;
    const std::vector<Tensor> in = operands(L, DType::F32, 3 + static_cast<uint64_t>(steps));
    NamedTensors f;
    for (size_t i = 0; i < in.size(); ++i) f.emplace_back("in" + std::to_string(i), in[i]);
    const std::vector<Tensor> got = cg.run(f);
    const std::vector<Vec> want = reference(L, in);
    EXPECT_TRUE(all_close(got[0], L.y_dims(), want[0], tol_for(DType::F32))) << steps;
    EXPECT_TRUE(all_close(got[2], L.state_dims(), want[2], tol_for(DType::F32))) << steps;
  }
}

TEST(RecurrentOp, TwoThreadsGiveTheBitsOfOne) {
  for (RnnCell cell : kCells) {
    Layer L;
    L.cell = cell, L.dir = RnnDirection::Bidirectional, L.bias = L.h0 = true, L.S = 12, L.H = 21;
    const std::vector<Tensor> in = operands(L, DType::F32, 11);
    NamedTensors feed;
    const Graph g = layer_graph(L, in, feed);
    std::vector<std::vector<Tensor>> runs;
    for (int threads : {1, 2}) {
      CompileOptions o;
      o.num_threads = threads;
      Session s(Device::Cpu);
      runs.push_back(s.compile(g, o).run(feed));
    }
    for (size_t k = 0; k < runs[0].size(); ++k) {
      ASSERT_EQ(runs[0][k].nbytes(), runs[1][k].nbytes());
      EXPECT_EQ(std::memcmp(runs[0][k].raw(), runs[1][k].raw(), runs[0][k].nbytes()), 0) << enum_name(cell) << " " << k;
    }
  }
}

// ---- the decomposition (what backends without the kernel run) against the kernel ------------

// The layer's graph with the Recurrent node unrolled by the shared legalize (a claims function
// that runs everything but Recurrent).
Graph legalized(const Graph& g) {
  return passes::legalize(
      g, [](const Graph&, const Node& n) { return !std::holds_alternative<ops::Recurrent>(n.op); }, "test");
}

void check_expansion(const Layer& L, DType t = DType::F32) {
  SCOPED_TRACE(L.label() + " " + dtype_name(t));
  const std::vector<Tensor> in = operands(L, t, 21);
  NamedTensors feed;
  const Graph g = layer_graph(L, in, feed);
  const Graph unrolled = legalized(g);
  for (const Node& n : unrolled.nodes()) ASSERT_FALSE(std::holds_alternative<ops::Recurrent>(n.op));
  const std::vector<Tensor> native = run_cpu(g, feed), expanded = run_cpu(unrolled, feed);
  ASSERT_EQ(native.size(), expanded.size());
  const Tolerance tol = t == DType::F32 ? Tolerance{1e-5, 1e-6} : tol_for(t);
  for (size_t k = 0; k < native.size(); ++k)
    EXPECT_TRUE(all_close(expanded[k], native[k].shape(), to_doubles(native[k]), tol)) << "output " << k;
  const std::vector<Vec> want = reference(L, in);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(all_close(expanded[k], native[k].shape(), want[k], tol_for(t))) << "output " << k << " vs reference";
}

TEST(RecurrentExpansion, SameNumbersAsTheKernel) {
  for (RnnCell cell : kCells)
    for (RnnDirection dir : kDirs)
      for (bool bf : {false, true}) {
        Layer L;
        L.cell = cell, L.dir = dir, L.batch_first = bf, L.bias = L.h0 = true;
        L.c0 = L.peep = cell == RnnCell::Lstm;
        check_expansion(L);
      }
  Layer L;
  L.cell = RnnCell::Gru, L.dir = RnnDirection::Bidirectional, L.lbr = true, L.clip = 0.5, L.bias = true;
  L.acts = {ActKind::Sigmoid, ActKind::Relu, ActKind::Tanh, ActKind::Tanh};
  check_expansion(L);
  L.cell = RnnCell::Lstm, L.lbr = false, L.peep = true, L.S = 1;
  L.acts = {};
  check_expansion(L);
  check_expansion(L, DType::F64);
  L.S = 0;
  check_expansion(L);
}

TEST(RecurrentExpansion, NeedsAStaticSequenceWithinTheUnrollCap) {
  Layer L;
  L.S = 6;
  const std::vector<Tensor> in = operands(L, DType::F32, 3);
  NamedTensors feed;
  const Graph sym = layer_graph(L, in, feed, true);
  const std::string msg = error_message([&] { (void)legalized(sym); });
  EXPECT_THAT(msg, HasSubstr("(recurrent)"));
  EXPECT_THAT(msg, HasSubstr("sequence length 'seq' is symbolic"));
  EXPECT_THAT(msg, HasSubstr("bind the dim"));
  NamedTensors f2;
  const Graph g = layer_graph(L, in, f2);
  Limits lim;
  lim.max_unroll_steps = 5;
  {
    ScopedLimits scoped(lim);
    const std::string cap = error_message([&] { (void)legalized(g); });
    EXPECT_THAT(cap, HasSubstr("6 time steps"));
    EXPECT_THAT(cap, HasSubstr("at most 5"));
    EXPECT_THAT(cap, HasSubstr("max_unroll_steps"));
  }
  lim.max_unroll_steps = 6;
  ScopedLimits scoped(lim);
  EXPECT_NO_THROW((void)legalized(g));
}

// ---- inference errors ---------------------------------------------------------------------

// The output shapes of `op` on graph inputs of these shapes (throws like the graph builder).
std::vector<Shape> infer_outputs(const ops::Recurrent& op, const std::vector<Shape>& shapes) {
  Graph g;
  std::vector<Value> vs;
  for (size_t i = 0; i < shapes.size(); ++i) vs.push_back(g.input("in" + std::to_string(i), shapes[i]));
  std::vector<Shape> out;
  for (Value v : g.apply_multi(op, vs)) out.push_back(g.shape(v));
  return out;
}
std::string infer_error(const ops::Recurrent& op, const std::vector<Shape>& shapes) {
  return error_message([&] { (void)infer_outputs(op, shapes); });
}

TEST(RecurrentOp, InferenceNamesWhatIsWrong) {
  ops::Recurrent op;
  op.cell = RnnCell::Lstm, op.hidden_size = 5;
  const Shape x = Shape::of({4, 3, 7}), w = Shape::of({1, 20, 7}), r = Shape::of({1, 20, 5});
  EXPECT_NO_THROW((void)infer_outputs(op, {x, w, r}));
  EXPECT_THAT(infer_error(op, {x, w}), HasSubstr("recurrent takes 3 to 7 inputs, got 2"));
  {
    ops::Recurrent o = op;
    o.has_bias = true;
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("takes 4 inputs (x, w, r, b as has_bias"));
  }
  EXPECT_THAT(infer_error(op, {Shape::of({4, 7}), w, r}), HasSubstr("x must be rank 3"));
  EXPECT_THAT(infer_error(op, {Shape::of({4, 3, 7}, DType::I32), Shape::of({1, 20, 7}, DType::I32),
                               Shape::of({1, 20, 5}, DType::I32)}),
              HasSubstr("x must be a float tensor"));
  EXPECT_THAT(infer_error(op, {x, Shape::of({1, 16, 7}), r}), HasSubstr("w (input 1) must have shape [1,20,7]"));
  EXPECT_THAT(infer_error(op, {x, w, Shape::of({1, 20, 4})}), HasSubstr("r (input 2) must have shape [1,20,5]"));
  EXPECT_THAT(infer_error(op, {x, w, Shape::of({1, 20, 5}, DType::F64)}), HasSubstr("must have x's dtype f32"));
  {
    ops::Recurrent o = op;
    o.has_bias = true, o.has_initial_h = true;
    EXPECT_NO_THROW((void)infer_outputs(o, {x, w, r, Shape::of({1, 40}), Shape::of({1, 3, 5})}));
    EXPECT_THAT(infer_error(o, {x, w, r, Shape::of({1, 20}), Shape::of({1, 3, 5})}),
                HasSubstr("b (input 3) must have shape [1,40]"));
    EXPECT_THAT(infer_error(o, {x, w, r, Shape::of({1, 40}), Shape::of({3, 1, 5})}),
                HasSubstr("initial_h (input 4) must have shape [1,3,5]"));
    o.batch_first = true;  // x (B=4, S=3, I=7): initial_h (B, D, H)
    EXPECT_NO_THROW((void)infer_outputs(o, {x, w, r, Shape::of({1, 40}), Shape::of({4, 1, 5})}));
  }
  {
    ops::Recurrent o = op;
    o.has_peepholes = true;
    EXPECT_THAT(infer_error(o, {x, w, r, Shape::of({1, 16})}), HasSubstr("p (input 3) must have shape [1,15]"));
  }
  {
    ops::Recurrent o = op;
    o.activations = {ActKind::Sigmoid, ActKind::Tanh};
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("activations must list 3 per direction"));
    o.activations = {ActKind::Sigmoid, ActKind::Gelu, ActKind::Tanh};
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("activation 'gelu' is not supported"));
  }
  {
    ops::Recurrent o = op;
    o.linear_before_reset = true;
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("linear_before_reset applies to the gru cell only"));
    o.linear_before_reset = false;
    o.clip = std::nan("");
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("clip must be a finite value"));
    o.clip = 0, o.hidden_size = 0;
    EXPECT_THAT(infer_error(o, {x, w, r}), HasSubstr("hidden_size must be >= 1"));
  }
  {
    ops::Recurrent o = op;
    o.cell = RnnCell::Gru, o.has_initial_c = true;
    EXPECT_THAT(infer_error(o, {x, Shape::of({1, 15, 7}), Shape::of({1, 15, 5}), Shape::of({1, 3, 5})}),
                HasSubstr("initial_c apply to the lstm cell only"));
  }
  // A symbolic sequence length (and batch) is fine; outputs keep them.
  const Shape xs({Dim::symbol("seq"), Dim::symbol("batch"), Dim(7)});
  ops::Recurrent o = op;
  o.direction = RnnDirection::Bidirectional;
  Graph g;
  const auto outs = g.apply_multi(o, {g.input("x", xs), g.input("w", Shape::of({2, 20, 7})), g.input("r", Shape::of({2, 20, 5}))});
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(g.shape(outs[0]).str(), "f32[seq,2,batch,5]");
  EXPECT_EQ(g.shape(outs[1]).str(), "f32[2,batch,5]");
}

}  // namespace
