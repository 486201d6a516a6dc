#include "backends/cuda/variant.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/device.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernel_cache.h"
#include "backends/cuda/launch.h"
#include "backends/cuda/lower.h"
#include "backends/cuda/select_lower.h"
#include "backends/cuda/stats.h"
#include "backends/cuda/status.h"
#include "plan/schedule.h"
#include "rlx/error.h"
#include "runtime/device_profile.h"
#include "runtime/device_variant.h"

namespace rlx::cuda {
namespace {

std::atomic<uint64_t> g_captures{0}, g_replays{0}, g_eager{0}, g_packed{0}, g_dropped{0};

constexpr size_t kGemmWorkspace = size_t(32) << 20;
// Device staging for packing a weight whose stored layout is not kept: uploaded this many
// bytes of rows at a time (at least one row).
constexpr size_t kPackStaging = size_t(16) << 20;

StepProfile g_profile;  // op kind -> device time of its launches

// A CacheWrite over a dying cache Input writes its new rows in place (PlanOptions::write_inputs):
// every input is uploaded (or carried) into the variant's own leaf buffer, so no caller memory is
// written, and a carried cache that is already that buffer is not copied (DeviceVariant::carry_in).
plan::PlanOptions plan_options() {
  plan::PlanOptions p;
  p.write_inputs = true;
  return p;
}


class CudaVariant final : public DeviceVariant, private LowerContext {
 public:
  CudaVariant(Graph g, const CompileOptions& options)
      : DeviceVariant(std::move(g), std::make_unique<CudaDevice>(), plan_options()),
        options_(options),
        knobs_(resolve_knobs(options)) {
    const plan::Schedule& sched_ = schedule();
    // Producers absorbed into a GEMV prologue (knob cuda_gemv_prologue) or read in place by the
    // attention decode (knob cuda_attn_concat) are not lowered on their own.
    std::set<size_t> absorbed;
    auto take = [&](size_t consumer, size_t producer) {
      producers_of_[&sched_.steps[consumer]].push_back(&sched_.steps[producer]);
      absorbed.insert(producer);
    };
    if (knobs_.cuda_gemv_prologue())
      for (const auto& [consumer, producer] : plan_gemv_prologues(sched_, options_.precision)) take(consumer, producer);
    auto absorb = [&](const std::map<size_t, std::vector<size_t>>& plan) {
      for (const auto& [consumer, producers] : plan)
        for (size_t producer : producers) take(consumer, producer);
    };
    if (knobs_.cuda_attn_concat()) {
      const auto concats = plan_attention_concats(sched_);
      absorb(concats);
      // ... and rotates q and the new K rows itself (knob cuda_attn_rope), given the concats.
      if (knobs_.cuda_attn_rope()) absorb(plan_attention_ropes(sched_, concats));
    }
    // Decode DequantMatMuls of one x in one launch, with their norm / residual / SwiGLU (knob
    // cuda_dequant_groups).
    if (knobs_.cuda_dequant_groups()) {
      const auto groups = plan::plan_dequant_gemv_groups(sched_, kDequantGroupLimits);
      for (const auto& [last, g] : groups) {
        DequantGroup& d = dequant_groups_[&sched_.steps[last]];
        for (size_t m : g.members) d.members.push_back(&sched_.steps[m]);
        auto at = [&](const std::optional<size_t>& i) { return i ? &sched_.steps[*i] : nullptr; };
        d.norm = at(g.norm), d.residual_add = at(g.residual_add), d.swiglu = at(g.swiglu), d.gate = g.gate;
      }
      const std::set<size_t> silent = plan::steps_not_run(groups);
      absorbed.insert(silent.begin(), silent.end());
    }
    // The k and v cache writes of an attention in one launch (knob cuda_cache_write_pairs), each
    // rotating its rows when they are a RoPE's result (knob cuda_cache_write_rope).
    const std::map<size_t, size_t> cw_pairs =
        knobs_.cuda_cache_write_pairs() ? plan::plan_cache_write_pairs(sched_) : std::map<size_t, size_t>{};
    if (knobs_.cuda_cache_write_rope())
      for (const auto& [write, rope] : plan::plan_cache_write_ropes(sched_, cw_pairs))
        if (!absorbed.count(rope)) take(write, rope);
    // Consecutive q/k RoPEs in one launch (knob cuda_rope_pairs), unless absorbed above.
    if (knobs_.cuda_rope_pairs())
      for (const auto& [second, first] : plan_rope_pairs(sched_)) {
        if (absorbed.count(second) || absorbed.count(first)) continue;
        take(second, first);
      }
    for (const auto& [second, first] : cw_pairs) take(second, first);
    for (const plan::TensorRef& r : sched_.outputs)  // read as stored after each run
      if (r.loc.kind == plan::Location::Kind::Leaf) raw_used_.insert(r.loc.leaf);
    for (size_t i = 0; i < sched_.steps.size(); ++i) {
      if (absorbed.count(i)) continue;
      const plan::Step& st = sched_.steps[i];
      current_label_ = op_name(st.op);
      lower_step(*this, st);
    }
    finish_packing();
  }

  ~CudaVariant() override {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  // cudaSetDevice is per host thread: a compiled graph may run on a thread that never set it.
  std::vector<Tensor> run(const RunArgs& args) override {
    device();
    return DeviceVariant::run(args);
  }
  std::vector<Tensor> kept_outputs(const std::vector<size_t>& which, bool on_device) override {
    device();
    return DeviceVariant::kept_outputs(which, on_device);
  }

 private:
  // ---- LowerContext ----
  CudaDevice& cu() const { return static_cast<CudaDevice&>(dev()); }

  uint8_t* ptr(const plan::TensorRef& r) override {
    if (r.loc.kind == plan::Location::Kind::Arena) return cu().address(arena_buf()) + r.loc.offset;
    if (is_dropped(r.loc.leaf))
      throw Error("CUDA variant: internal: " + node_label(graph().node(r.loc.leaf)) + " is kept only packed");
    const DeviceBuf leaf = leaf_buf(r.loc.leaf);
    raw_used_.insert(r.loc.leaf);
    return cu().address(leaf) + r.loc.offset;
  }
  size_t weight_bytes() const override { return stored_weight_bytes(); }
  uint8_t* packed_weight(const plan::TensorRef& w, int64_t k, int64_t n, int64_t ldk, bool tiles,
                         const std::string& what) override {
    if (w.loc.kind != plan::Location::Kind::Leaf) return nullptr;
    const Node& leaf = graph().node(w.loc.leaf);
    if (!std::holds_alternative<ops::Param>(leaf.op) && !std::holds_alternative<ops::Constant>(leaf.op)) return nullptr;
    const size_t es = dtype_size(w.dtype);
    if (static_cast<int64_t>(w.loc.offset) + k * n * static_cast<int64_t>(es) > leaf.outputs.at(0).nbytes())
      throw Error(what + ": internal: the packed weight region runs past " + node_label(leaf));
    for (const auto& p : packed_)
      if (p->leaf == w.loc.leaf && p->offset == w.loc.offset && p->k == k && p->n == n && p->ldk == ldk &&
          p->es == es && p->tiles == tiles)
        return p->buf.data();
    if (tiles && (es != 2 || ldk % 16 != 0))
      throw Error(what + ": internal: tensor-core tiles need 2-byte elements and a row length that is a multiple of 16");
    auto p = std::make_unique<PackedWeight>();
    p->leaf = w.loc.leaf, p->offset = w.loc.offset, p->k = k, p->n = n, p->ldk = ldk, p->es = es, p->tiles = tiles;
    const int64_t rows = tiles ? (n + 15) / 16 * 16 : n;
    p->buf = DeviceBuffer(static_cast<size_t>(rows * ldk) * es, what + " packed weight");
    RLX_CUDA_CHECK(cudaMemset(p->buf.data(), 0, p->buf.size()));  // the padding stays zero
    p->fn = get_kernel("gemv_pack", gemv_pack_source(es, tiles));
    packed_.push_back(std::move(p));
    ++g_packed;
    return packed_.back()->buf.data();
  }
  const CompileOptions& options() const override { return options_; }
  const ResolvedKnobs& knobs() const override { return knobs_; }
  void add(DeviceOp op) override {
    ops_.push_back(std::move(op));
    labels_.push_back(current_label_);
  }
  size_t op_count() const override { return ops_.size(); }
  uint8_t* scratch(size_t bytes, const std::string& what) override {
    scratch_.emplace_back(bytes, what);
    return scratch_.back().data();
  }
  GemmPlan& gemm(const GemmProblem& p, const std::string& what) override {
    if (!workspace_.data()) workspace_ = DeviceBuffer(kGemmWorkspace, "the cuBLASLt workspace");
    gemms_.push_back(std::make_unique<GemmPlan>(p, kGemmWorkspace, what));
    return *gemms_.back();
  }
  void* gemm_workspace() override {
    if (!workspace_.data()) workspace_ = DeviceBuffer(kGemmWorkspace, "the cuBLASLt workspace");
    return workspace_.data();
  }
  size_t gemm_workspace_bytes() const override { return kGemmWorkspace; }
  int* error_flag() override { return reinterpret_cast<int*>(cu().address(flag_buf())); }
  std::vector<const plan::Step*> absorbed_producers(const plan::Step& consumer) const override {
    const auto it = producers_of_.find(&consumer);
    return it == producers_of_.end() ? std::vector<const plan::Step*>{} : it->second;
  }
  const DequantGroup* dequant_group(const plan::Step& last) const override {
    const auto it = dequant_groups_.find(&last);
    return it == dequant_groups_.end() ? nullptr : &it->second;
  }

  // ---- running (DeviceVariant) ----
  void submit() override { execute(cu().stream()); }
  void param_uploaded(NodeId id, const Tensor& value) override { repack(id, value.raw(), cu().stream()); }
  std::string kernel_error_message(int err) const override {
    const std::string msg = elementwise_error_message(err);  // the shared codes (codegen/language.h)
    return msg.empty() ? "a CUDA kernel reported error code " + std::to_string(err) : msg;
  }

  // ---- packed weights ----
  // After lowering: a param or constant that only packed readers use is not kept as stored
  // (its rows go through a bounded staging buffer when it is packed); constants are packed now.
  void finish_packing() {
    if (packed_.empty()) return;
    size_t staging = 0;
    std::set<NodeId> dropped;
    for (const auto& p : packed_) {
      if (raw_used_.count(p->leaf)) continue;
      if (dropped.insert(p->leaf).second) ++g_dropped;
      staging = std::max(staging, std::min(kPackStaging, static_cast<size_t>(p->k * p->n) * p->es));
      staging = std::max(staging, static_cast<size_t>(p->n) * p->es);  // one row at least
    }
    if (staging) staging_ = dev().allocate(staging, "the weight packing staging buffer");
    for (NodeId id : dropped) drop_leaf(id);
    cudaStream_t s = cu().stream();
    for (const auto& p : packed_)
      if (const auto* cst = std::get_if<ops::Constant>(&graph().node(p->leaf).op)) repack(p->leaf, cst->value.raw(), s);
    dev().wait();
  }

  // Rewrites the packed regions of leaf `id` from its new value (`host`: its bytes as stored):
  // from the device copy when one is kept, else through the staging buffer.
  void repack(NodeId id, const void* host, cudaStream_t s) {
    for (const auto& p : packed_) {
      if (p->leaf != id) continue;
      const size_t row_bytes = static_cast<size_t>(p->n) * p->es;
      const bool stored = !is_dropped(id);
      // Rows per launch: the staging buffer's worth, and at most 65535 tiles of 32.
      const int64_t chunk = std::min<int64_t>(
          65535 * 32, stored ? p->k : static_cast<int64_t>(std::max<size_t>(1, cu().size(staging_) / row_bytes)));
      for (int64_t k0 = 0; k0 < p->k; k0 += chunk) {
        const int64_t rows = std::min(chunk, p->k - k0);
        const size_t from = static_cast<size_t>(p->offset) + static_cast<size_t>(k0) * row_bytes;
        const uint8_t* src = nullptr;
        if (stored) {
          src = cu().address(leaf_buf(id)) + from;
        } else {
          const HostToDevice c{staging_, 0, static_cast<const uint8_t*>(host) + from, static_cast<size_t>(rows) * row_bytes};
          dev().upload_borrowed({&c, 1});  // on stream s
          src = cu().address(staging_);
        }
        const uint8_t* dst = p->buf.data();
        long long r = rows, n = p->n, ldk = p->ldk, kk = k0;
        void* args[] = {&src, &dst, &r, &n, &ldk, &kk};
        RLX_CU_CHECK(driver().launch_kernel(p->fn, static_cast<unsigned>((p->n + 31) / 32),
                                            static_cast<unsigned>((rows + 31) / 32), 1, 32, 8, 1, 0, s, args, nullptr));
      }
    }
  }

  void issue(cudaStream_t s) {
    RLX_CUDA_CHECK(cudaMemsetAsync(cu().address(flag_buf()), 0, sizeof(int), s));
    pdl_chain_break();
    for (const DeviceOp& op : ops_) issue_op(op, s);
  }

  // One op; when it issued no kernel of ours (a cuBLASLt or cuDNN call, a copy), the next
  // launch is an ordinary stream dependency.
  static void issue_op(const DeviceOp& op, cudaStream_t s) {
    const uint64_t before = kernel_launches();
    op(s);
    if (kernel_launches() == before) pdl_chain_break();
  }

  void execute(cudaStream_t s) {
    if (process_knobs::cuda_profile()) {
      RLX_CUDA_CHECK(cudaMemsetAsync(cu().address(flag_buf()), 0, sizeof(int), s));
      std::vector<std::unique_ptr<Event>> ev;
      ev.push_back(std::make_unique<Event>());
      RLX_CUDA_CHECK(cudaEventRecord(ev.back()->get(), s));
      for (const DeviceOp& op : ops_) {
        pdl_chain_break();  // each op timed on its own
        op(s);
        ev.push_back(std::make_unique<Event>());
        RLX_CUDA_CHECK(cudaEventRecord(ev.back()->get(), s));
      }
      RLX_CUDA_CHECK(cudaStreamSynchronize(s));
      for (size_t i = 0; i < ops_.size(); ++i) {
        float ms = 0;
        RLX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i]->get(), ev[i + 1]->get()));
        g_profile.add(labels_[i], ms);
      }
      ++g_eager;
      return;
    }
    if (!knobs_.cuda_graphs()) {
      issue(s);
      ++g_eager;
      return;
    }
    if (!exec_) {
      RLX_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      try {
        issue(s);
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      cudaGraph_t graph = nullptr;
      const cudaError_t e = cudaStreamEndCapture(s, &graph);
      if (e != cudaSuccess)
        throw Error(std::string("CUDA graph capture of the schedule failed: ") + cudaGetErrorName(e) + " (" +
                    cudaGetErrorString(e) + "); set RLX_CUDA_GRAPHS=0 to run without graphs");
      const cudaError_t ie = cudaGraphInstantiate(&exec_, graph, 0);
      cudaGraphDestroy(graph);
      if (ie != cudaSuccess) {
        exec_ = nullptr;
        throw Error(std::string("CUDA graph instantiation failed: ") + cudaGetErrorName(ie) +
                    "; set RLX_CUDA_GRAPHS=0 to run without graphs");
      }
      ++g_captures;
    } else {
      ++g_replays;
    }
    RLX_CUDA_CHECK(cudaGraphLaunch(exec_, s));
  }

  CompileOptions options_;
  ResolvedKnobs knobs_;
  DeviceBuffer workspace_;
  // A weight region kept transposed for the packed GEMV (LowerContext::packed_weight).
  struct PackedWeight {
    NodeId leaf = 0;
    int64_t offset = 0, k = 0, n = 0, ldk = 0;
    size_t es = 0;
    bool tiles = false;  // the tensor-core GEMV's 16 x 16 tiles, else rows of Wt
    DeviceBuffer buf;
    CUfunction fn = nullptr;  // gemv_pack for elements of es bytes
  };
  std::vector<std::unique_ptr<PackedWeight>> packed_;
  std::set<NodeId> raw_used_;  // leaves some lowering reads as stored
  DeviceBuf staging_;          // rows of a param kept only packed, on their way to be packed
  std::vector<DeviceOp> ops_;
  std::vector<std::string> labels_;  // op kind of each entry of ops_ (profiling)
  std::string current_label_;
  std::vector<std::unique_ptr<GemmPlan>> gemms_;
  std::vector<DeviceBuffer> scratch_;
  // GEMV -> the step its prologue computes; attention -> the concats it reads in place.
  std::map<const plan::Step*, std::vector<const plan::Step*>> producers_of_;
  std::map<const plan::Step*, DequantGroup> dequant_groups_;  // by launch step
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<Variant> make_cuda_variant(Graph g, const CompileOptions& options) {
  return std::make_unique<CudaVariant>(std::move(g), options);
}

std::string take_profile_report() { return g_profile.take("launch groups"); }

namespace {
// See the Vulkan backend's registration (rlx run --profile).
[[maybe_unused]] const bool g_profile_registered = register_device_profile(
    Device::Cuda, {[] { setenv("RLX_CUDA_PROFILE", "1", 1); }, [] { return take_profile_report(); }, nullptr});
}  // namespace

RunStats run_stats() {
  RunStats r;
  r.graph_captures = g_captures.load();
  r.graph_replays = g_replays.load();
  r.eager_runs = g_eager.load();
  const DeviceStats d = device_stats();  // the shared device runtime's counters
  r.param_uploads = d.param_uploads;
  r.packed_weights = g_packed.load();
  r.dropped_leaves = g_dropped.load();
  r.last_device_ms = d.last_device_ms;
  return r;
}

}  // namespace rlx::cuda
