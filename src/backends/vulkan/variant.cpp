#include "backends/vulkan/variant.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "backends/vulkan/dispatch_dump.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/pipelines.h"
#include "backends/vulkan/vk_device.h"
#include "codegen/language.h"
#include "plan/absorb_plans.h"
#include "rlx/error.h"
#include "runtime/device_profile.h"
#include "runtime/device_variant.h"

namespace rlx::vulkan {
namespace {

std::atomic<uint64_t> g_recordings{0}, g_submits{0}, g_dispatches{0}, g_barriers{0}, g_copy_bytes{0};
StepProfile g_profile;  // op kind -> device time of its dispatches

// One recorded command of the schedule.
struct Command {
  enum class Kind { Dispatch, Copy, Fill } kind = Kind::Dispatch;
  const Pipeline* pipeline = nullptr;
  std::vector<Operand> bindings;  // Dispatch; Copy: {dst, src}; Fill: {dst}
  std::vector<uint32_t> push;
  uint32_t groups[3] = {1, 1, 1};
  uint64_t bytes = 0;             // Copy, Fill
  uint32_t word = 0;              // Fill
  std::string label;
  VkDescriptorSet set = VK_NULL_HANDLE;
};

// A CacheWrite over a dying cache Input writes its new rows in place (PlanOptions::write_inputs):
// every input is uploaded (or carried) into the variant's own leaf buffer, so no caller memory is
// written, and a carried cache that is already that buffer is not copied (DeviceVariant::carry_in).
plan::PlanOptions plan_options() {
  plan::PlanOptions p;
  p.write_inputs = true;
  return p;
}

struct Range {
  VkBuffer buffer;
  uint64_t lo, hi;
  bool overlaps(const Range& o) const { return buffer == o.buffer && lo < o.hi && o.lo < hi; }
};

class VulkanVariant final : public DeviceVariant, private LowerContext {
 public:
  VulkanVariant(Graph g, const CompileOptions& options)
      : DeviceVariant(std::move(g), std::make_unique<VulkanDevice>(), plan_options()), options_(options),
        knobs_(resolve_knobs(options)) {
    // RmsNorms and SwiGLUs a vector GEMV computes in its prologue are not lowered on their own.
    std::set<const plan::Step*> absorbed;
    if (knobs_.vulkan_gemv_prologue())
      for (const auto& [consumer, producer] : plan::plan_gemv_prologues(schedule(), gemv_prologue_rows)) {
        const plan::Step& pr = schedule().steps[producer];
        producer_of_[&schedule().steps[consumer]] = &pr;
        absorbed.insert(&pr);
      }
    // The k and v cache writes of one position vector in one dispatch, rotating rows that are
    // a RoPE's result as they are written; those ropes are not lowered on their own.
    if (knobs_.vulkan_cache_write_fusion()) {
      const std::map<size_t, size_t> pairs = plan::plan_cache_write_pairs(schedule());
      std::map<size_t, size_t> ropes = plan::plan_cache_write_ropes(schedule(), pairs);
      std::erase_if(ropes, [&](const auto& wr) { return absorbed.count(&schedule().steps[wr.second]) > 0; });
      for (const auto& [write, rope] : ropes) {
        const plan::Step& r = schedule().steps[rope];
        cache_writes_[&schedule().steps[write]].rope = &r;
        absorbed.insert(&r);
      }
      for (const auto& [second, first] : pairs) {
        const plan::Step& a = schedule().steps[first];
        CacheWriteFusion& f = cache_writes_[&schedule().steps[second]];
        f.first = &a;
        f.first_rope = cache_writes_[&a].rope;
        absorbed.insert(&a);
      }
      // ... and the q RoPE paired with an absorbed one.
      for (const auto& [launch, rope] : plan::plan_cache_write_q_ropes(schedule(), pairs, ropes)) {
        const plan::Step& r = schedule().steps[rope];
        if (absorbed.count(&r)) continue;
        cache_writes_[&schedule().steps[launch]].q_rope = &r;
        absorbed.insert(&r);
      }
    }
    // Consecutive q / k RoPEs of one rotation in one dispatch: the first is lowered with the second.
    if (knobs_.vulkan_rope_pairs())
      for (const auto& [second, first] : plan::plan_rope_pairs(schedule())) {
        const plan::Step &a = schedule().steps[first], &b = schedule().steps[second];
        if (absorbed.count(&a) || absorbed.count(&b) || producer_of_.count(&b)) continue;
        producer_of_[&b] = &a;
        absorbed.insert(&a);
      }
    // q / k / v slices of a fused projection that attention reads in place are not copied out.
    for (const auto& [consumer, slices] : plan::plan_attention_narrows(schedule()))
      for (const plan::AttentionNarrow& an : slices) {
        const plan::Step& n = schedule().steps[an.step];
        if (absorbed.count(&n)) continue;
        narrows_[&schedule().steps[consumer]].push_back(an);
        absorbed.insert(&n);
      }
    // A KV cache and its new rows joined for a decode attention: read as two parts, not copied.
    for (const auto& [consumer, cats] : plan::plan_attention_concats(schedule(), decode_attention_limits()))
      for (size_t c : cats) {
        const plan::Step& n = schedule().steps[c];
        if (absorbed.count(&n)) continue;
        concats_[&schedule().steps[consumer]].push_back(&n);
        absorbed.insert(&n);
      }
    for (const plan::Step& st : schedule().steps) {
      if (absorbed.count(&st)) continue;
      label_ = op_name(st.op);
      lower_step(*this, st);
    }
    dev().wait();  // the tables' uploads
    tables_host_.clear();
    build_descriptors();
    record();
    save_pipeline_cache();
  }

  ~VulkanVariant() override {
    if (pool_) vk().vkDestroyDescriptorPool(vd().cx().device, pool_, nullptr);
    // The command buffers go with the device's command pool.
  }

 private:
  VulkanDevice& vd() const { return static_cast<VulkanDevice&>(dev()); }

  // ---- LowerContext ----
  const CompileOptions& options() const override { return options_; }
  const ResolvedKnobs& knobs() const override { return knobs_; }
  const DeviceInfo& info() const override { return vd().cx().info; }

  Operand window(DeviceBuf buf, uint64_t offset, uint64_t bytes, bool write, const std::string& what) {
    const DeviceInfo& di = info();
    Operand o;
    o.buffer = vd().buffer(buf);
    o.offset = offset / di.storage_alignment * di.storage_alignment;
    o.skip = offset - o.offset;
    o.bytes = bytes;
    const uint64_t alloc = VulkanDevice::allocated_bytes(vd().size(buf));
    const uint64_t cap = alloc > o.offset ? alloc - o.offset : 16;
    // Whole 32-bit words (the buffer's allocation has them): a kernel reading an operand as words
    // reaches its last, partial word.
    o.range = std::min<uint64_t>((std::max<uint64_t>(o.skip + bytes, 4) + 3) / 4 * 4, cap);
    o.write = write;
    if (o.range > di.max_storage_range)
      throw Error("Vulkan: " + what + " binds " + std::to_string(o.range) + " bytes, above " + di.name +
                  "'s maxStorageBufferRange of " + std::to_string(di.max_storage_range) +
                  " bytes; operands this large are not split over bindings yet: use a smaller batch or the CUDA/CPU "
                  "backend");
    return o;
  }
  Operand ref(const plan::TensorRef& r, bool write) {
    const auto [buf, offset] = where(r);
    return window(buf, offset, static_cast<uint64_t>(r.numel()) * dtype_size(r.storage()), write,
                  label_ + " operand " + dtype_name(r.dtype));
  }
  Operand in(const plan::TensorRef& r) override { return ref(r, false); }
  Operand out(const plan::TensorRef& r) override { return ref(r, true); }
  Operand scratch(size_t bytes, const std::string& what) override {
    scratch_.push_back(dev().allocate(bytes, what));
    return window(scratch_.back(), 0, bytes, true, what);
  }
  Operand table(const std::vector<uint32_t>& words, const std::string& what) override {
    const size_t bytes = std::max<size_t>(words.size(), 1) * 4;
    scratch_.push_back(dev().allocate(bytes, what));
    if (!words.empty()) {
      tables_host_.push_back(words);
      const HostToDevice c{scratch_.back(), 0, tables_host_.back().data(), words.size() * 4};
      dev().upload({&c, 1});
    }
    return window(scratch_.back(), 0, bytes, false, what);
  }
  const plan::Step* absorbed_producer(const plan::Step& consumer) const override {
    const auto it = producer_of_.find(&consumer);
    return it == producer_of_.end() ? nullptr : it->second;
  }
  CacheWriteFusion cache_write_fusion(const plan::Step& write) const override {
    const auto it = cache_writes_.find(&write);
    return it == cache_writes_.end() ? CacheWriteFusion{} : it->second;
  }
  std::vector<plan::AttentionNarrow> attention_narrows(const plan::Step& attention) const override {
    const auto it = narrows_.find(&attention);
    return it == narrows_.end() ? std::vector<plan::AttentionNarrow>{} : it->second;
  }
  std::vector<const plan::Step*> attention_concats(const plan::Step& attention) const override {
    const auto it = concats_.find(&attention);
    return it == concats_.end() ? std::vector<const plan::Step*>{} : it->second;
  }
  Operand error_flag() override { return window(flag_buf(), 0, sizeof(int), true, "the error flag"); }

  void dispatch(const Kernel& k, const std::vector<Operand>& bindings, const std::vector<uint32_t>& push, uint32_t gx,
                uint32_t gy, uint32_t gz) override {
    const DeviceInfo& di = info();
    if (gx == 0 || gy == 0 || gz == 0) return;
    if (gx > di.max_groups[0] || gy > di.max_groups[1] || gz > di.max_groups[2])
      throw Error("Vulkan: internal: kernel '" + k.name + "' dispatches " + std::to_string(gx) + "x" + std::to_string(gy) +
                  "x" + std::to_string(gz) + " workgroups, above the device's limits");
    Command c;
    c.kind = Command::Kind::Dispatch;
    c.pipeline = &pipeline_for(k.name, k.source, static_cast<uint32_t>(bindings.size()), static_cast<uint32_t>(push.size()));
    c.bindings = bindings;
    c.push = push;
    c.groups[0] = gx, c.groups[1] = gy, c.groups[2] = gz;
    c.label = label_;
    if (!dump_dir_.empty()) dump_dispatch(dump_dir_, k, bindings, push, c.groups);
    cmds_.push_back(std::move(c));
  }
  void copy(const Operand& dst, const Operand& src, uint64_t bytes) override {
    if (bytes == 0) return;
    Command c;
    c.kind = Command::Kind::Copy;
    Operand d = dst;
    d.write = true;
    c.bindings = {d, src};
    c.bytes = bytes;
    c.label = label_;
    cmds_.push_back(std::move(c));
  }
  void fill(const Operand& dst, uint64_t bytes, uint32_t word) override {
    if (bytes == 0) return;
    if (bytes % 4 || (dst.offset + dst.skip) % 4)
      throw Error("Vulkan: internal: a fill of " + std::to_string(bytes) + " bytes is not 4-byte aligned");
    Command c;
    c.kind = Command::Kind::Fill;
    Operand d = dst;
    d.write = true;
    c.bindings = {d};
    c.bytes = bytes;
    c.word = word;
    c.label = label_;
    cmds_.push_back(std::move(c));
  }

  // ---- recording ----
  void build_descriptors() {
    uint32_t sets = 0, descriptors = 0;
    for (const Command& c : cmds_)
      if (c.kind == Command::Kind::Dispatch) ++sets, descriptors += static_cast<uint32_t>(c.bindings.size());
    if (sets == 0) return;
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, std::max<uint32_t>(descriptors, 1)};
    auto pi = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
    pi.maxSets = sets;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    VkDevice d = vd().cx().device;
    check(vk().vkCreateDescriptorPool(d, &pi, nullptr, &pool_), "vkCreateDescriptorPool");
    std::vector<VkDescriptorBufferInfo> infos;
    std::vector<VkWriteDescriptorSet> writes;
    infos.reserve(descriptors);
    for (Command& c : cmds_) {
      if (c.kind != Command::Kind::Dispatch) continue;
      auto ai = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
      ai.descriptorPool = pool_;
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &c.pipeline->set_layout;
      check(vk().vkAllocateDescriptorSets(d, &ai, &c.set), "vkAllocateDescriptorSets");
      for (size_t i = 0; i < c.bindings.size(); ++i) {
        const Operand& o = c.bindings[i];
        infos.push_back({o.buffer, o.offset, o.range});
        auto w = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
        w.dstSet = c.set;
        w.dstBinding = static_cast<uint32_t>(i);
        w.descriptorCount = 1;
        w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w.pBufferInfo = &infos.back();
        writes.push_back(w);
      }
    }
    vk().vkUpdateDescriptorSets(d, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  }

  static Range range_of(const Operand& o) { return {o.buffer, o.offset + o.skip, o.offset + o.skip + std::max<uint64_t>(o.bytes, 1)}; }


  void record_command(VkCommandBuffer cb, const Command& c) {
    switch (c.kind) {
      case Command::Kind::Dispatch:
        vk().vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->pipeline);
        vk().vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, c.pipeline->layout, 0, 1, &c.set, 0, nullptr);
        if (!c.push.empty())
          vk().vkCmdPushConstants(cb, c.pipeline->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                  static_cast<uint32_t>(c.push.size() * 4), c.push.data());
        vk().vkCmdDispatch(cb, c.groups[0], c.groups[1], c.groups[2]);
        ++g_dispatches;
        break;
      case Command::Kind::Copy: {
        const Operand &d = c.bindings[0], &s = c.bindings[1];
        VkBufferCopy region{s.offset + s.skip, d.offset + d.skip, c.bytes};
        vk().vkCmdCopyBuffer(cb, s.buffer, d.buffer, 1, &region);
        g_copy_bytes += c.bytes;
        break;
      }
      case Command::Kind::Fill: {
        const Operand& d = c.bindings[0];
        vk().vkCmdFillBuffer(cb, d.buffer, d.offset + d.skip, c.bytes, c.word);
        break;
      }
    }
  }

  // The whole schedule into one command buffer: the error flag zeroed, then every command with
  // a barrier only before one that touches bytes written (or writes bytes read) since the last.
  void record() {
    cb_ = vd().begin_recording();
    vd().record_start_timestamp(cb_);
    const Operand flag = error_flag();
    vk().vkCmdFillBuffer(cb_, flag.buffer, flag.offset, sizeof(int), 0);
    work_barrier(cb_);
    std::vector<Range> written, read;
    for (const Command& c : cmds_) {
      std::vector<Range> w, r;
      for (const Operand& o : c.bindings) {
        if (o.buffer == flag.buffer) continue;  // atomicMax on the flag commutes: no ordering needed
        (o.write ? w : r).push_back(range_of(o));
      }
      bool hazard = false;
      for (const Range& x : r)
        for (const Range& y : written) hazard = hazard || x.overlaps(y);
      for (const Range& x : w) {
        for (const Range& y : written) hazard = hazard || x.overlaps(y);
        for (const Range& y : read) hazard = hazard || x.overlaps(y);
      }
      if (hazard) {
        work_barrier(cb_);
        ++g_barriers;
        written.clear(), read.clear();
      }
      written.insert(written.end(), w.begin(), w.end());
      read.insert(read.end(), r.begin(), r.end());
      record_command(cb_, c);
    }
    vd().record_stop_timestamp(cb_);
    full_barrier(cb_);
    check(vk().vkEndCommandBuffer(cb_), "vkEndCommandBuffer");
    ++g_recordings;
  }

  // Profiling: each command in its own command buffer between timestamps (no overlap).
  void submit_profiled() {
    VkDevice d = vd().cx().device;
    if (!profile_pool_) {
      auto qi = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = static_cast<uint32_t>(cmds_.size() + 1);
      check(vk().vkCreateQueryPool(d, &qi, nullptr, &profile_pool_), "vkCreateQueryPool");
      profile_cb_ = vd().begin_recording();
      vk().vkCmdResetQueryPool(profile_cb_, profile_pool_, 0, qi.queryCount);
      const Operand flag = error_flag();
      vk().vkCmdFillBuffer(profile_cb_, flag.buffer, flag.offset, sizeof(int), 0);
      full_barrier(profile_cb_);
      vk().vkCmdWriteTimestamp(profile_cb_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, profile_pool_, 0);
      for (size_t i = 0; i < cmds_.size(); ++i) {
        record_command(profile_cb_, cmds_[i]);
        work_barrier(profile_cb_);
        vk().vkCmdWriteTimestamp(profile_cb_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, profile_pool_,
                                 static_cast<uint32_t>(i + 1));
      }
      check(vk().vkEndCommandBuffer(profile_cb_), "vkEndCommandBuffer");
    }
    vd().enqueue(profile_cb_);
    profile_pending_ = true;
  }

  void collect_profile() {
    if (!profile_pending_) return;
    profile_pending_ = false;
    std::vector<uint64_t> t(cmds_.size() + 1);
    if (vk().vkGetQueryPoolResults(vd().cx().device, profile_pool_, 0, static_cast<uint32_t>(t.size()),
                                   t.size() * sizeof(uint64_t), t.data(), sizeof(uint64_t),
                                   VK_QUERY_RESULT_64_BIT) != VK_SUCCESS)
      return;
    for (size_t i = 0; i < cmds_.size(); ++i)
      g_profile.add(cmds_[i].label,
                    t[i + 1] > t[i] ? static_cast<double>(t[i + 1] - t[i]) * info().timestamp_ns * 1e-6 : 0.0);
  }

  // ---- running (DeviceVariant) ----
  void submit() override {
    ++g_submits;
    if (process_knobs::vulkan_profile() && info().timestamp_ns > 0 && !cmds_.empty()) return submit_profiled();
    vd().enqueue(cb_);
  }

 public:
  std::vector<Tensor> run(const RunArgs& args) override {
    std::vector<Tensor> out = DeviceVariant::run(args);
    collect_profile();
    return out;
  }

 private:
  std::string kernel_error_message(int code) const override {
    std::string msg = codegen::kernel_error_message(code, "Vulkan");
    return msg.empty() ? DeviceVariant::kernel_error_message(code) : msg;
  }

  CompileOptions options_;
  ResolvedKnobs knobs_;
  std::string label_;
  const std::string dump_dir_ = process_knobs::vulkan_dump();  // RLX_VULKAN_DUMP, read once per compile
  std::map<const plan::Step*, const plan::Step*> producer_of_;  // consumer -> the producer it runs (absorbed_producer)
  std::map<const plan::Step*, CacheWriteFusion> cache_writes_;  // cache write -> its pair and ropes
  std::map<const plan::Step*, std::vector<plan::AttentionNarrow>> narrows_;  // attention -> slices read in place
  std::map<const plan::Step*, std::vector<const plan::Step*>> concats_;  // attention -> concats read in parts
  std::vector<Command> cmds_;
  std::vector<DeviceBuf> scratch_;
  std::vector<std::vector<uint32_t>> tables_host_;  // until the tables are uploaded
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  VkQueryPool profile_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer profile_cb_ = VK_NULL_HANDLE;
  bool profile_pending_ = false;
};

}  // namespace

std::unique_ptr<Variant> make_vulkan_variant(Graph g, const CompileOptions& options) {
  return std::make_unique<VulkanVariant>(std::move(g), options);
}

VulkanStats vulkan_stats() {
  return {g_recordings.load(), g_submits.load(), g_dispatches.load(), g_barriers.load(), g_copy_bytes.load()};
}

std::string take_vulkan_profile() { return g_profile.take("dispatches"); }

namespace {
// The knobs are read from the environment at each use (runtime/knobs.h): setting the variable
// turns the profile on for the variants compiled afterwards (rlx run --profile).
[[maybe_unused]] const bool g_profile_registered = register_device_profile(
    Device::Vulkan, {[] { setenv("RLX_VULKAN_PROFILE", "1", 1); }, [] { return take_vulkan_profile(); }, nullptr});
}  // namespace

}  // namespace rlx::vulkan
