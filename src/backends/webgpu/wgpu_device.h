#pragma once
// The device API of the shared device runtime (runtime/device_api.h) over the process's WebGPU
// device (wgpu_context.h). Buffers are storage buffers that can be copied from and to; uploads go
// through wgpuQueueWriteBuffer (Dawn copies the bytes at the call, so every upload is staged);
// downloads are copies into mappable read-back buffers, mapped at wait(). Everything is ordered
// on the device's one queue. Copies within one buffer (which WebGPU forbids as buffer copies) run
// as a small copy kernel (the runtime's device copies; a variant's recorded copies are its own).
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/webgpu/wgpu_context.h"
#include "runtime/device_api.h"

namespace rlx::webgpu {

class WebGpuDevice final : public DeviceApi {
 public:
  WebGpuDevice();
  ~WebGpuDevice() override;

  DeviceBuf allocate(size_t bytes, const std::string& what) override;
  void release(DeviceBuf b) override;
  int error_flag() const override { return flag_value_; }
  void mark_start() override;
  void mark_stop() override;
  double elapsed_ms() override { return elapsed_ms_; }
  void wait() override;

  abi::Buffer buffer(DeviceBuf b) const;
  uint64_t size(DeviceBuf b) const;  // bytes as allocated (a multiple of 4, at least 4)
  Context& cx() const { return cx_; }

  // Submits a finished command buffer on the queue (the variant's recorded work).
  void submit(abi::CommandBuffer cb);
  // When mark_start() asked for timing and the device has timestamp queries: an empty compute
  // pass writing the start (end = false) or end timestamp; the end one also resolves both into a
  // read-back that wait() turns into elapsed_ms(). Otherwise nothing (elapsed_ms() is then the
  // host time from mark_start() to the end of wait()).
  void encode_timestamp(abi::CommandEncoder enc, bool end);

 protected:
  void do_upload(std::span<const HostToDevice> copies, bool staged) override;
  void do_download(std::span<const DeviceToHost> copies) override;
  void do_copy(std::span<const DeviceToDevice> copies) override;
  void do_read_error_flag(DeviceBuf flag) override;

 private:
  struct Readback {
    abi::Buffer staging = nullptr;
    uint64_t capacity = 0;  // of `staging`
    uint64_t bytes = 0;
    std::vector<DeviceToHost> copies;  // dst offsets: packed in `staging` in order
    int* flag = nullptr;               // an error-flag readback: the int lands here
    bool timestamps = false;           // two uint64 timestamps (ns)
  };
  abi::CommandEncoder encoder() const;
  void finish_and_submit(abi::CommandEncoder enc);
  std::pair<abi::Buffer, uint64_t> staging_buffer(uint64_t bytes);  // a read-back buffer and its size
  // Encodes a copy of `bytes` (a multiple of 4) between two regions of any buffers (a kernel
  // when both are in one buffer).
  void encode_copy(abi::CommandEncoder enc, abi::Buffer dst, uint64_t dst_off, abi::Buffer src, uint64_t src_off,
                   uint64_t bytes);
  void clear_pending();

  Context& cx_;
  std::unordered_map<uint32_t, std::pair<abi::Buffer, uint64_t>> bufs_;
  uint32_t next_id_ = 1;
  std::vector<Readback> pending_;
  std::vector<std::pair<abi::Buffer, uint64_t>> free_staging_;  // read-back buffers for reuse
  int flag_value_ = 0;
  bool timing_ = false;
  abi::QuerySet queries_ = nullptr;
  abi::Buffer resolve_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  double elapsed_ms_ = 0;
};

}  // namespace rlx::webgpu
