#pragma once
// The shared device API (runtime/device_api.h) over Vulkan: device-local buffers, host-visible
// staging for uploads and readback, and one queue. Copies are recorded into transfer command
// buffers; a variant's recorded schedule is enqueued between them (enqueue); wait() submits
// everything pending in one vkQueueSubmit with one fence and then copies readbacks to the host.
// Every command buffer starts with a full memory barrier, so the work of one submission runs
// in the order it was enqueued.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/vulkan/vk_context.h"
#include "runtime/device_api.h"

namespace rlx::vulkan {

class VulkanDevice final : public DeviceApi {
 public:
  VulkanDevice();
  ~VulkanDevice() override;
  VulkanDevice(const VulkanDevice&) = delete;
  VulkanDevice& operator=(const VulkanDevice&) = delete;

  DeviceBuf allocate(size_t bytes, const std::string& what) override;
  void release(DeviceBuf b) override;
  int error_flag() const override { return flag_value_; }
  void mark_start() override;
  void mark_stop() override;
  double elapsed_ms() override;
  void wait() override;

  VkBuffer buffer(DeviceBuf b) const;
  size_t size(DeviceBuf b) const;
  // Bytes a buffer of `bytes` really has: at least 16, a multiple of 16, so that a kernel may read
  // the last 32-bit word of a value whose size is not a multiple of 4 (DequantMatMul's weights).
  static size_t allocated_bytes(size_t bytes) { return (std::max<size_t>(bytes, 16) + 15) / 16 * 16; }
  Context& cx() const { return cx_; }
  // A new primary command buffer of the device's pool, begun for re-submission and opened with a
  // full barrier (a variant's schedule; the pool frees it with the device).
  VkCommandBuffer begin_recording();
  // Enqueues a recorded command buffer after everything enqueued so far.
  void enqueue(VkCommandBuffer cb);
  // Records the run's start / stop timestamps into `cb` (a variant's recorded schedule), so
  // elapsed_ms() is the device time of that work alone (as CUDA events around a graph launch);
  // mark_start / mark_stop then only delimit the run.
  void record_start_timestamp(VkCommandBuffer cb);
  void record_stop_timestamp(VkCommandBuffer cb);

 protected:
  void do_upload(std::span<const HostToDevice> copies, bool staged) override;
  void do_download(std::span<const DeviceToHost> copies) override;
  void do_copy(std::span<const DeviceToDevice> copies) override;
  void do_read_error_flag(DeviceBuf flag) override;

 private:
  struct Buffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    size_t size = 0;
  };
  struct HostChunk {
    Buffer buf;
    uint8_t* map = nullptr;
    size_t used = 0;
  };
  struct Readback {
    void* dst;
    size_t chunk, offset, bytes;
  };
  Buffer make_buffer(size_t bytes, bool host, const std::string& what);
  void free_buffer(Buffer& b);
  // Room for `bytes` in a host chunk of `chunks`: (chunk index, offset).
  std::pair<size_t, size_t> stage(std::vector<HostChunk>& chunks, size_t bytes);
  VkCommandBuffer allocate_cb();  // a primary command buffer of the pool
  VkCommandBuffer transfer_cb();  // the open transfer command buffer (begun on demand)
  void close_transfer();
  void reset_after_wait();

  Context& cx_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  std::unordered_map<uint32_t, Buffer> buffers_;
  uint32_t next_id_ = 1;
  std::vector<HostChunk> up_, down_;
  std::vector<Readback> readbacks_;
  std::vector<VkCommandBuffer> pending_;      // enqueued, in order
  std::vector<VkCommandBuffer> transfer_free_, transfer_used_;
  VkCommandBuffer open_ = VK_NULL_HANDLE;     // the transfer command buffer being recorded
  int flag_value_ = 0;
  bool timed_ = false;
  bool timed_inside_ = false;  // the enqueued work writes the timestamps itself
};

// Records a full memory barrier (all earlier commands' writes visible to all later commands and
// to the host) into `cb`.
void full_barrier(VkCommandBuffer cb);
// Records a barrier between the compute and transfer commands of one schedule: earlier shader
// and transfer writes visible to later shader and transfer reads and writes (no host stage).
void work_barrier(VkCommandBuffer cb);

}  // namespace rlx::vulkan
