#include "backends/cuda/cuda_device.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/status.h"
#include "rlx/error.h"
#include "rlx/limits.h"

namespace rlx::cuda {

CudaDevice::CudaDevice() {
  device();
  err_host_.reserve(sizeof(int));
}

DeviceBuf CudaDevice::allocate(size_t bytes, const std::string& what) {
  DeviceBuffer b(bytes, what);
  bufs_.push_back(std::move(b));
  return DeviceBuf{static_cast<uint32_t>(bufs_.size())};
}

const DeviceBuffer& CudaDevice::buffer(DeviceBuf b) const {
  if (!b || b.id > bufs_.size()) throw Error("CUDA device: internal: no buffer " + std::to_string(b.id));
  return bufs_[b.id - 1];
}

void CudaDevice::release(DeviceBuf b) {
  buffer(b);
  bufs_[b.id - 1] = DeviceBuffer();
}

uint8_t* CudaDevice::address(DeviceBuf b) const { return buffer(b).data(); }
size_t CudaDevice::size(DeviceBuf b) const { return buffer(b).size(); }

void CudaDevice::do_upload(std::span<const HostToDevice> copies, bool staged) {
  cudaStream_t s = stream_.get();
  if (!staged) {
    for (const HostToDevice& c : copies)
      if (c.bytes) RLX_CUDA_CHECK(cudaMemcpyAsync(address(c.dst) + c.offset, c.src, c.bytes, cudaMemcpyHostToDevice, s));
    return;
  }
  size_t total = 0;
  for (const HostToDevice& c : copies) total += c.bytes;
  if (in_used_ + total > in_stage_.size()) {
    if (in_used_) wait();  // the staging buffer is still being read
    in_stage_.reserve(total);
  }
  for (const HostToDevice& c : copies) {
    if (!c.bytes) continue;
    uint8_t* stage = in_stage_.data() + in_used_;
    std::memcpy(stage, c.src, c.bytes);
    RLX_CUDA_CHECK(cudaMemcpyAsync(address(c.dst) + c.offset, stage, c.bytes, cudaMemcpyHostToDevice, s));
    in_used_ += c.bytes;
  }
}

void CudaDevice::do_download(std::span<const DeviceToHost> copies) {
  size_t total = 0;
  for (const DeviceToHost& c : copies) total += c.bytes;
  if (out_used_ + total > out_stage_.size()) {
    if (out_used_) wait();  // lands the downloads in flight
    out_stage_.reserve(std::max<size_t>(total, 1));
  }
  for (const DeviceToHost& c : copies) {
    if (!c.bytes) continue;
    check_pending(cudaMemcpyAsync(out_stage_.data() + out_used_, address(c.src) + c.offset, c.bytes,
                                  cudaMemcpyDeviceToHost, stream_.get()),
                  "cudaMemcpyAsync(device to pinned staging)");
    landings_.push_back({c.dst, out_used_, c.bytes});
    out_used_ += c.bytes;
  }
}

// A failed enqueue drops the downloads in flight: their host tensors die with the failing run,
// so a later wait() must not write into them.
void CudaDevice::check_pending(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  landings_.clear();
  throw_cuda(e, call);
}

void CudaDevice::do_copy(std::span<const DeviceToDevice> copies) {
  for (const DeviceToDevice& c : copies)
    if (c.bytes)
      RLX_CUDA_CHECK(cudaMemcpyAsync(address(c.dst) + c.dst_offset, address(c.src) + c.src_offset, c.bytes,
                                     cudaMemcpyDeviceToDevice, stream_.get()));
}

int CudaDevice::ordinal() const { return device().ordinal; }

void CudaDevice::check_device_memory(const void* ptr, size_t bytes, const std::string& what) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    throw Error(what + ": cudaPointerGetAttributes failed on its pointer (" + cudaGetErrorName(e) +
                "); pass CUDA device memory");
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    throw Error(what + ": its pointer is not CUDA device memory (memory type " + std::to_string(static_cast<int>(a.type)) +
                ": host or unregistered); pass a host tensor for host memory");
  if (a.device != ordinal())
    throw Error(what + ": its memory is on CUDA device " + std::to_string(a.device) + ", but this graph runs on device " +
                std::to_string(ordinal()) + "; copy it to that device or to the host");
  (void)bytes;  // the runtime cannot tell an allocation's extent from one pointer
}

void CudaDevice::wait_for_stream(uintptr_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  if (s == stream_.get()) return;
  RLX_CUDA_CHECK(cudaEventRecord(ev_producer_.get(), s));
  RLX_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ev_producer_.get(), 0));
}

Tensor CudaDevice::allocate_tensor(DType dtype, const std::vector<int64_t>& dims, const std::string& what) {
  const auto bytes = static_cast<size_t>(checked_nbytes(dims, dtype, what));
  auto buf = std::make_shared<DeviceBuffer>(bytes, what + " (a device tensor)");
  void* p = buf->data();
  return Tensor::adopt_device(Device::Cuda, ordinal(), dtype, dims, p, std::move(buf));
}

void CudaDevice::do_copy_in(std::span<const ExternalToDevice> copies) {
  for (const ExternalToDevice& c : copies)
    if (c.bytes)
      RLX_CUDA_CHECK(cudaMemcpyAsync(address(c.dst) + c.offset, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaDevice::do_copy_out(std::span<const DeviceToExternal> copies) {
  for (const DeviceToExternal& c : copies)
    if (c.bytes)
      RLX_CUDA_CHECK(cudaMemcpyAsync(c.dst, address(c.src) + c.offset, c.bytes, cudaMemcpyDeviceToDevice, stream_.get()));
}

void CudaDevice::do_read_error_flag(DeviceBuf flag) {
  check_pending(cudaMemcpyAsync(err_host_.data(), address(flag), sizeof(int), cudaMemcpyDeviceToHost, stream_.get()),
                "cudaMemcpyAsync(error flag to pinned memory)");
}

int CudaDevice::error_flag() const {
  int err = 0;
  std::memcpy(&err, err_host_.data(), sizeof err);
  return err;
}

void CudaDevice::mark_start() { RLX_CUDA_CHECK(cudaEventRecord(ev_start_.get(), stream_.get())); }
void CudaDevice::mark_stop() { RLX_CUDA_CHECK(cudaEventRecord(ev_stop_.get(), stream_.get())); }

double CudaDevice::elapsed_ms() {
  float ms = 0;
  RLX_CUDA_CHECK(cudaEventElapsedTime(&ms, ev_start_.get(), ev_stop_.get()));
  return ms;
}

void CudaDevice::wait() {
  const cudaError_t e = cudaStreamSynchronize(stream_.get());
  if (e == cudaSuccess)
    for (const Landing& l : landings_) std::memcpy(l.dst, out_stage_.data() + l.offset, l.bytes);
  landings_.clear();
  in_used_ = out_used_ = 0;
  check_cuda(e, "cudaStreamSynchronize(stream_.get())");
}

}  // namespace rlx::cuda
