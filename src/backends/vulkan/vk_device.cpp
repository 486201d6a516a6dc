#include "backends/vulkan/vk_device.h"

#include <algorithm>
#include <cstring>

#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr size_t kMinChunk = size_t(4) << 20;    // host staging chunks: at least 4 MiB
constexpr size_t kKeepChunk = size_t(64) << 20;  // larger ones are freed after each wait
// Uploads stage at most this much host memory between two waits: a larger upload (a model's
// weights) goes in pieces, each submitted and waited for before the next is staged.
constexpr size_t kStageLimit = size_t(256) << 20;
constexpr uint64_t kWaitNs = 600ull * 1000 * 1000 * 1000;  // a submission not done in 10 min is an error

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

void full_barrier(VkCommandBuffer cb) {
  auto mb = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  vk().vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                            VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                            nullptr);
}

void work_barrier(VkCommandBuffer cb) {
  auto mb = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vk().vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

VulkanDevice::VulkanDevice() : cx_(context()) {
  auto pi = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = cx_.queue_family;
  check(vk().vkCreateCommandPool(cx_.device, &pi, nullptr, &pool_), "vkCreateCommandPool");
  auto fi = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  check(vk().vkCreateFence(cx_.device, &fi, nullptr, &fence_), "vkCreateFence");
  if (cx_.info.timestamp_ns > 0) {
    auto qi = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = 2;
    check(vk().vkCreateQueryPool(cx_.device, &qi, nullptr, &queries_), "vkCreateQueryPool");
  }
}

VulkanDevice::~VulkanDevice() {
  if (!pending_.empty() || open_) {
    try {
      wait();
    } catch (...) {
      vk().vkDeviceWaitIdle(cx_.device);
    }
  }
  for (auto& [id, b] : buffers_) free_buffer(b);
  for (auto* chunks : {&up_, &down_})
    for (auto& c : *chunks) free_buffer(c.buf);
  if (queries_) vk().vkDestroyQueryPool(cx_.device, queries_, nullptr);
  vk().vkDestroyFence(cx_.device, fence_, nullptr);
  vk().vkDestroyCommandPool(cx_.device, pool_, nullptr);  // frees its command buffers
}

VulkanDevice::Buffer VulkanDevice::make_buffer(size_t bytes, bool host, const std::string& what) {
  Buffer b;
  b.size = bytes;
  const size_t alloc = allocated_bytes(bytes);
  if (cx_.info.max_allocation && alloc > cx_.info.max_allocation)
    throw Error("Vulkan: " + what + " needs one buffer of " + std::to_string(bytes) + " bytes (" + mib(bytes) + "), above " +
                cx_.info.name + "'s maxMemoryAllocationSize of " + std::to_string(cx_.info.max_allocation) + " bytes");
  auto bi = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bi.size = alloc;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vk().vkCreateBuffer(cx_.device, &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req{};
  vk().vkGetBufferMemoryRequirements(cx_.device, b.buffer, &req);
  uint32_t type = 0;
  try {
    type = host ? cx_.memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                  VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                : cx_.memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  } catch (...) {
    vk().vkDestroyBuffer(cx_.device, b.buffer, nullptr);
    throw;
  }
  const uint64_t avail = cx_.heap_available(type);
  if (req.size > avail) {
    vk().vkDestroyBuffer(cx_.device, b.buffer, nullptr);
    throw Error("Vulkan: out of " + std::string(host ? "host-visible" : "device") + " memory for " + what + ": " +
                std::to_string(bytes) + " bytes (" + mib(bytes) + ") requested, " + std::to_string(avail) + " bytes (" +
                mib(avail) + ") left in the heap's budget on " + cx_.info.name);
  }
  auto ai = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  const VkResult r = vk().vkAllocateMemory(cx_.device, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vk().vkDestroyBuffer(cx_.device, b.buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      throw Error("Vulkan: out of memory allocating " + what + ": " + std::to_string(bytes) + " bytes (" + mib(bytes) +
                  ") on " + cx_.info.name + " (" + result_name(r) + ")");
    check(r, "vkAllocateMemory");
  }
  check(vk().vkBindBufferMemory(cx_.device, b.buffer, b.memory, 0), "vkBindBufferMemory");
  return b;
}

void VulkanDevice::free_buffer(Buffer& b) {
  if (b.buffer) vk().vkDestroyBuffer(cx_.device, b.buffer, nullptr);
  if (b.memory) vk().vkFreeMemory(cx_.device, b.memory, nullptr);
  b = Buffer{};
}

DeviceBuf VulkanDevice::allocate(size_t bytes, const std::string& what) {
  Buffer b = make_buffer(bytes, false, what);
  const uint32_t id = next_id_++;
  buffers_.emplace(id, b);
  return DeviceBuf{id};
}

void VulkanDevice::release(DeviceBuf b) {
  auto it = buffers_.find(b.id);
  if (it == buffers_.end()) return;
  free_buffer(it->second);
  buffers_.erase(it);
}

VkBuffer VulkanDevice::buffer(DeviceBuf b) const {
  auto it = buffers_.find(b.id);
  if (it == buffers_.end()) throw Error("Vulkan: internal: unknown device buffer " + std::to_string(b.id));
  return it->second.buffer;
}

size_t VulkanDevice::size(DeviceBuf b) const {
  auto it = buffers_.find(b.id);
  return it == buffers_.end() ? 0 : it->second.size;
}

std::pair<size_t, size_t> VulkanDevice::stage(std::vector<HostChunk>& chunks, size_t bytes) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    const size_t off = (chunks[i].used + 15) & ~size_t(15);
    if (off + bytes <= chunks[i].buf.size) {
      chunks[i].used = off + bytes;
      return {i, off};
    }
  }
  HostChunk c;
  c.buf = make_buffer(std::max(bytes, kMinChunk), true, "a host staging buffer");
  void* map = nullptr;
  const VkResult r = vk().vkMapMemory(cx_.device, c.buf.memory, 0, VK_WHOLE_SIZE, 0, &map);
  if (r != VK_SUCCESS) {
    free_buffer(c.buf);
    check(r, "vkMapMemory");
  }
  c.map = static_cast<uint8_t*>(map);
  c.used = bytes;
  chunks.push_back(c);
  return {chunks.size() - 1, 0};
}

VkCommandBuffer VulkanDevice::allocate_cb() {
  auto ai = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  check(vk().vkAllocateCommandBuffers(cx_.device, &ai, &cb), "vkAllocateCommandBuffers");
  return cb;
}

VkCommandBuffer VulkanDevice::begin_recording() {
  VkCommandBuffer cb = allocate_cb();
  auto bi = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  check(vk().vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
  full_barrier(cb);
  return cb;
}

VkCommandBuffer VulkanDevice::transfer_cb() {
  if (open_) return open_;
  if (transfer_free_.empty()) transfer_free_.push_back(allocate_cb());
  open_ = transfer_free_.back();
  transfer_free_.pop_back();
  auto bi = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vk().vkBeginCommandBuffer(open_, &bi), "vkBeginCommandBuffer");
  full_barrier(open_);
  return open_;
}

void VulkanDevice::close_transfer() {
  if (!open_) return;
  full_barrier(open_);
  check(vk().vkEndCommandBuffer(open_), "vkEndCommandBuffer");
  pending_.push_back(open_);
  transfer_used_.push_back(open_);
  open_ = VK_NULL_HANDLE;
}

void VulkanDevice::enqueue(VkCommandBuffer cb) {
  close_transfer();
  pending_.push_back(cb);
}

void VulkanDevice::do_upload(std::span<const HostToDevice> copies, bool staged) {
  (void)staged;  // both are copied into host staging now (device-local memory is not mapped)
  for (const HostToDevice& c : copies) {
    for (size_t done = 0; done < c.bytes;) {
      size_t staged_now = 0;
      for (const HostChunk& h : up_) staged_now += h.used;
      if (staged_now >= kStageLimit) wait();  // everything enqueued so far runs; staging is free again
      const size_t piece = std::min(c.bytes - done, kStageLimit);
      const auto [chunk, off] = stage(up_, piece);
      std::memcpy(up_[chunk].map + off, static_cast<const uint8_t*>(c.src) + done, piece);
      VkBufferCopy region{off, c.offset + done, piece};
      vk().vkCmdCopyBuffer(transfer_cb(), up_[chunk].buf.buffer, buffer(c.dst), 1, &region);
      done += piece;
    }
  }
}

void VulkanDevice::do_download(std::span<const DeviceToHost> copies) {
  for (const DeviceToHost& c : copies) {
    if (c.bytes == 0) continue;
    const auto [chunk, off] = stage(down_, c.bytes);
    VkBufferCopy region{c.offset, off, c.bytes};
    vk().vkCmdCopyBuffer(transfer_cb(), buffer(c.src), down_[chunk].buf.buffer, 1, &region);
    readbacks_.push_back({c.dst, chunk, off, c.bytes});
  }
}

void VulkanDevice::do_copy(std::span<const DeviceToDevice> copies) {
  for (const DeviceToDevice& c : copies) {
    if (c.bytes == 0) continue;
    VkBufferCopy region{c.src_offset, c.dst_offset, c.bytes};
    vk().vkCmdCopyBuffer(transfer_cb(), buffer(c.src), buffer(c.dst), 1, &region);
  }
}

void VulkanDevice::do_read_error_flag(DeviceBuf flag) {
  flag_value_ = 0;
  const auto [chunk, off] = stage(down_, sizeof(int));
  VkBufferCopy region{0, off, sizeof(int)};
  vk().vkCmdCopyBuffer(transfer_cb(), buffer(flag), down_[chunk].buf.buffer, 1, &region);
  readbacks_.push_back({&flag_value_, chunk, off, sizeof(int)});
}

void VulkanDevice::record_start_timestamp(VkCommandBuffer cb) {
  if (!queries_) return;
  vk().vkCmdResetQueryPool(cb, queries_, 0, 2);
  vk().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
  timed_inside_ = true;
}

void VulkanDevice::record_stop_timestamp(VkCommandBuffer cb) {
  if (!queries_) return;
  vk().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 1);
}

void VulkanDevice::mark_start() {
  if (!queries_) return;
  timed_ = false;
  if (timed_inside_) return;
  VkCommandBuffer cb = transfer_cb();
  vk().vkCmdResetQueryPool(cb, queries_, 0, 2);
  vk().vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, queries_, 0);
}

void VulkanDevice::mark_stop() {
  if (!queries_) return;
  timed_ = true;
  if (timed_inside_) return;
  vk().vkCmdWriteTimestamp(transfer_cb(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, queries_, 1);
}

double VulkanDevice::elapsed_ms() {
  if (!queries_ || !timed_) return 0;
  uint64_t t[2] = {0, 0};
  const VkResult r = vk().vkGetQueryPoolResults(cx_.device, queries_, 0, 2, sizeof t, t, sizeof(uint64_t),
                                                VK_QUERY_RESULT_64_BIT);
  if (r != VK_SUCCESS) return 0;
  return t[1] > t[0] ? static_cast<double>(t[1] - t[0]) * cx_.info.timestamp_ns * 1e-6 : 0.0;
}

void VulkanDevice::reset_after_wait() {
  for (VkCommandBuffer cb : transfer_used_) {
    vk().vkResetCommandBuffer(cb, 0);
    transfer_free_.push_back(cb);
  }
  transfer_used_.clear();
  pending_.clear();
  readbacks_.clear();
  for (auto* chunks : {&up_, &down_}) {
    std::vector<HostChunk> keep;
    for (HostChunk& c : *chunks) {
      if (c.buf.size > kKeepChunk) {
        free_buffer(c.buf);
        continue;
      }
      c.used = 0;
      keep.push_back(c);
    }
    *chunks = std::move(keep);
  }
}

void VulkanDevice::wait() {
  close_transfer();
  if (pending_.empty()) return;
  auto si = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  si.commandBufferCount = static_cast<uint32_t>(pending_.size());
  si.pCommandBuffers = pending_.data();
  VkResult r;
  {
    std::lock_guard<std::mutex> lock(cx_.queue_mu);
    r = vk().vkQueueSubmit(cx_.queue, 1, &si, fence_);
  }
  if (r != VK_SUCCESS) {
    reset_after_wait();
    check(r, "vkQueueSubmit");
  }
  r = vk().vkWaitForFences(cx_.device, 1, &fence_, VK_TRUE, kWaitNs);
  if (r == VK_TIMEOUT) {
    vk().vkDeviceWaitIdle(cx_.device);
    vk().vkResetFences(cx_.device, 1, &fence_);
    reset_after_wait();
    throw Error("Vulkan: the submitted work did not finish within 600 s on " + cx_.info.name);
  }
  vk().vkResetFences(cx_.device, 1, &fence_);
  if (r != VK_SUCCESS) {
    reset_after_wait();
    check(r, "vkWaitForFences");
  }
  for (const Readback& rb : readbacks_) std::memcpy(rb.dst, down_[rb.chunk].map + rb.offset, rb.bytes);
  reset_after_wait();
}

}  // namespace rlx::vulkan
