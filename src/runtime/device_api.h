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
  uint64_t device_copies = 0, device_copy_bytes = 0;   // device -> device copies
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
};

namespace detail {
void note_param_upload();
void note_device_ms(double ms);
}  // namespace detail

}  // namespace rlx
