#include "backends/cuda/variant.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

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

namespace rlx::cuda {
namespace {

std::atomic<uint64_t> g_captures{0}, g_replays{0}, g_eager{0}, g_param_uploads{0}, g_packed{0}, g_dropped{0};
std::atomic<double> g_last_device_ms{0};

constexpr size_t kGemmWorkspace = size_t(32) << 20;
// Device staging for packing a weight whose stored layout is not kept: uploaded this many
// bytes of rows at a time (at least one row).
constexpr size_t kPackStaging = size_t(16) << 20;

std::mutex g_profile_mu;
std::map<std::string, std::pair<double, uint64_t>> g_profile;  // op kind -> (ms, launches)

bool profiling() {
  const char* e = std::getenv("RLX_CUDA_PROFILE");
  return e && std::string(e) == "1";
}

// True when environment variable `name` is "0" (a feature switched off).
bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

bool graphs_enabled() { return !env_off("RLX_CUDA_GRAPHS"); }

class CudaVariant final : public Variant, private LowerContext {
 public:
  CudaVariant(Graph g, const CompileOptions& options) : graph_(std::move(g)), options_(options) {
    device();
    sched_ = plan::build_schedule(graph_);
    arena_ = DeviceBuffer(static_cast<size_t>(sched_.memory.arena_bytes), "the arena of a compiled graph");
    err_ = DeviceBuffer(sizeof(int), "the error flag");
    err_host_.reserve(sizeof(int));
    for (const Node& n : graph_.nodes()) {
      const bool input = std::holds_alternative<ops::Input>(n.op), param = std::holds_alternative<ops::Param>(n.op);
      const auto* cst = std::get_if<ops::Constant>(&n.op);
      if (!input && !param && !cst) continue;
      const int64_t bytes = n.outputs.at(0).nbytes();
      leaves_.emplace(n.id, DeviceBuffer(static_cast<size_t>(bytes), "leaf " + node_label(n)));
      if (input) inputs_.push_back(n.id);
      if (param) params_.push_back(n.id);
      if (param || cst) weight_bytes_ += static_cast<size_t>(bytes);
      if (cst && bytes > 0)
        RLX_CUDA_CHECK(cudaMemcpy(leaves_.at(n.id).data(), cst->value.raw(), static_cast<size_t>(bytes),
                                  cudaMemcpyHostToDevice));
    }
    // Producers absorbed into a GEMV prologue (RLX_CUDA_GEMV_PROLOGUE=0: off) or read in place
    // by the attention decode (RLX_CUDA_ATTN_CONCAT=0: off) are not lowered on their own.
    std::set<size_t> absorbed;
    auto take = [&](size_t consumer, size_t producer) {
      producers_of_[&sched_.steps[consumer]].push_back(&sched_.steps[producer]);
      absorbed.insert(producer);
    };
    if (!env_off("RLX_CUDA_GEMV_PROLOGUE"))
      for (const auto& [consumer, producer] : plan_gemv_prologues(sched_, options_.precision)) take(consumer, producer);
    auto absorb = [&](const std::map<size_t, std::vector<size_t>>& plan) {
      for (const auto& [consumer, producers] : plan)
        for (size_t producer : producers) take(consumer, producer);
    };
    if (!env_off("RLX_CUDA_ATTN_CONCAT")) {
      const auto concats = plan_attention_concats(sched_);
      absorb(concats);
      // ... and rotates q and the new K rows itself (RLX_CUDA_ATTN_ROPE=0: off), given the concats.
      if (!env_off("RLX_CUDA_ATTN_ROPE")) absorb(plan_attention_ropes(sched_, concats));
    }
    // Consecutive q/k RoPEs in one launch (RLX_CUDA_ROPE_PAIRS=0: off), unless absorbed above.
    if (!env_off("RLX_CUDA_ROPE_PAIRS"))
      for (const auto& [second, first] : plan_rope_pairs(sched_)) {
        if (absorbed.count(second) || absorbed.count(first)) continue;
        take(second, first);
      }
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

  const Graph& graph() const override { return graph_; }
  size_t arena_bytes() const override { return static_cast<size_t>(sched_.memory.arena_bytes); }

  std::vector<Tensor> run(const RunArgs& args) override {
    device();
    cudaStream_t s = stream_.get();
    // Params: once per generation (set_param bumps it).
    if (!params_uploaded_ || args.params_generation != params_generation_) {
      for (NodeId id : params_) {
        upload_leaf(id, args, s);
        repack(id, leaf_tensor(id, args).raw(), s);
      }
      RLX_CUDA_CHECK(cudaStreamSynchronize(s));  // the host tensors may change after set_param
      params_uploaded_ = true;
      params_generation_ = args.params_generation;
      ++g_param_uploads;
    }
    // Inputs through pinned staging.
    size_t in_bytes = 0;
    for (NodeId id : inputs_) in_bytes += leaf_tensor(id, args).nbytes();
    in_stage_.reserve(in_bytes);
    size_t off = 0;
    for (NodeId id : inputs_) {
      const Tensor& t = leaf_tensor(id, args);
      if (t.nbytes() == 0) continue;
      std::memcpy(in_stage_.data() + off, t.raw(), t.nbytes());
      RLX_CUDA_CHECK(cudaMemcpyAsync(leaves_.at(id).data(), in_stage_.data() + off, t.nbytes(), cudaMemcpyHostToDevice, s));
      off += t.nbytes();
    }
    RLX_CUDA_CHECK(cudaEventRecord(ev_start_.get(), s));
    execute(s);
    RLX_CUDA_CHECK(cudaEventRecord(ev_stop_.get(), s));
    // Outputs (and the error flag) back through pinned staging.
    size_t out_bytes = 0;
    for (size_t k : args.which) out_bytes += static_cast<size_t>(sched_.outputs.at(k).loc.bytes);
    out_stage_.reserve(std::max<size_t>(out_bytes, 1));
    off = 0;
    for (size_t k : args.which) {
      const plan::TensorRef& r = sched_.outputs.at(k);
      const size_t n = static_cast<size_t>(r.numel()) * dtype_size(r.dtype);
      if (n) RLX_CUDA_CHECK(cudaMemcpyAsync(out_stage_.data() + off, ptr(r), n, cudaMemcpyDeviceToHost, s));
      off += n;
    }
    RLX_CUDA_CHECK(cudaMemcpyAsync(err_host_.data(), err_.data(), sizeof(int), cudaMemcpyDeviceToHost, s));
    RLX_CUDA_CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    RLX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_start_.get(), ev_stop_.get()));
    g_last_device_ms = ms;
    int err = 0;
    std::memcpy(&err, err_host_.data(), sizeof err);
    if (err == 1) throw Error("gather on CUDA: an index is out of range of the gathered axis (indices must be in [-n, n))");
    if (err != 0) {
      std::string msg = select_error_message(err);
      if (msg.empty()) msg = elementwise_error_message(err);
      throw Error(msg.empty() ? "a CUDA kernel reported error code " + std::to_string(err) : msg);
    }
    std::vector<Tensor> outs;
    off = 0;
    for (size_t k : args.which) {
      const plan::TensorRef& r = sched_.outputs.at(k);
      Tensor t = Tensor::empty(r.dtype, r.dims);
      if (t.nbytes()) std::memcpy(t.raw(), out_stage_.data() + off, t.nbytes());
      off += t.nbytes();
      outs.push_back(std::move(t));
    }
    return outs;
  }

 private:
  // ---- LowerContext ----
  uint8_t* ptr(const plan::TensorRef& r) override {
    if (r.loc.kind == plan::Location::Kind::Arena) return arena_.data() + r.loc.offset;
    auto it = leaves_.find(r.loc.leaf);
    if (it == leaves_.end()) throw Error("CUDA variant: value of node " + std::to_string(r.value.node) + " reads a missing leaf");
    if (dropped_.count(r.loc.leaf))
      throw Error("CUDA variant: internal: " + node_label(graph_.node(r.loc.leaf)) + " is kept only packed");
    raw_used_.insert(r.loc.leaf);
    return it->second.data() + r.loc.offset;
  }
  size_t weight_bytes() const override { return weight_bytes_; }
  uint8_t* packed_weight(const plan::TensorRef& w, int64_t k, int64_t n, int64_t ldk, bool tiles,
                         const std::string& what) override {
    if (w.loc.kind != plan::Location::Kind::Leaf) return nullptr;
    const Node& leaf = graph_.node(w.loc.leaf);
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
  int* error_flag() override { return reinterpret_cast<int*>(err_.data()); }
  std::vector<const plan::Step*> absorbed_producers(const plan::Step& consumer) const override {
    const auto it = producers_of_.find(&consumer);
    return it == producers_of_.end() ? std::vector<const plan::Step*>{} : it->second;
  }

  // ---- running ----
  const Tensor& leaf_tensor(NodeId id, const RunArgs& args) const {
    auto it = args.leaves.find(id);
    if (it == args.leaves.end())
      throw Error("CUDA run: no tensor was given for " + node_label(graph_.node(id)));
    return it->second;
  }

  void upload_leaf(NodeId id, const RunArgs& args, cudaStream_t s) {
    const Tensor& t = leaf_tensor(id, args);
    const int64_t want = graph_.node(id).outputs.at(0).nbytes();
    if (static_cast<int64_t>(t.nbytes()) != want)
      throw Error("CUDA run: " + node_label(graph_.node(id)) + " got " + std::to_string(t.nbytes()) + " bytes, expected " +
                  std::to_string(want));
    if (want && !dropped_.count(id))
      RLX_CUDA_CHECK(cudaMemcpyAsync(leaves_.at(id).data(), t.raw(), static_cast<size_t>(want), cudaMemcpyHostToDevice, s));
  }

  // ---- packed weights ----
  // After lowering: a param or constant that only packed readers use is not kept as stored
  // (its rows go through a bounded staging buffer when it is packed); constants are packed now.
  void finish_packing() {
    if (packed_.empty()) return;
    size_t staging = 0;
    for (const auto& p : packed_) {
      if (raw_used_.count(p->leaf)) continue;
      if (dropped_.insert(p->leaf).second) ++g_dropped;
      staging = std::max(staging, std::min(kPackStaging, static_cast<size_t>(p->k * p->n) * p->es));
      staging = std::max(staging, static_cast<size_t>(p->n) * p->es);  // one row at least
    }
    if (staging) staging_ = DeviceBuffer(staging, "the weight packing staging buffer");
    cudaStream_t s = stream_.get();
    for (const auto& p : packed_)
      if (const auto* cst = std::get_if<ops::Constant>(&graph_.node(p->leaf).op)) repack(p->leaf, cst->value.raw(), s);
    for (NodeId id : dropped_) leaves_.at(id) = DeviceBuffer();
    RLX_CUDA_CHECK(cudaStreamSynchronize(s));
  }

  // Rewrites the packed regions of leaf `id` from its new value (`host`: its bytes as stored):
  // from the device copy when one is kept, else through the staging buffer.
  void repack(NodeId id, const void* host, cudaStream_t s) {
    for (const auto& p : packed_) {
      if (p->leaf != id) continue;
      const size_t row_bytes = static_cast<size_t>(p->n) * p->es;
      const bool stored = !dropped_.count(id);
      // Rows per launch: the staging buffer's worth, and at most 65535 tiles of 32.
      const int64_t chunk = std::min<int64_t>(
          65535 * 32, stored ? p->k : static_cast<int64_t>(std::max<size_t>(1, staging_.size() / row_bytes)));
      for (int64_t k0 = 0; k0 < p->k; k0 += chunk) {
        const int64_t rows = std::min(chunk, p->k - k0);
        const size_t from = static_cast<size_t>(p->offset) + static_cast<size_t>(k0) * row_bytes;
        const uint8_t* src = nullptr;
        if (stored) {
          src = leaves_.at(id).data() + from;
        } else {
          RLX_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), static_cast<const uint8_t*>(host) + from,
                                         static_cast<size_t>(rows) * row_bytes, cudaMemcpyHostToDevice, s));
          src = staging_.data();
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
    RLX_CUDA_CHECK(cudaMemsetAsync(err_.data(), 0, sizeof(int), s));
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
    if (profiling()) {
      RLX_CUDA_CHECK(cudaMemsetAsync(err_.data(), 0, sizeof(int), s));
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
      std::lock_guard<std::mutex> lock(g_profile_mu);
      for (size_t i = 0; i < ops_.size(); ++i) {
        float ms = 0;
        RLX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i]->get(), ev[i + 1]->get()));
        auto& e = g_profile[labels_[i]];
        e.first += ms;
        e.second += 1;
      }
      ++g_eager;
      return;
    }
    if (!graphs_enabled()) {
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

  Graph graph_;
  CompileOptions options_;
  plan::Schedule sched_;
  Stream stream_;
  Event ev_start_, ev_stop_;
  DeviceBuffer arena_, err_, workspace_;
  PinnedBuffer in_stage_, out_stage_, err_host_;
  std::unordered_map<NodeId, DeviceBuffer> leaves_;
  size_t weight_bytes_ = 0;  // params and constants
  std::vector<NodeId> inputs_, params_;
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
  std::set<NodeId> dropped_;   // leaves kept only packed (no stored copy on the device)
  DeviceBuffer staging_;
  bool params_uploaded_ = false;
  uint64_t params_generation_ = 0;
  std::vector<DeviceOp> ops_;
  std::vector<std::string> labels_;  // op kind of each entry of ops_ (profiling)
  std::string current_label_;
  std::vector<std::unique_ptr<GemmPlan>> gemms_;
  std::vector<DeviceBuffer> scratch_;
  // GEMV -> the step its prologue computes; attention -> the concats it reads in place.
  std::map<const plan::Step*, std::vector<const plan::Step*>> producers_of_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<Variant> make_cuda_variant(Graph g, const CompileOptions& options) {
  return std::make_unique<CudaVariant>(std::move(g), options);
}

std::string take_profile_report() {
  std::lock_guard<std::mutex> lock(g_profile_mu);
  std::vector<std::pair<std::string, std::pair<double, uint64_t>>> rows(g_profile.begin(), g_profile.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::string out;
  char buf[160];
  for (const auto& [name, v] : rows) {
    std::snprintf(buf, sizeof buf, "  %-26s %10.3f ms %6.1f%% %8llu launch groups\n", name.c_str(), v.first,
                  total > 0 ? 100.0 * v.first / total : 0.0, static_cast<unsigned long long>(v.second));
    out += buf;
  }
  g_profile.clear();
  return out;
}

RunStats run_stats() {
  RunStats r;
  r.graph_captures = g_captures.load();
  r.graph_replays = g_replays.load();
  r.eager_runs = g_eager.load();
  r.param_uploads = g_param_uploads.load();
  r.packed_weights = g_packed.load();
  r.dropped_leaves = g_dropped.load();
  r.last_device_ms = g_last_device_ms.load();
  return r;
}

}  // namespace rlx::cuda
