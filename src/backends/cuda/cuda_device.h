#pragma once
// The device API (runtime/device_api.h) on CUDA: cudaMalloc'd buffers, one non-blocking stream
// for every copy and launch, per-run host->device and device->host copies through pinned staging
// buffers, device-to-device copies (device tensors' included: their producer streams are waited
// for through an event), events around the recorded work, and the error flag read back through
// pinned memory.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/device.h"
#include "runtime/device_api.h"

namespace rlx::cuda {

class CudaDevice final : public DeviceApi {
 public:
  CudaDevice();  // needs a device (device() throws "no CUDA device: ..." otherwise)

  DeviceBuf allocate(size_t bytes, const std::string& what) override;
  void release(DeviceBuf b) override;
  int error_flag() const override;
  void mark_start() override;
  void mark_stop() override;
  double elapsed_ms() override;
  void wait() override;

  bool takes_device_tensors() const override { return true; }
  int ordinal() const override;
  void check_device_memory(const void* ptr, size_t bytes, const std::string& what) override;
  void wait_for_stream(uintptr_t stream) override;
  Tensor allocate_tensor(DType dtype, const std::vector<int64_t>& dims, const std::string& what) override;

  uint8_t* address(DeviceBuf b) const;  // the buffer's device address (null for 0 bytes)
  size_t size(DeviceBuf b) const;
  cudaStream_t stream() const { return stream_.get(); }

 protected:
  void do_upload(std::span<const HostToDevice> copies, bool staged) override;
  void do_download(std::span<const DeviceToHost> copies) override;
  void do_copy(std::span<const DeviceToDevice> copies) override;
  void do_read_error_flag(DeviceBuf flag) override;
  void do_copy_in(std::span<const ExternalToDevice> copies) override;
  void do_copy_out(std::span<const DeviceToExternal> copies) override;

 private:
  const DeviceBuffer& buffer(DeviceBuf b) const;
  void check_pending(cudaError_t e, const char* call);

  Stream stream_;
  Event ev_start_, ev_stop_;
  Event ev_producer_{false};  // recorded on a device tensor's producer stream (no timing)
  std::vector<DeviceBuffer> bufs_;  // by DeviceBuf id - 1
  PinnedBuffer in_stage_, out_stage_, err_host_;
  size_t in_used_ = 0, out_used_ = 0;  // staging bytes in flight until the next wait()
  struct Landing {
    void* dst;
    size_t offset, bytes;  // in out_stage_
  };
  std::vector<Landing> landings_;  // downloads to copy out of out_stage_ at wait()
};

}  // namespace rlx::cuda
