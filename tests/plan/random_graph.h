#pragma once
// Random graphs of elementwise ops, views (reshape, stop_gradient, leading narrow), where and
// reductions over inputs x f32[4, 8] and y f32[1, 8], with random extra outputs: the memory
// plan tests' fuzz input.
#include <random>
#include <vector>

#include "rlx/graph.h"

namespace rlx::plantest {

inline const std::vector<int64_t> kFull{4, 8}, kRow{1, 8}, kFlat{32};

inline Graph random_graph(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  Graph g;
  std::vector<Value> pool{g.input("x", Shape::of({4, 8})), g.input("y", Shape::of({1, 8}))};
  auto dims = [&](Value v) { return g.shape(v).concrete(); };
  auto of_dims = [&](const std::vector<int64_t>& d) {
    std::vector<Value> out;
    for (Value v : pool)
      if (dims(v) == d) out.push_back(v);
    return out;
  };
  const ActKind acts[] = {ActKind::Tanh, ActKind::Neg, ActKind::Sigmoid, ActKind::Abs};
  const BinaryKind bins[] = {BinaryKind::Add, BinaryKind::Mul, BinaryKind::Sub, BinaryKind::Max};
  const int n_ops = 8 + static_cast<int>(rng() % 16);
  for (int i = 0; i < n_ops; ++i) {
    const Value a = pool[pick(pool.size())];
    const auto ad = dims(a);
    Value r;
    switch (rng() % 7) {
      case 0: r = g.act(acts[pick(4)], a); break;
      case 1: {  // same shape, or a full tensor with a broadcast row (either order)
        std::vector<Value> cands = of_dims(ad);
        if (ad == kFull)
          for (Value v : of_dims(kRow)) cands.push_back(v);
        const Value b = cands[pick(cands.size())];
        r = rng() % 2 ? g.binary(bins[pick(4)], a, b) : g.binary(bins[pick(4)], b, a);
        break;
      }
      case 2:
        if (ad == kFull) r = g.reshape(a, {32});
        else if (ad == kFlat) r = g.reshape(a, {4, 8});
        else r = g.stop_gradient(a);
        break;
      case 3:
        if (ad == kFull) r = g.narrow(a, 0, static_cast<int64_t>(pick(4)), 1);  // a view at a row offset
        else r = g.act(ActKind::Neg, a);
        break;
      case 4: {
        if (ad != kFull) { r = g.stop_gradient(a); break; }
        const auto fulls = of_dims(kFull);
        const Value b = fulls[pick(fulls.size())];
        r = g.where(g.compare(CompareKind::Gt, a, b), b, a);
        break;
      }
      case 5:
        r = ad == kFull ? g.sum(a, {0}, true) : g.act(ActKind::Tanh, a);
        break;
      default:
        r = g.stop_gradient(a);
        break;
    }
    pool.push_back(r);
    if (rng() % 5 == 0) g.add_output(r);
  }
  g.add_output(pool.back());
  return g;
}

}  // namespace rlx::plantest
