#include "backends/webgpu/variant.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "backends/webgpu/device_target.h"
#include "backends/webgpu/lower.h"
#include "backends/webgpu/packed_weights.h"
#include "backends/webgpu/wgpu_device.h"
#include "codegen/language.h"
#include "io/web_bundle.h"
#include "plan/absorb_plans.h"
#include "plan/device_limits.h"
#include "plan/memory_plan.h"
#include "plan/storage.h"
#include "rlx/error.h"
#include "runtime/device_profile.h"
#include "runtime/device_variant.h"

namespace rlx::webgpu {
namespace {

std::atomic<uint64_t> g_variants{0}, g_submits{0}, g_dispatches{0}, g_encoded{0}, g_packed{0}, g_copy_bytes{0};
StepProfile g_profile;  // "op:kernel" -> device time of its dispatches
constexpr uint32_t kMaxProfiled = 2048;  // dispatches timed per run (two queries each; 4096 per query set)

// A fill of words with a value other than 0 (zero fills are buffer clears).
const char* kFillWords = R"(@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
struct RlxP { o0: u32, n: u32, word: u32, }
@group(0) @binding(1) var<uniform> rlx_p: RlxP;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < rlx_p.n; i += nwg.x * 256u) { rlx_b0[rlx_p.o0 + i] = rlx_p.word; }
}
)";

// A copy between two regions of one buffer (WebGPU forbids buffer copies within one buffer):
// both operands share binding 0 (plan_binds), o0 the destination, o1 the source.
const char* kCopyWithin = R"(@group(0) @binding(0) var<storage, read_write> rlx_b0: array<u32>;
struct RlxP { o0: u32, o1: u32, n: u32, }
@group(0) @binding(1) var<uniform> rlx_p: RlxP;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < rlx_p.n; i += nwg.x * 256u) { rlx_b0[rlx_p.o0 + i] = rlx_b0[rlx_p.o1 + i]; }
}
)";

constexpr uint64_t kUniformStride = 256;  // every device's minUniformBufferOffsetAlignment is at most 256

// The memory plan's view of this device: bindings of at most maxStorageBufferBindingSize at
// offsets aligned to minStorageBufferOffsetAlignment, every buffer bound whole (so no larger
// than one binding), and WGSL's storage dtypes.
plan::PlanOptions plan_options(const DeviceInfo& di, const Graph& g, const ResolvedKnobs& knobs) {
  plan::PlanOptions o;
  o.write_inputs = true;  // cache_write over a dying cache input: the new rows only, no copy (memory_plan.h)
  o.device.device = "WebGPU (" + di.name + ")";
  o.device.alignment = std::max<int64_t>(di.limits.min_storage_buffer_offset_alignment, 4);
  o.device.max_binding_bytes = static_cast<int64_t>(std::min<uint64_t>(di.limits.max_storage_buffer_binding_size, INT64_MAX));
  o.device.max_buffer_bytes = static_cast<int64_t>(
      std::min<uint64_t>(std::min(di.limits.max_buffer_size, di.limits.max_storage_buffer_binding_size), INT64_MAX));
  o.device.storage = plan::StorageCaps::from([](DType t) { return codegen::wgsl_language().storage_dtype(t); });
  const std::optional<int64_t> pack = knobs.webgpu_packed_weights();
  o.native_weights = packed_weights(g, o, !pack ? PackWeights::Gemv : *pack ? PackWeights::All : PackWeights::Off);
  return o;
}

// The graph and its memory plan's options, made before the graph moves into the runtime.
struct Planned {
  Graph g;
  plan::PlanOptions plan;
};
Planned planned(Graph g, const CompileOptions& options) {
  const ResolvedKnobs knobs = resolve_knobs(options);
  plan::PlanOptions o = plan_options(target_info(knobs), g, knobs);
  return {std::move(g), std::move(o)};
}

struct Command {
  enum class Kind { Dispatch, Copy, Fill } kind = Kind::Dispatch;
  std::string label;  // "op:kernel" (profiles)
  const Pipeline* pipeline = nullptr;
  abi::BindGroup group = nullptr;
  uint32_t groups[3] = {1, 1, 1};
  Operand dst, src;  // Copy (between two buffers), Fill
  uint64_t bytes = 0;
  // Dispatch: what its bind group binds (kept for web_program()): the operands, their bindings
  // and the uniform's words.
  std::vector<Operand> ops;
  Binds binds;
  std::vector<uint32_t> words;
};

// A device buffer the variant owns besides the runtime's: scratch, or a table of words.
struct Owned {
  DeviceBuf buf;
  std::string what;
  std::vector<uint32_t> words;  // a table's contents
  bool table = false;
};

class WebGpuVariant final : public DeviceVariant, private LowerContext {
 public:
  WebGpuVariant(Graph g, const CompileOptions& options) : WebGpuVariant(planned(std::move(g), options), options) {}
  WebGpuVariant(Planned p, const CompileOptions& options)
      : DeviceVariant(std::move(p.g), std::make_unique<WebGpuDevice>(), p.plan),
        options_(options),
        knobs_(resolve_knobs(options)),
        info_(target_info(knobs_)) {
    const auto& steps = schedule().steps;
    // The RmsNorms and SwiGLUs a decode GEMV computes in its prologue are not lowered on their own.
    std::set<size_t> absorbed;
    if (knobs_.webgpu_gemv_prologue())
      for (const auto& [consumer, producer] : plan::plan_gemv_prologues(schedule(), gemv_prologue_rows)) {
        producer_of_[&steps[consumer]] = &steps[producer];
        absorbed.insert(producer);
      }
    // A decode's q and k RoPEs (plan::plan_rope_pairs): the first is lowered with the second.
    std::map<size_t, size_t> first_of;
    for (const auto& [second, first] : plan::plan_rope_pairs(schedule()))
      if (!absorbed.count(first) && !absorbed.count(second)) first_of[second] = first;
    std::set<size_t> paired;
    for (const auto& [second, first] : first_of) paired.insert(first);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (absorbed.count(i) || paired.count(i)) continue;
      label_ = op_name(steps[i].op);
      if (auto it = first_of.find(i); it != first_of.end() && lower_rope_pair(*this, steps[it->second], steps[i]))
        continue;
      if (auto it = first_of.find(i); it != first_of.end()) lower_step(*this, steps[it->second]);  // could not pair
      lower_step(*this, steps[i]);
    }
    make_bind_groups();
    ++g_variants;
    g_packed += p.plan.native_weights.size();
  }

  ~WebGpuVariant() override {
    const Api& a = api();
    for (Command& c : cmds_)
      if (c.group) a.BindGroupRelease(c.group);
    if (uniforms_) a.BufferDestroy(uniforms_), a.BufferRelease(uniforms_);
    if (prof_queries_) a.QuerySetDestroy(prof_queries_), a.QuerySetRelease(prof_queries_);
    for (abi::Buffer b : {prof_resolve_, prof_readback_})
      if (b) a.BufferDestroy(b), a.BufferRelease(b);
  }

  std::vector<Tensor> run(const RunArgs& args) override {
    std::vector<Tensor> out = DeviceVariant::run(args);
    collect_profile();
    return out;
  }

 private:
  WebGpuDevice& wd() const { return static_cast<WebGpuDevice&>(dev()); }

  // ---- LowerContext ----
  const CompileOptions& options() const override { return options_; }
  const ResolvedKnobs& knobs() const override { return knobs_; }
  const DeviceInfo& info() const override { return info_; }
  const plan::Step* absorbed_producer(const plan::Step& consumer) const override {
    auto it = producer_of_.find(&consumer);
    return it == producer_of_.end() ? nullptr : it->second;
  }

  Operand ref(const plan::TensorRef& r, bool write) {
    const auto [buf, offset] = where(r);
    Operand o;
    o.buffer = wd().buffer(buf);
    o.offset = offset;
    o.bytes = static_cast<uint64_t>(r.numel()) * dtype_size(r.storage());
    o.write = write;
    o.packed = dtype_size(r.storage()) == 2;  // a packed f16/bf16 param (packed_weights.h)
    if (o.packed && write) throw Error("WebGPU: internal: " + label_ + " writes a packed 16-bit param");
    return o;
  }
  Operand in(const plan::TensorRef& r) override { return ref(r, false); }
  Operand out(const plan::TensorRef& r) override { return ref(r, true); }
  Operand scratch(size_t bytes, const std::string& what) override {
    scratch_.push_back({dev().allocate(bytes, what), what, {}, false});
    Operand o;
    o.buffer = wd().buffer(scratch_.back().buf);
    o.bytes = bytes;
    o.write = true;
    return o;
  }

  Operand table(const std::vector<uint32_t>& words, const std::string& what) override {
    const size_t bytes = std::max<size_t>(words.size(), 1) * 4;
    scratch_.push_back({dev().allocate(bytes, what), what, words, true});
    if (!words.empty()) {
      const HostToDevice c{scratch_.back().buf, 0, words.data(), words.size() * 4};
      dev().upload({&c, 1});  // staged: `words` may go
    }
    Operand o;
    o.buffer = wd().buffer(scratch_.back().buf);
    o.bytes = bytes;
    return o;
  }

  struct PendingDispatch {
    size_t command;
    std::vector<Operand> ops;
    std::vector<uint32_t> words;  // the uniform: offsets, then params
    Binds binds;
  };

  void dispatch(const Kernel& k, const std::vector<Operand>& ops, const std::vector<uint32_t>& params, bool error_flag,
                uint32_t gx, uint32_t gy, uint32_t gz) override {
    if (gx == 0 || gy == 0 || gz == 0) return;
    const uint32_t lim = info().limits.max_compute_workgroups_per_dimension;
    if (gx > lim || gy > lim || gz > lim)
      throw Error("WebGPU: internal: kernel '" + k.name + "' dispatches " + std::to_string(gx) + "x" + std::to_string(gy) +
                  "x" + std::to_string(gz) + " workgroups, above the device's limit of " + std::to_string(lim));
    for (const Operand& o : ops)
      if (o.packed && !k.unpacks)
        throw Error("WebGPU: internal: kernel '" + k.name + "' of " + label_ +
                    " reads 32-bit words but is given a packed 16-bit param (packed_weights.cpp must not pack it)");
    Binds b = plan_binds(ops, error_flag);
    Command c;
    c.label = label_ + ":" + k.name;
    c.pipeline = &pipeline_for(c.label, k.source, b.kinds);
    c.groups[0] = gx, c.groups[1] = gy, c.groups[2] = gz;
    PendingDispatch p{cmds_.size(), ops, {}, std::move(b)};
    for (const Operand& o : ops) p.words.push_back(o.packed ? o.half() : o.elem());
    p.words.insert(p.words.end(), params.begin(), params.end());
    if (p.words.size() * 4 > kUniformStride)
      throw Error("WebGPU: internal: kernel '" + k.name + "' has " + std::to_string(p.words.size()) +
                  " uniform words, above " + std::to_string(kUniformStride / 4));
    pending_.push_back(std::move(p));
    cmds_.push_back(c);
    ++g_dispatches;
  }
  void copy(const Operand& dst, const Operand& src, uint64_t bytes) override {
    if (bytes == 0) return;
    if (dst.packed || src.packed) throw Error("WebGPU: internal: " + label_ + " copies a packed 16-bit param");
    if (bytes % 4 || dst.offset % 4 || src.offset % 4)
      throw Error("WebGPU: internal: a device copy of " + std::to_string(bytes) + " bytes is not 4-byte aligned");
    g_copy_bytes += bytes;
    if (dst.buffer == src.buffer) {  // a kernel, dispatched like the others (its bind group made once)
      Operand d = dst;
      d.write = true;
      dispatch(Kernel{"copy_within", kCopyWithin}, {d, src}, {static_cast<uint32_t>(bytes / 4)}, false,
               groups_1d(bytes / 4, 256), 1, 1);
      return;
    }
    Command c;
    c.kind = Command::Kind::Copy;
    c.dst = dst, c.src = src, c.bytes = bytes;
    cmds_.push_back(c);
  }
  void fill(const Operand& dst, uint64_t bytes, uint32_t word) override {
    if (bytes == 0) return;
    if (bytes % 4 || dst.offset % 4)
      throw Error("WebGPU: internal: a fill of " + std::to_string(bytes) + " bytes is not 4-byte aligned");
    if (word == 0) {
      Command c;
      c.kind = Command::Kind::Fill;
      c.dst = dst, c.bytes = bytes;
      cmds_.push_back(c);
      return;
    }
    Operand d = dst;
    d.write = true;
    dispatch(Kernel{"fill", kFillWords}, {d}, {static_cast<uint32_t>(bytes / 4), word}, false,
             groups_1d(bytes / 4, 256), 1, 1);
  }

  // One uniform buffer holding every dispatch's block, and a bind group per dispatch.
  void make_bind_groups() {
    const Api& a = api();
    if (pending_.empty()) return;
    abi::BufferDescriptor d;
    d.label = view("rlx uniforms");
    d.usage = abi::usage::Uniform | abi::usage::CopyDst;
    d.size = pending_.size() * kUniformStride;
    scoped("allocating the kernels' parameters", [&] { uniforms_ = a.DeviceCreateBuffer(wd().cx().device, &d); });
    std::vector<uint32_t> host(d.size / 4, 0);
    abi::Buffer flag = wd().buffer(flag_buf());
    for (size_t i = 0; i < pending_.size(); ++i) {
      PendingDispatch& p = pending_[i];
      std::copy(p.words.begin(), p.words.end(), host.begin() + static_cast<std::ptrdiff_t>(i * kUniformStride / 4));
      std::vector<abi::BindGroupEntry> entries;
      std::vector<abi::Buffer> bound(p.binds.kinds.size(), nullptr);
      for (size_t k = 0; k < p.ops.size(); ++k) bound[static_cast<size_t>(p.binds.binding_of[k])] = p.ops[k].buffer;
      for (size_t bi = 0; bi + 1 < p.binds.kinds.size(); ++bi) {
        abi::BindGroupEntry e;
        e.binding = static_cast<uint32_t>(bi);
        e.buffer = static_cast<int>(bi) == p.binds.flag_binding() ? flag : bound[bi];
        e.offset = 0;
        e.size = abi::kWholeSize;
        entries.push_back(e);
      }
      abi::BindGroupEntry u;
      u.binding = static_cast<uint32_t>(p.binds.uniform_binding());
      u.buffer = uniforms_;
      u.offset = i * kUniformStride;
      u.size = std::max<uint64_t>((p.words.size() * 4 + 15) / 16 * 16, 16);
      entries.push_back(u);
      abi::BindGroupDescriptor bd;
      bd.layout = cmds_[p.command].pipeline->layout;
      bd.entry_count = entries.size();
      bd.entries = entries.data();
      scoped("binding the operands of a kernel", [&] { cmds_[p.command].group = a.DeviceCreateBindGroup(wd().cx().device, &bd); });
      Command& c = cmds_[p.command];
      c.ops = std::move(p.ops);
      c.binds = std::move(p.binds);
      c.words = std::move(p.words);
    }
    a.QueueWriteBuffer(wd().cx().queue, uniforms_, 0, host.data(), host.size() * 4);
    pending_.clear();
  }

  // ---- the recorded program, for web bundles (io/web_bundle.h) ----
  std::unique_ptr<web::WebProgram> web_program() const override {
    auto p = std::make_unique<web::WebProgram>();
    p->target = info_.name;
    std::unordered_map<abi::Buffer, int> index;
    auto described = [](web::BufferRole role, std::string name) {
      web::WebBuffer b;
      b.role = role;
      b.name = std::move(name);
      return b;
    };
    auto add = [&](DeviceBuf b, web::WebBuffer wb) {
      wb.bytes = wd().size(b);
      index.emplace(wd().buffer(b), static_cast<int>(p->buffers.size()));
      p->buffers.push_back(std::move(wb));
    };
    const auto& mem = schedule().memory;
    for (size_t i = 0; i < std::max<size_t>(mem.arena_buffers.size(), 1); ++i)
      add(arena_buf(i), described(web::BufferRole::Arena, "arena " + std::to_string(i)));
    add(flag_buf(), described(web::BufferRole::Flag, "the error flag"));
    p->flag = static_cast<int>(p->buffers.size()) - 1;
    for (const Node& n : graph().nodes()) {
      const auto* in = std::get_if<ops::Input>(&n.op);
      const auto* par = std::get_if<ops::Param>(&n.op);
      const auto* cst = std::get_if<ops::Constant>(&n.op);
      if ((!in && !par && !cst) || is_dropped(n.id)) continue;
      web::WebBuffer wb;
      wb.role = in ? web::BufferRole::Input : par ? web::BufferRole::Param : web::BufferRole::Constant;
      wb.name = in ? in->name : par ? par->name : node_label(n);
      wb.dtype = n.outputs.at(0).dtype;
      wb.storage = leaf_storage(n.id);
      wb.dims = n.outputs.at(0).concrete();
      if (cst) wb.init = plan::to_storage(cst->value, wb.storage, node_label(n));
      add(leaf_buf(n.id), std::move(wb));
    }
    for (const Owned& o : scratch_) {
      web::WebBuffer wb = described(o.table ? web::BufferRole::Table : web::BufferRole::Scratch, o.what);
      if (o.table) {
        wb.init.resize(o.words.size() * 4);
        if (!o.words.empty()) std::memcpy(wb.init.data(), o.words.data(), wb.init.size());
      }
      add(o.buf, std::move(wb));
    }
    auto id = [&](abi::Buffer b) {
      auto it = index.find(b);
      if (it == index.end()) throw Error("export_web: internal: a recorded command uses a buffer the variant does not own");
      return it->second;
    };
    std::unordered_map<const Pipeline*, int> kernels;
    for (const Command& c : cmds_) {
      web::WebCommand w;
      w.label = c.label;
      switch (c.kind) {
        case Command::Kind::Dispatch: {
          w.kind = web::WebCommand::Kind::Dispatch;
          auto [it, fresh] = kernels.emplace(c.pipeline, static_cast<int>(p->kernels.size()));
          if (fresh) {
            web::WebKernel k{c.pipeline->name, c.pipeline->source, {}};
            for (BindingKind b : c.pipeline->bindings) k.bindings.push_back(static_cast<web::BindingKind>(b));
            p->kernels.push_back(std::move(k));
          }
          w.kernel = it->second;
          w.buffers.assign(c.binds.kinds.size() - 1, -1);
          for (size_t k = 0; k < c.ops.size(); ++k) w.buffers[static_cast<size_t>(c.binds.binding_of[k])] = id(c.ops[k].buffer);
          if (c.binds.error_flag) w.buffers[static_cast<size_t>(c.binds.flag_binding())] = p->flag;
          w.uniform = c.words;
          std::copy(std::begin(c.groups), std::end(c.groups), w.groups);
          break;
        }
        case Command::Kind::Copy:
          w.kind = web::WebCommand::Kind::Copy;
          w.dst = id(c.dst.buffer), w.src = id(c.src.buffer);
          w.dst_offset = c.dst.offset, w.src_offset = c.src.offset, w.bytes = c.bytes;
          break;
        case Command::Kind::Fill:
          w.kind = web::WebCommand::Kind::Clear;
          w.dst = id(c.dst.buffer), w.dst_offset = c.dst.offset, w.bytes = c.bytes;
          break;
      }
      p->commands.push_back(std::move(w));
    }
    const auto& names = graph().output_names();
    for (size_t k = 0; k < schedule().outputs.size(); ++k) {
      const plan::TensorRef& r = schedule().outputs[k];
      const auto [buf, offset] = where(r);
      web::WebOutput o;
      o.name = k < names.size() && !names[k].empty() ? names[k] : "output" + std::to_string(k);
      o.dtype = r.dtype, o.storage = r.storage(), o.dims = r.dims;
      o.buffer = id(wd().buffer(buf)), o.offset = offset;
      p->outputs.push_back(std::move(o));
    }
    for (int code = 1; code < 64; ++code)
      if (std::string m = kernel_error_message(code); !m.empty() && m != DeviceVariant::kernel_error_message(code))
        p->error_codes[code] = m;
    return p;
  }

  // ---- profiling: each dispatch in its own pass between two timestamps ----
  uint32_t profiled_count() const {
    uint32_t n = 0;
    for (const Command& c : cmds_) n += c.kind == Command::Kind::Dispatch;
    return std::min(n, kMaxProfiled);
  }
  void prepare_profile() {
    if (prof_queries_) return;
    const Api& a = api();
    const uint32_t n = profiled_count();
    abi::QuerySetDescriptor qd;
    qd.type = abi::QueryType::Timestamp;
    qd.count = 2 * n;
    abi::BufferDescriptor rd;
    rd.usage = abi::usage::QueryResolve | abi::usage::CopySrc;
    rd.size = 16ull * n;
    abi::BufferDescriptor bd;
    bd.usage = abi::usage::MapRead | abi::usage::CopyDst;
    bd.size = 16ull * n;
    scoped("creating the profile's timestamp queries", [&] {
      prof_queries_ = a.DeviceCreateQuerySet(wd().cx().device, &qd);
      prof_resolve_ = a.DeviceCreateBuffer(wd().cx().device, &rd);
      prof_readback_ = a.DeviceCreateBuffer(wd().cx().device, &bd);
    });
  }
  void collect_profile() {
    if (!prof_pending_) return;
    prof_pending_ = false;
    const Api& a = api();
    const uint32_t n = profiled_count();
    struct Mapped {
      abi::MapAsyncStatus status{};
    } m;
    abi::CallbackInfo<abi::BufferMapCallback> mc;
    mc.callback = [](abi::MapAsyncStatus s, abi::StringView, void* u1, void*) { static_cast<Mapped*>(u1)->status = s; };
    mc.userdata1 = &m;
    wait_for(a.BufferMapAsync(prof_readback_, abi::kMapRead, 0, 16ull * n, mc), "the profile's timestamps");
    if (m.status != abi::MapAsyncStatus::Success) return;
    const auto* t = static_cast<const uint64_t*>(a.BufferGetConstMappedRange(prof_readback_, 0, 16ull * n));
    uint32_t i = 0;
    for (const Command& c : cmds_) {
      if (c.kind != Command::Kind::Dispatch) continue;
      if (i >= n || !t) break;
      g_profile.add(c.label, t[2 * i + 1] > t[2 * i] ? static_cast<double>(t[2 * i + 1] - t[2 * i]) * 1e-6 : 0.0);
      ++i;
    }
    a.BufferUnmap(prof_readback_);
  }

  // ---- running (DeviceVariant) ----
  void submit() override {
    const Api& a = api();
    const bool profile = process_knobs::webgpu_profile() && wd().cx().info.timestamps && profiled_count() > 0;
    if (profile) prepare_profile();
    uint32_t timed = 0;
    abi::CommandEncoderDescriptor ed;
    abi::CommandEncoder enc = a.DeviceCreateCommandEncoder(wd().cx().device, &ed);
    a.CommandEncoderClearBuffer(enc, wd().buffer(flag_buf()), 0, 4);
    wd().encode_timestamp(enc, false);
    abi::ComputePassEncoder pass = nullptr;
    auto end_pass = [&] {
      if (!pass) return;
      a.ComputePassEncoderEnd(pass);
      a.ComputePassEncoderRelease(pass);
      pass = nullptr;
    };
    for (const Command& c : cmds_) {
      switch (c.kind) {
        case Command::Kind::Dispatch: {
          abi::PassTimestampWrites tw;
          const bool timed_pass = profile && timed < profiled_count();
          if (timed_pass) {
            end_pass();
            tw.query_set = prof_queries_;
            tw.beginning_index = 2 * timed, tw.end_index = 2 * timed + 1;
            ++timed;
          }
          if (!pass) {
            abi::ComputePassDescriptor pd;
            if (timed_pass) pd.timestamp_writes = &tw;
            pass = a.CommandEncoderBeginComputePass(enc, &pd);
          }
          a.ComputePassEncoderSetPipeline(pass, c.pipeline->pipeline);
          a.ComputePassEncoderSetBindGroup(pass, 0, c.group, 0, nullptr);
          a.ComputePassEncoderDispatchWorkgroups(pass, c.groups[0], c.groups[1], c.groups[2]);
          ++g_encoded;
          if (timed_pass) end_pass();
          break;
        }
        case Command::Kind::Copy:
          end_pass();
          a.CommandEncoderCopyBufferToBuffer(enc, c.src.buffer, c.src.offset, c.dst.buffer, c.dst.offset, c.bytes);
          break;
        case Command::Kind::Fill:
          end_pass();
          a.CommandEncoderClearBuffer(enc, c.dst.buffer, c.dst.offset, c.bytes);
          break;
      }
    }
    end_pass();
    wd().encode_timestamp(enc, true);
    if (profile) {
      a.CommandEncoderResolveQuerySet(enc, prof_queries_, 0, 2 * timed, prof_resolve_, 0);
      a.CommandEncoderCopyBufferToBuffer(enc, prof_resolve_, 0, prof_readback_, 0, 16ull * timed);
      prof_pending_ = true;
    }
    abi::CommandBufferDescriptor cd;
    abi::CommandBuffer cb = a.CommandEncoderFinish(enc, &cd);
    a.CommandEncoderRelease(enc);
    wd().submit(cb);
    ++g_submits;
  }

  std::string kernel_error_message(int code) const override {
    std::string msg = codegen::kernel_error_message(code, "WebGPU");
    return msg.empty() ? DeviceVariant::kernel_error_message(code) : msg;
  }

  CompileOptions options_;
  ResolvedKnobs knobs_;
  const DeviceInfo& info_;  // what the kernels are made for (device_target.h)
  std::string label_;
  std::vector<Command> cmds_;
  std::map<const plan::Step*, const plan::Step*> producer_of_;  // GEMV -> the step its prologue computes
  std::vector<PendingDispatch> pending_;  // until make_bind_groups
  std::vector<Owned> scratch_;
  abi::Buffer uniforms_ = nullptr;
  abi::QuerySet prof_queries_ = nullptr;
  abi::Buffer prof_resolve_ = nullptr, prof_readback_ = nullptr;
  bool prof_pending_ = false;
};

}  // namespace

std::unique_ptr<Variant> make_webgpu_variant(Graph g, const CompileOptions& options) {
  return std::make_unique<WebGpuVariant>(std::move(g), options);
}

std::string take_webgpu_profile() { return g_profile.take("dispatches"); }

namespace {
// The knobs are read from the environment at each use: setting the variable turns the profile on
// for the runs that follow (rlx run --profile).
[[maybe_unused]] const bool g_profile_registered = register_device_profile(
    Device::WebGpu, {[] { setenv("RLX_WEBGPU_PROFILE", "1", 1); }, [] { return take_webgpu_profile(); }, nullptr});
}  // namespace

WebGpuStats webgpu_stats() {
  return {g_variants.load(), g_submits.load(), g_dispatches.load(), g_encoded.load(), g_packed.load(), g_copy_bytes.load()};
}

}  // namespace rlx::webgpu
