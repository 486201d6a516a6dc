// The WebGPU matmul family beyond the shared parity cases: every held dtype on the GEMM and the
// GEMV (integers wrapping like the CPU), broadcast batches, fused epilogues on integers (each
// step wrapping), grids past 65535 workgroups on every axis the kernels loop over, an empty
// contracting dim, the large-tile GEMM, GroupedMatMul over dtypes and index types and its bad
// expert indices reported, i64 products beyond the 32-bit words WebGPU holds i64 in reported;
// and the transposed operand layouts (no pass emits them yet), run by lowering a patched step
// straight onto the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"
#ifdef RLX_HAVE_WEBGPU
#include "backends/webgpu/lower.h"
#include "backends/webgpu/wgpu_api.h"
#include "backends/webgpu/wgpu_context.h"
#include "backends/webgpu/wgpu_device.h"
#include "backends/webgpu/wgpu_pipelines.h"
#include "plan/schedule.h"
#include "plan/step_family.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::from_doubles;
using rlx::testing::ParityOptions;
using rlx::testing::expect_webgpu_parity;
using rlx::testing::random_tensor;

constexpr DType kProductTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I8, DType::I16,
                                   DType::I32, DType::I64, DType::U8,   DType::U32};


// Integer inputs large enough that sums (and for i32 products) wrap; i64 sums stay in 32 bits.
ParityOptions wrapping(DType t) {
  ParityOptions o;
  switch (t) {
    case DType::I8: o.int_hi = 100; break;
    case DType::U8: o.int_hi = 250; break;
    case DType::I16: o.int_hi = 30000; break;
    case DType::I32:
    case DType::U32: o.int_hi = int64_t{1} << 30; break;
    case DType::I64: o.int_hi = 1000; break;
    default: break;
  }
  return o;
}

Graph matmul_graph(const std::vector<int64_t>& a, const std::vector<int64_t>& b, DType t) {
  Graph g;
  g.add_output(g.matmul(g.input("a", Shape::from(a, t)), g.input("b", Shape::from(b, t))));
  return g;
}

Graph fused_graph(int64_t rows, int64_t k, int64_t n, DType t, std::optional<ActKind> act, int64_t bias_len,
                  bool residual) {
  Graph g;
  std::vector<Value> ins{g.input("x", Shape::of({rows, k}, t)), g.param("w", Shape::of({k, n}, t))};
  if (bias_len) ins.push_back(g.param("bias", Shape::of({bias_len}, t)));
  if (residual) ins.push_back(g.input("res", Shape::of({rows, n}, t)));
  ops::FusedMatMulBiasAct f{act};
  f.residual = residual;
  g.add_output(g.apply(f, ins));
  return g;
}

Graph grouped_graph(int64_t m, int64_t k, int64_t n, int64_t e, DType t, DType it) {
  Graph g;
  g.add_output(g.apply(ops::GroupedMatMul{}, {g.input("x", Shape::of({m, k}, t)), g.input("w", Shape::of({e, k, n}, t)),
                                              g.input("idx", Shape::of({m}, it))}));
  return g;
}

struct Dims2 {
  std::vector<int64_t> a, b;
};

// GEMM (odd tiles; k not a multiple of the K tile; batched with one stride and with broadcast
// batch dims; 16-wide tiles for a small side), the GEMV (1 and 3 rows, a batched skinny
// product), and vector operands.
const std::vector<Dims2> kShapes = {{{37, 70}, {70, 45}},   {{2, 5, 9}, {2, 9, 7}},    {{4, 1, 5, 8}, {3, 8, 6}},
                                    {{2, 3, 16, 8}, {8, 24}}, {{130, 33}, {33, 150}}, {{3, 300}, {300, 130}},
                                    {{1, 3000}, {3000, 70}}, {{2, 2, 40}, {40, 33}},  {{70}, {70, 20}},
                                    {{6, 70}, {70}}};

TEST(WebGpuMatmul, EveryDtypeOnGemmAndGemv) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : kProductTypes)
    for (const Dims2& s : kShapes) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(s.a) + " @ " + dims_str(s.b));
      expect_webgpu_parity(matmul_graph(s.a, s.b, t), wrapping(t));
    }
}

// Integers: the product wraps to the dtype, then bias, activation and residual each wrap again
// (the CPU's unfused semantics). GEMM (40 rows) and GEMV (3 rows).
TEST(WebGpuMatmul, FusedEpilogueOnIntegers) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8})
    for (auto act : std::vector<std::optional<ActKind>>{std::nullopt, ActKind::Relu, ActKind::Abs, ActKind::Neg})
      for (int64_t rows : {40, 3})
        for (int64_t bias_len : {0, 1, 24}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " bias " + std::to_string(bias_len));
          ParityOptions o = wrapping(t);
          if (t == DType::I64) o.int_hi = 100;
          expect_webgpu_parity(fused_graph(rows, 600, 24, t, act, bias_len, true), o);
        }
}

// Signed values: relu(100 + 100) in i8 is relu(-56) = 0, not 200 wrapped.
TEST(WebGpuMatmul, FusedInt8ReluSeesTheWrappedSum) {
  RLX_REQUIRE_WEBGPU();
  const Graph g = fused_graph(2, 1, 3, DType::I8, ActKind::Relu, 3, false);
  rlx::testing::RunConfig wg;
  wg.label = "webgpu";
  wg.device = Device::WebGpu;
  const NamedTensors ins{{"x", from_doubles(DType::I8, {2, 1}, {10, -10})}};
  const NamedTensors params{{"w", from_doubles(DType::I8, {1, 3}, {10, 12, -3})},
                            {"bias", from_doubles(DType::I8, {3}, {100, 7, -100})}};
  const auto out = rlx::testing::run_config(g, wg, ins, params);
  ASSERT_EQ(out.size(), 1u);
  const std::vector<int64_t> want{0, 127, 126, 0, 0, 0};
  EXPECT_EQ(out[0].to_i64(), want);
}

// i64 lives in 32-bit words on WebGPU: a product or sum beyond them is reported, not wrapped.
TEST(WebGpuMatmul, I64BeyondWordsIsReported) {
  RLX_REQUIRE_WEBGPU();
  for (int64_t rows : {2, 40}) {  // GEMV and GEMM
    const Graph g = matmul_graph({rows, 3}, {3, 5}, DType::I64);
    auto cg = Session(Device::WebGpu).compile(g);
    std::vector<double> a(static_cast<size_t>(rows * 3), 60000), b(15, 60000);
    try {
      cg.run({{"a", from_doubles(DType::I64, {rows, 3}, a)}, {"b", from_doubles(DType::I64, {3, 5}, b)}});
      ADD_FAILURE() << "an i64 product beyond 32 bits was not reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("32-bit words"), std::string::npos) << e.what();
    }
  }
}

// More than 65535 workgroups on each grid axis the kernels loop over.
TEST(WebGpuMatmul, GemmBatchPastTheWorkgroupLimit) {
  RLX_REQUIRE_WEBGPU();
  expect_webgpu_parity(matmul_graph({70000, 2, 3}, {70000, 3, 2}, DType::F32));  // z: 70000 batch items
}

TEST(WebGpuMatmul, GemvColumnsPastTheWorkgroupLimit) {
  RLX_REQUIRE_WEBGPU();
  expect_webgpu_parity(matmul_graph({1, 2}, {2, 64 * 65536 + 100}, DType::F32));  // x: 65538 column groups of 64
}

TEST(WebGpuMatmul, GemmRowTilesPastTheWorkgroupLimit) {
  RLX_REQUIRE_WEBGPU();
  expect_webgpu_parity(matmul_graph({16 * 65536 + 40, 3}, {3, 2}, DType::F32));  // y: 65539 row tiles of 16
}

TEST(WebGpuMatmul, GroupedRowsPastTheWorkgroupLimit) {
  RLX_REQUIRE_WEBGPU();
  const Graph g = grouped_graph(70000, 4, 8, 3, DType::F32, DType::I32);
  std::vector<double> ix(70000);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>(i % 3);
  ParityOptions o;
  o.fixed_inputs = {{"idx", from_doubles(DType::I32, {70000}, ix)}};
  expect_webgpu_parity(g, o);  // y: 70000 rows
}

TEST(WebGpuMatmul, EmptyContractingDim) {
  RLX_REQUIRE_WEBGPU();
  expect_webgpu_parity(matmul_graph({3, 0}, {0, 5}, DType::F32));
  expect_webgpu_parity(matmul_graph({9, 0}, {0, 70}, DType::I32));
  expect_webgpu_parity(fused_graph(2, 0, 5, DType::F16, ActKind::Silu, 5, true));
}

// 128 x 128 tiles with 8 x 8 accumulators (f32, enough tiles to fill a large GPU), ragged edges.
TEST(WebGpuMatmul, LargeGemmTiles) {
  RLX_REQUIRE_WEBGPU();
  ParityOptions o;
  o.tolerance = [](DType d) {
    rlx::testing::Tolerance tol = rlx::testing::parity_tolerance(d);
    tol.atol = 1e-4;
    return tol;
  };
  expect_webgpu_parity(matmul_graph({133, 130, 72}, {133, 72, 129}, DType::F32), o);
}

// A narrow B (few column groups) splits K over workgroups, the partial sums added by a second
// kernel through the epilogue; a wide one runs in one pass. Every dtype class, 1 and 4 rows.
TEST(WebGpuMatmul, SplitGemvEpilogues) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::I64, DType::U8})
    for (int64_t rows : {1, 4}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows));
      const Graph split = fused_graph(rows, 5000, 24, t, ActKind::Relu, 24, true);
      EXPECT_EQ(rlx::testing::webgpu_dispatches(split), 2u);
      ParityOptions o = wrapping(t);
      if (t == DType::I64) o.int_hi = 100;
      o.tolerance = [](DType d) {
        rlx::testing::Tolerance tol = rlx::testing::parity_tolerance(d);
        if (d == DType::F32) tol.atol = 4e-4;
        return tol;
      };
      expect_webgpu_parity(split, o);
      EXPECT_EQ(rlx::testing::webgpu_dispatches(fused_graph(rows, 64, 64 * 300, t, std::nullopt, 0, false)), 1u);
    }
}

TEST(WebGpuMatmul, GroupedEveryDtypeAndIndexType) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : kProductTypes)
    for (DType it : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " idx " + dtype_name(it));
      const int64_t m = 7, e = 3;
      std::vector<double> ix(static_cast<size_t>(m));
      for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>((i * 2 + 1) % e);
      ParityOptions o = wrapping(t);
      o.fixed_inputs = {{"idx", from_doubles(it, {m}, ix)}};
      expect_webgpu_parity(grouped_graph(m, 300, 70, e, t, it), o);
    }
}

TEST(WebGpuMatmul, GroupedBadExpertIndexIsAnError) {
  RLX_REQUIRE_WEBGPU();
  for (DType it : {DType::I32, DType::I64})
    for (double bad : {3.0, -1.0, 1e6}) {
      const Graph g = grouped_graph(4, 16, 8, 3, DType::F32, it);
      auto cg = Session(Device::WebGpu).compile(g);
      const NamedTensors ins{{"x", random_tensor(DType::F32, {4, 16}, 1)},
                             {"w", random_tensor(DType::F32, {3, 16, 8}, 2)},
                             {"idx", from_doubles(it, {4}, {0, 2, bad, 1})}};
      try {
        cg.run(ins);
        ADD_FAILURE() << "expert index " << bad << " was not reported";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expert index"), std::string::npos) << e.what();
      }
      NamedTensors good = ins;
      good[2].second = from_doubles(it, {4}, {0, 2, 2, 1});
      EXPECT_NO_THROW(cg.run(good));
    }
}

#ifdef RLX_HAVE_WEBGPU
// Lowers steps onto the device directly: one buffer per value, the kernels' dispatches recorded
// and run in one compute pass (as the variant does), so a test can patch a step's geometry.
class DirectContext final : public webgpu::LowerContext {
 public:
  DirectContext() : knobs_(resolve_knobs(options_)) {}
  ~DirectContext() override {
    for (DeviceBuf b : owned_) dev_.release(b);
  }

  const CompileOptions& options() const override { return options_; }
  const ResolvedKnobs& knobs() const override { return knobs_; }
  const webgpu::DeviceInfo& info() const override { return webgpu::context().info; }
  webgpu::Operand in(const plan::TensorRef& r) override { return op(r, false); }
  webgpu::Operand out(const plan::TensorRef& r) override { return op(r, true); }
  webgpu::Operand scratch(size_t bytes, const std::string& what) override {
    const DeviceBuf b = alloc(bytes, what);
    return {dev_.buffer(b), 0, bytes, true};
  }
  webgpu::Operand table(const std::vector<uint32_t>& words, const std::string& what) override {
    const DeviceBuf b = alloc(words.size() * 4, what);
    const HostToDevice h{b, 0, words.data(), words.size() * 4};
    dev_.upload({&h, 1});
    return {dev_.buffer(b), 0, words.size() * 4, false};
  }
  void dispatch(const webgpu::Kernel& k, const std::vector<webgpu::Operand>& ops, const std::vector<uint32_t>& params,
                bool error_flag, uint32_t gx, uint32_t gy, uint32_t gz) override {
    Dispatch d{k, ops, {}, error_flag, {gx, gy, gz}};
    for (const auto& o : ops) d.words.push_back(o.elem());
    d.words.insert(d.words.end(), params.begin(), params.end());
    dispatches_.push_back(std::move(d));
  }
  void copy(const webgpu::Operand&, const webgpu::Operand&, uint64_t) override { ADD_FAILURE() << "unexpected copy"; }
  void fill(const webgpu::Operand&, uint64_t, uint32_t) override { ADD_FAILURE() << "unexpected fill"; }

  void set(const plan::TensorRef& r, const std::vector<uint32_t>& words) {
    const webgpu::Operand o = op(r, false);
    (void)o;
    const HostToDevice h{values_.at(key(r)), 0, words.data(), words.size() * 4};
    dev_.upload({&h, 1});
  }
  std::vector<uint32_t> get(const plan::TensorRef& r) {
    std::vector<uint32_t> w(static_cast<size_t>(r.numel()));
    const DeviceToHost d{w.data(), values_.at(key(r)), 0, w.size() * 4};
    dev_.download({&d, 1});
    dev_.wait();
    return w;
  }
  // Runs the recorded dispatches; returns the error flag.
  int run() {
    const webgpu::Api& a = webgpu::api();
    webgpu::Context& c = webgpu::context();
    const DeviceBuf flag = alloc(4, "flag");
    const uint32_t zero = 0;
    const HostToDevice hz{flag, 0, &zero, 4};
    dev_.upload({&hz, 1});
    webgpu::abi::BufferDescriptor bd;
    bd.label = webgpu::view("test uniforms");
    bd.usage = webgpu::abi::usage::Uniform | webgpu::abi::usage::CopyDst;
    bd.size = std::max<size_t>(dispatches_.size(), 1) * 256;
    webgpu::abi::Buffer uniforms = a.DeviceCreateBuffer(c.device, &bd);
    std::vector<uint32_t> host(bd.size / 4, 0);
    std::vector<webgpu::abi::BindGroup> groups;
    std::vector<const webgpu::Pipeline*> pipes;
    for (size_t i = 0; i < dispatches_.size(); ++i) {
      const Dispatch& d = dispatches_[i];
      std::copy(d.words.begin(), d.words.end(), host.begin() + static_cast<std::ptrdiff_t>(i * 64));
      const webgpu::Binds b = webgpu::plan_binds(d.ops, d.flag);
      pipes.push_back(&webgpu::pipeline_for("test:" + d.k.name, d.k.source, b.kinds));
      std::vector<webgpu::abi::Buffer> bound(b.kinds.size(), nullptr);
      for (size_t k = 0; k < d.ops.size(); ++k) bound[static_cast<size_t>(b.binding_of[k])] = d.ops[k].buffer;
      std::vector<webgpu::abi::BindGroupEntry> entries;
      for (size_t bi = 0; bi + 1 < b.kinds.size(); ++bi) {
        webgpu::abi::BindGroupEntry e;
        e.binding = static_cast<uint32_t>(bi);
        e.buffer = static_cast<int>(bi) == b.flag_binding() ? dev_.buffer(flag) : bound[bi];
        e.offset = 0;
        e.size = webgpu::abi::kWholeSize;
        entries.push_back(e);
      }
      webgpu::abi::BindGroupEntry ue;
      ue.binding = static_cast<uint32_t>(b.uniform_binding());
      ue.buffer = uniforms;
      ue.offset = i * 256;
      ue.size = std::max<uint64_t>((d.words.size() * 4 + 15) / 16 * 16, 16);
      entries.push_back(ue);
      webgpu::abi::BindGroupDescriptor gd;
      gd.layout = pipes.back()->layout;
      gd.entry_count = entries.size();
      gd.entries = entries.data();
      groups.push_back(a.DeviceCreateBindGroup(c.device, &gd));
    }
    a.QueueWriteBuffer(c.queue, uniforms, 0, host.data(), host.size() * 4);
    webgpu::abi::CommandEncoderDescriptor ed;
    webgpu::abi::CommandEncoder enc = a.DeviceCreateCommandEncoder(c.device, &ed);
    webgpu::abi::ComputePassDescriptor pd;
    webgpu::abi::ComputePassEncoder pass = a.CommandEncoderBeginComputePass(enc, &pd);
    for (size_t i = 0; i < dispatches_.size(); ++i) {
      a.ComputePassEncoderSetPipeline(pass, pipes[i]->pipeline);
      a.ComputePassEncoderSetBindGroup(pass, 0, groups[i], 0, nullptr);
      a.ComputePassEncoderDispatchWorkgroups(pass, dispatches_[i].groups[0], dispatches_[i].groups[1],
                                             dispatches_[i].groups[2]);
    }
    a.ComputePassEncoderEnd(pass);
    a.ComputePassEncoderRelease(pass);
    webgpu::abi::CommandBufferDescriptor cd;
    webgpu::abi::CommandBuffer cb = a.CommandEncoderFinish(enc, &cd);
    a.CommandEncoderRelease(enc);
    dev_.submit(cb);
    dev_.read_error_flag(flag);
    dev_.wait();
    for (auto g : groups) a.BindGroupRelease(g);
    a.BufferDestroy(uniforms);
    a.BufferRelease(uniforms);
    return dev_.error_flag();
  }

 private:
  struct Dispatch {
    webgpu::Kernel k;
    std::vector<webgpu::Operand> ops;
    std::vector<uint32_t> words;
    bool flag = false;
    uint32_t groups[3];
  };
  static uint64_t key(const plan::TensorRef& r) { return (uint64_t{r.value.node} << 8) | r.value.port; }
  DeviceBuf alloc(size_t bytes, const std::string& what) {
    owned_.push_back(dev_.allocate(std::max<size_t>(bytes, 4), what));
    return owned_.back();
  }
  webgpu::Operand op(const plan::TensorRef& r, bool write) {
    const uint64_t k = key(r);
    if (!values_.count(k)) values_[k] = alloc(static_cast<size_t>(r.numel()) * 4, "value");
    return {dev_.buffer(values_[k]), 0, static_cast<uint64_t>(r.numel()) * 4, write};
  }

  CompileOptions options_;
  ResolvedKnobs knobs_;
  webgpu::WebGpuDevice dev_;
  std::vector<DeviceBuf> owned_;
  std::map<uint64_t, DeviceBuf> values_;
  std::vector<Dispatch> dispatches_;
};

// Every transposed layout on the GEMM (one stride, broadcast batch dims) and the GEMV (1 and 3
// rows, row-major and transposed B), f32 and i32, against a host product over the stored layout.
TEST(WebGpuMatmul, TransposedOperands) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::I32})
    for (const Dims2& s : std::vector<Dims2>{{{37, 70}, {70, 45}},
                                             {{2, 20, 33}, {2, 33, 70}},
                                             {{2, 1, 5, 19}, {3, 19, 6}},
                                             {{1, 300}, {300, 130}},
                                             {{3, 40}, {40, 70}}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + dims_str(s.a) + " @ " + dims_str(s.b) + " ta " +
                       std::to_string(ta) + " tb " + std::to_string(tb));
          const Graph g = matmul_graph(s.a, s.b, t);
          plan::Schedule sched = plan::build_schedule(g);
          plan::Step* st = nullptr;
          for (plan::Step& x : sched.steps)
            if (plan::step_family(x.op) == plan::StepFamily::Matmul) st = &x;
          ASSERT_NE(st, nullptr);
          auto& mg = std::get<plan::MatMulGeom>(st->geom);
          mg.trans_a = ta, mg.trans_b = tb;
          if (ta) mg.lda = mg.m;
          if (tb) mg.ldb = mg.k;
          // Stored operands: items of m * k (k * n) words in the patched layout.
          const size_t na = static_cast<size_t>(st->in[0].numel()), nb = static_cast<size_t>(st->in[1].numel());
          std::vector<uint32_t> wa(na), wb(nb);
          auto word = [&](size_t i, uint32_t salt) -> uint32_t {
            const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + salt * 40503u;
            if (t == DType::I32) return static_cast<uint32_t>(static_cast<int32_t>(h >> 27) - 16);
            return std::bit_cast<uint32_t>(static_cast<float>(h >> 8) / 8388608.0f - 1.0f);
          };
          for (size_t i = 0; i < na; ++i) wa[i] = word(i, 1);
          for (size_t i = 0; i < nb; ++i) wb[i] = word(i, 2);
          DirectContext cx;
          cx.set(st->in[0], wa);
          cx.set(st->in[1], wb);
          webgpu::lower_matmul(cx, *st);
          ASSERT_EQ(cx.run(), 0);
          const std::vector<uint32_t> got = cx.get(st->out[0]);
          auto val = [&](uint32_t w) {
            return t == DType::I32 ? static_cast<double>(static_cast<int32_t>(w)) : static_cast<double>(std::bit_cast<float>(w));
          };
          int bad = 0;
          for (int64_t bi = 0; bi < mg.batch; ++bi) {
            int64_t rem = bi, oa = 0, ob = 0;
            for (size_t d = mg.batch_dims.size(); d-- > 0;) {
              const int64_t c = rem % mg.batch_dims[d];
              rem /= mg.batch_dims[d];
              oa += c * mg.a_batch_strides[d];
              ob += c * mg.b_batch_strides[d];
            }
            for (int64_t r = 0; r < mg.m; ++r)
              for (int64_t c = 0; c < mg.n; ++c) {
                double want = 0;
                for (int64_t kk = 0; kk < mg.k; ++kk)
                  want += val(wa[static_cast<size_t>(oa + (ta ? kk * mg.lda + r : r * mg.lda + kk))]) *
                          val(wb[static_cast<size_t>(ob + (tb ? c * mg.ldb + kk : kk * mg.ldb + c))]);
                const double have = val(got[static_cast<size_t>((bi * mg.m + r) * mg.n + c)]);
                if (std::fabs(have - want) > 1e-4 * (1 + std::fabs(want)) && bad++ < 5)
                  ADD_FAILURE() << "batch " << bi << " [" << r << ", " << c << "]: " << have << " != " << want;
              }
          }
        }
}
#endif

}  // namespace
