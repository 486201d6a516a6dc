// The memory plan under device limits: the default limits give exactly the one-arena plan;
// small max_buffer_bytes split the arena into buffers without any value straddling two or any
// operand's binding window exceeding max_binding_bytes, and without overlapping live values;
// a value larger than a binding is an error naming the node; the weights arena packs Params
// and Constants at aligned offsets.
#include <gmock/gmock.h>

#include "models/init.h"
#include "models/transformer.h"
#include "plan/plan_test_util.h"
#include "plan/random_graph.h"

namespace rlx {
namespace {

using plan::DeviceLimits;
using plan::Location;
using plan::MemoryPlan;
using plan::PlanOptions;
using ::testing::HasSubstr;

PlanOptions with(const DeviceLimits& d, int64_t alignment = 256) {
  PlanOptions o;
  o.alignment = alignment;
  o.device = d;
  return o;
}

// The plan with every arena buffer laid end to end: one address space in which the planner's
// independent no-overlap check (plantest::overlap_violation) covers overlaps within a buffer
// and (impossible by construction, but checked) across buffers.
MemoryPlan flattened(const MemoryPlan& mp) {
  std::vector<int64_t> base{0};
  for (int64_t b : mp.arena_buffers) base.push_back(base.back() + b);
  MemoryPlan f = mp;
  for (auto& locs : f.locations)
    for (Location& l : locs)
      if (l.kind == Location::Kind::Arena) l.offset += base.at(static_cast<size_t>(l.buffer));
  f.arena_bytes = base.back();
  return f;
}

// Every value lies inside its buffer, every buffer within max_buffer_bytes, and every step
// operand's binding window starts aligned, at or below the operand, within the buffer and at
// most max_binding_bytes long. Returns the first violation or "".
std::string limit_violation(const Graph& g, const PlanOptions& o) {
  const plan::Schedule s = plan::build_schedule(g, o);
  const MemoryPlan& mp = s.memory;
  const DeviceLimits& d = o.device;
  int64_t sum = 0;
  for (int64_t b : mp.arena_buffers) {
    if (d.max_buffer_bytes > 0 && b > d.max_buffer_bytes) return "an arena buffer of " + std::to_string(b) + " bytes";
    sum += b;
  }
  if (sum != mp.arena_bytes) return "arena_bytes is not the sum of the buffers";
  for (const plan::Slot& sl : mp.slots)
    if (sl.offset % o.slot_alignment() != 0) return "an unaligned slot";
  auto check = [&](const plan::TensorRef& r) -> std::string {
    const Location& l = r.loc;
    if (l.kind != Location::Kind::Arena || l.bytes == 0) return "";
    const std::string v = Graph::value_str(r.value);
    if (l.buffer < 0 || static_cast<size_t>(l.buffer) >= mp.arena_buffers.size()) return v + ": no such buffer";
    const int64_t cap = mp.arena_buffers[static_cast<size_t>(l.buffer)];
    if (l.offset < 0 || l.offset + l.bytes > cap) return v + " straddles the end of buffer " + std::to_string(l.buffer);
    const plan::BindingWindow w = plan::binding_window(l, d);
    if (w.buffer != l.buffer || w.offset % d.alignment != 0 || w.offset > l.offset || w.offset + w.rel != l.offset)
      return v + ": a bad window start";
    if (w.offset + w.bytes > cap || w.bytes < l.bytes) return v + ": the window leaves the buffer";
    if (d.max_binding_bytes > 0 && w.bytes > d.max_binding_bytes) return v + ": a window over max_binding_bytes";
    return "";
  };
  for (const plan::Step& st : s.steps) {
    for (const auto& r : st.in)
      if (auto e = check(r); !e.empty()) return e;
    for (const auto& r : st.out)
      if (auto e = check(r); !e.empty()) return e;
  }
  return "";
}

Graph bert(int layers) {
  Graph g;
  Value h = g.input("hidden", Shape::of({2, 8, 32}));
  Value m = g.input("mask", Shape::of({2, 8}));
  models::BertLayerConfig cfg;
  cfg.hidden = 32, cfg.num_heads = 4, cfg.ffn = 64;
  for (int l = 0; l < layers; ++l) h = models::build_bert_layer(g, h, m, cfg, "l" + std::to_string(l));
  g.add_output(h);
  return g;
}

void expect_same_layout(const MemoryPlan& a, const MemoryPlan& b) {
  EXPECT_EQ(a.arena_bytes, b.arena_bytes);
  ASSERT_EQ(a.slots.size(), b.slots.size());
  for (size_t s = 0; s < a.slots.size(); ++s) {
    EXPECT_EQ(a.slots[s].offset, b.slots[s].offset);
    EXPECT_EQ(a.slots[s].bytes, b.slots[s].bytes);
  }
  ASSERT_EQ(a.locations.size(), b.locations.size());
  for (size_t n = 0; n < a.locations.size(); ++n)
    for (size_t p = 0; p < a.locations[n].size(); ++p) {
      const Location &x = a.locations[n][p], &y = b.locations[n][p];
      EXPECT_EQ(x.kind, y.kind);
      EXPECT_EQ(x.offset, y.offset);
      EXPECT_EQ(x.bytes, y.bytes);
      EXPECT_EQ(x.buffer, y.buffer);
      EXPECT_EQ(x.storage, y.storage);
    }
}

TEST(DeviceLimits, DefaultsGiveTheOneArenaPlan) {
  std::vector<Graph> graphs{bert(2)};
  for (uint32_t seed = 0; seed < 40; ++seed) graphs.push_back(plantest::random_graph(seed));
  DeviceLimits roomy;  // limits that never bind change nothing
  roomy.device = "roomy", roomy.alignment = 256, roomy.max_binding_bytes = int64_t{1} << 40;
  roomy.max_buffer_bytes = int64_t{1} << 40;
  for (const Graph& g : graphs) {
    const MemoryPlan mp = plan::plan_memory(g);
    EXPECT_EQ(mp.arena_buffers, std::vector<int64_t>{mp.arena_bytes});
    EXPECT_TRUE(mp.weights_buffers.empty());
    EXPECT_EQ(mp.weights_bytes, 0);
    EXPECT_TRUE(mp.narrowed.empty());
    for (const Node& n : g.nodes())
      for (uint32_t p = 0; p < n.outputs.size(); ++p) {
        const Location& l = mp.at(Value{n.id, p});
        EXPECT_NE(l.kind, Location::Kind::Weights);
        EXPECT_EQ(l.buffer, 0);
        EXPECT_EQ(l.storage, n.outputs[p].dtype);
        EXPECT_EQ(l.bytes, n.outputs[p].nbytes());
      }
    expect_same_layout(mp, plan::plan_memory(g, with(roomy)));
  }
}

TEST(DeviceLimits, TinyBuffersSplitTheArenaWithoutStraddlingOrOverlap) {
  // f32[4, 8] values are 128 bytes: with 64-byte alignment and 300-byte buffers, two slots fit
  // a buffer; every binding window is at most 128 bytes.
  DeviceLimits d;
  d.device = "tiny", d.alignment = 64, d.max_binding_bytes = 128, d.max_buffer_bytes = 300;
  const PlanOptions o = with(d, 64);
  int split = 0;
  for (uint32_t seed = 0; seed < 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Graph g = plantest::random_graph(seed);
    const MemoryPlan mp = plan::plan_memory(g, o);
    EXPECT_EQ(limit_violation(g, o), "");
    EXPECT_EQ(plantest::overlap_violation(g, flattened(mp)), "");
    // The same slots as the one-arena plan at this alignment, only placed in several buffers.
    const MemoryPlan one = plan::plan_memory(g, with(DeviceLimits{}, 64));
    EXPECT_EQ(mp.slots.size(), one.slots.size());
    EXPECT_EQ(mp.peak_bytes, one.peak_bytes);
    split += mp.arena_buffers.size() > 1;
  }
  EXPECT_GT(split, 60);  // most graphs need more than two slots
}

TEST(DeviceLimits, BertLayersPlanInSmallBuffers) {
  const Graph g = bert(2);
  const int64_t one = plan::plan_memory(g).arena_bytes;
  // The largest weight is f32[32, 96] (12 KiB); the one-arena plan needs more than 12 KiB.
  DeviceLimits d;
  d.device = "small", d.alignment = 256, d.max_binding_bytes = 12288, d.max_buffer_bytes = 12288;
  d.weights_arena = true;
  const PlanOptions o = with(d);
  const MemoryPlan mp = plan::plan_memory(g, o);
  EXPECT_GT(one, d.max_buffer_bytes);
  EXPECT_GT(mp.arena_buffers.size(), 1u);
  EXPECT_GE(mp.arena_bytes, mp.peak_bytes);
  EXPECT_EQ(limit_violation(g, o), "");
  EXPECT_EQ(plantest::overlap_violation(g, flattened(mp)), "");
  // The weights split too; each lies inside its buffer.
  EXPECT_GT(mp.weights_buffers.size(), 1u);
  for (int64_t b : mp.weights_buffers) EXPECT_LE(b, d.max_buffer_bytes);
  for (const Node& n : g.nodes())
    if (std::holds_alternative<ops::Param>(n.op)) {
      const Location& l = mp.at(Value{n.id, 0});
      ASSERT_EQ(l.kind, Location::Kind::Weights);
      EXPECT_EQ(l.offset % 256, 0);
      EXPECT_LE(l.offset + l.bytes, mp.weights_buffers.at(static_cast<size_t>(l.buffer)));
    }
}

TEST(DeviceLimits, AValueLargerThanABindingIsAnErrorNamingTheNode) {
  Graph g;
  Value x = g.input("x", Shape::of({256}));  // 1 KiB
  Value c = g.concat({x, x, x, x}, 0);       // 4 KiB
  g.add_output(g.exp(c));
  DeviceLimits d;
  d.device = "WebGPU", d.max_binding_bytes = 2048, d.max_buffer_bytes = 1 << 20;
  try {
    plan::plan_memory(g, with(d));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, HasSubstr(node_label(g.node(c.node))));
    EXPECT_THAT(m, HasSubstr("4096 bytes"));
    EXPECT_THAT(m, HasSubstr("WebGPU"));
    EXPECT_THAT(m, HasSubstr("max_binding_bytes 2048"));
    EXPECT_THAT(m, HasSubstr("make the tensor smaller"));
  }
  // A buffer limit below the binding limit is the one named.
  d.max_binding_bytes = 0, d.max_buffer_bytes = 1024 + 512;
  EXPECT_THROW(
      try { plan::plan_memory(g, with(d)); } catch (const Error& e) {
        EXPECT_THAT(std::string(e.what()), HasSubstr("max_buffer_bytes 1536"));
        throw;
      },
      Error);
  // Bad limits are named.
  d.alignment = 48;
  EXPECT_THROW(plan::plan_memory(g, with(d)), Error);
}

TEST(DeviceLimits, WeightsArenaPacksParamsAndConstantsAtAlignedOffsets) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 8}));
  Value w1 = g.param("w1", Shape::of({8, 8}));  // 256 bytes
  Value b = g.constant(Tensor::f32({8}, std::vector<float>(8, 0.5f)));  // 32 bytes
  Value w2 = g.param("w2", Shape::of({8, 3}));  // 96 bytes
  Value w2r = g.reshape(w2, {Dim(8), Dim(3)});  // a view of a weight
  Value w1n = g.narrow(w1, 0, 2, 3);            // rows 2..4 of w1: 64 bytes in
  Value y = g.add(g.matmul(x, w1), b);
  g.add_output(g.matmul(y, w2r));
  g.add_output(g.exp(w1n));

  DeviceLimits d;
  d.device = "Vulkan", d.alignment = 256, d.weights_arena = true;
  const MemoryPlan mp = plan::plan_memory(g, with(d));
  auto at = [&](Value v) { return mp.at(v); };
  EXPECT_EQ(at(x).kind, Location::Kind::Leaf);  // inputs change every run: their own tensors
  for (Value v : {w1, b, w2, w2r, w1n}) {
    EXPECT_EQ(at(v).kind, Location::Kind::Weights);
    EXPECT_EQ(at(v).buffer, 0);
  }
  EXPECT_EQ(at(w1).offset, 0);
  EXPECT_EQ(at(b).offset, 256);
  EXPECT_EQ(at(w2).offset, 512);
  EXPECT_EQ(at(w2).leaf, w2.node);
  EXPECT_EQ(at(w2r).offset, 512);
  EXPECT_TRUE(at(w2r).is_view);
  EXPECT_EQ(at(w2r).leaf, w2.node);
  EXPECT_EQ(at(w1n).offset, 2 * 8 * 4);
  EXPECT_EQ(mp.weights_buffers, std::vector<int64_t>{768});
  EXPECT_EQ(mp.weights_bytes, 768);
  EXPECT_EQ(mp.arena_bytes, plan::plan_memory(g).arena_bytes);  // the arena is not affected

  // Steps read weights through Weights locations.
  const plan::Schedule s = plan::build_schedule(g, with(d));
  int weight_operands = 0;
  for (const plan::Step& st : s.steps)
    for (const auto& r : st.in) weight_operands += r.loc.kind == Location::Kind::Weights;
  EXPECT_EQ(weight_operands, 4);  // w1, b, w2 (through its reshape), the narrow of w1

  // 300-byte buffers: w1 and b share buffer 0, w2 opens buffer 1.
  d.max_buffer_bytes = 300;
  const MemoryPlan split = plan::plan_memory(g, with(d));
  EXPECT_EQ(split.at(w1).buffer, 0);
  EXPECT_EQ(split.at(b).buffer, 0);
  EXPECT_EQ(split.at(b).offset, 256);
  EXPECT_EQ(split.at(w2).buffer, 1);
  EXPECT_EQ(split.at(w2).offset, 0);
  EXPECT_EQ(split.at(w2r).buffer, 1);
  EXPECT_EQ(split.weights_buffers, (std::vector<int64_t>{300, 256}));
}

}  // namespace
}  // namespace rlx
