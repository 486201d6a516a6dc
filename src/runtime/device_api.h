#pragma once
// The small device API that the shared device runtime (runtime/device_variant.h) runs on:
// buffers, copies host -> device, device -> host and on the device, timestamps around the
// recorded work, and the error flag that kernels set on bad data. A GPU backend implements it
// once (CUDA: backends/cuda/cuda_device.h). Recording and submitting the lowered step list stay
// with the backend's variant, since the recorded work is typed by the device's language.
//
// Everything is ordered on one queue: enqueued copies and work run in call order, and what the
// host reads (downloads, the error flag, timestamps) is valid after wait(). Every copy through
// this API is counted (device_stats), so tests can assert what crossed the host-device boundary.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rlx/tensor.h"

namespace rlx {

// A device buffer of one DeviceApi (0: none).
struct DeviceBuf {
  uint32_t id = 0;
  explicit operator bool() const { return id != 0; }
  bool operator==(const DeviceBuf&) const = default;
};

struct HostToDevice {
  DeviceBuf dst;
  size_t offset = 0;
  const void* src = nullptr;
  size_t bytes = 0;
};
struct DeviceToHost {
  void* dst = nullptr;
  DeviceBuf src;
  size_t offset = 0;
  size_t bytes = 0;
};
// Copies between a DeviceApi buffer and device memory outside the API (device tensors: a
// borrowed input, an output buffer given by the caller or owned by a returned Tensor).
struct ExternalToDevice {
  DeviceBuf dst;
  size_t offset = 0;
  const void* src = nullptr;  // device memory of this device
  size_t bytes = 0;
};
struct DeviceToExternal {
  void* dst = nullptr;  // device memory of this device
  DeviceBuf src;
  size_t offset = 0;
  size_t bytes = 0;
};
struct DeviceToDevice {
  DeviceBuf dst;
  size_t dst_offset = 0;
  DeviceBuf src;
  size_t src_offset = 0;
  size_t bytes = 0;
};

// Process-wide counters of the device runtime (all device backends; tests take differences).
struct DeviceStats {
  uint64_t uploads = 0, upload_bytes = 0;              // host -> device copies
  uint64_t downloads = 0, download_bytes = 0;          // device -> host copies of values
  uint64_t device_copies = 0, device_copy_bytes = 0;   // device -> device copies (device tensors' included)
  uint64_t flag_reads = 0;                             // error-flag readbacks (one int each)
  uint64_t param_uploads = 0;  // times a variant uploaded its params (once per params generation)
  // Device time of the last run's recorded work (timestamps around it), in milliseconds.
  double last_device_ms = 0;
};
DeviceStats device_stats();

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // A buffer of `bytes` (0 allowed). Out of memory -> rlx::Error naming `what` and the bytes.
  virtual DeviceBuf allocate(size_t bytes, const std::string& what) = 0;
  virtual void release(DeviceBuf b) = 0;  // frees it now (nothing enqueued may still use it)

  // Host -> device. upload: the host bytes are taken (staged) before it returns, so the caller
  // may change them at once (per-run inputs). upload_borrowed: `src` must stay valid and
  // unchanged until wait() (large values such as params, not worth a staging copy).
  void upload(std::span<const HostToDevice> copies);
  void upload_borrowed(std::span<const HostToDevice> copies);
  // Device -> host; the host bytes are valid after wait(). `dst` must stay valid until then;
  // when a download, the flag readback or wait() throws, downloads still pending are dropped.
  void download(std::span<const DeviceToHost> copies);
  // Device -> device; source and destination regions must not overlap.
  void copy(std::span<const DeviceToDevice> copies);
  // ---- device tensors (rlx/tensor.h): memory of this device outside its buffers ----
  // Whether this device takes device tensors; the members below throw rlx::Error when it does not.
  virtual bool takes_device_tensors() const { return false; }
  virtual int ordinal() const { return 0; }  // the device's ordinal among those of its kind
  // rlx::Error naming `what` unless [ptr, ptr + bytes) is memory of this device.
  virtual void check_device_memory(const void* ptr, size_t bytes, const std::string& what);
  // Work enqueued after this call waits for the work enqueued on `stream` (a CUDA stream as an
  // integer, Tensor::kCudaLegacyStream, ...) so far.
  virtual void wait_for_stream(uintptr_t stream);
  // A tensor in this device's memory that owns it (freed when the last copy of it goes).
  virtual Tensor allocate_tensor(DType dtype, const std::vector<int64_t>& dims, const std::string& what);
  // Device copies from / to device tensors, enqueued like copy() (counted as device copies).
  void copy_in(std::span<const ExternalToDevice> copies);
  void copy_out(std::span<const DeviceToExternal> copies);

  // Enqueues the readback of the int error flag in `flag`; error_flag() returns it after wait().
  void read_error_flag(DeviceBuf flag);
  virtual int error_flag() const = 0;

  // Timestamps around the work enqueued between them; elapsed_ms() is valid after wait().
  virtual void mark_start() = 0;
  virtual void mark_stop() = 0;
  virtual double elapsed_ms() = 0;

  // Blocks until everything enqueued has run; then downloads have landed in host memory.
  virtual void wait() = 0;

 protected:
  virtual void do_upload(std::span<const HostToDevice> copies, bool staged) = 0;
  virtual void do_download(std::span<const DeviceToHost> copies) = 0;
  virtual void do_copy(std::span<const DeviceToDevice> copies) = 0;
  virtual void do_read_error_flag(DeviceBuf flag) = 0;
  virtual void do_copy_in(std::span<const ExternalToDevice> copies);
  virtual void do_copy_out(std::span<const DeviceToExternal> copies);
};

namespace detail {
void note_param_upload();
void note_device_ms(double ms);
void note_download(size_t bytes);  // a device -> host copy outside a DeviceApi (Tensor::to_host)
}  // namespace detail

}  // namespace rlx
