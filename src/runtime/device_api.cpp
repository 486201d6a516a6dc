#include "runtime/device_api.h"

#include <atomic>

#include "rlx/error.h"

namespace rlx {
namespace {

struct Counters {
  std::atomic<uint64_t> uploads{0}, upload_bytes{0}, downloads{0}, download_bytes{0}, device_copies{0},
      device_copy_bytes{0}, flag_reads{0}, param_uploads{0};
  std::atomic<double> last_device_ms{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

template <class Copy>
void count(std::span<const Copy> copies, std::atomic<uint64_t>& n, std::atomic<uint64_t>& bytes) {
  for (const Copy& c : copies) {
    if (c.bytes == 0) continue;
    ++n;
    bytes += c.bytes;
  }
}

}  // namespace

void DeviceApi::upload(std::span<const HostToDevice> copies) {
  count(copies, counters().uploads, counters().upload_bytes);
  do_upload(copies, true);
}

void DeviceApi::upload_borrowed(std::span<const HostToDevice> copies) {
  count(copies, counters().uploads, counters().upload_bytes);
  do_upload(copies, false);
}

void DeviceApi::download(std::span<const DeviceToHost> copies) {
  count(copies, counters().downloads, counters().download_bytes);
  do_download(copies);
}

void DeviceApi::copy(std::span<const DeviceToDevice> copies) {
  count(copies, counters().device_copies, counters().device_copy_bytes);
  do_copy(copies);
}

void DeviceApi::copy_in(std::span<const ExternalToDevice> copies) {
  if (copies.empty()) return;
  count(copies, counters().device_copies, counters().device_copy_bytes);
  do_copy_in(copies);
}

void DeviceApi::copy_out(std::span<const DeviceToExternal> copies) {
  if (copies.empty()) return;
  count(copies, counters().device_copies, counters().device_copy_bytes);
  do_copy_out(copies);
}

namespace {
[[noreturn]] void no_device_tensors(const std::string& what) {
  throw Error(what + ": this device takes no device tensors (only CUDA does); pass host tensors");
}
}  // namespace

void DeviceApi::check_device_memory(const void*, size_t, const std::string& what) { no_device_tensors(what); }
void DeviceApi::wait_for_stream(uintptr_t) { no_device_tensors("waiting for a device tensor's stream"); }
Tensor DeviceApi::allocate_tensor(DType, const std::vector<int64_t>&, const std::string& what) { no_device_tensors(what); }
void DeviceApi::do_copy_in(std::span<const ExternalToDevice>) { no_device_tensors("copying a device tensor in"); }
void DeviceApi::do_copy_out(std::span<const DeviceToExternal>) { no_device_tensors("copying into a device tensor"); }

void DeviceApi::read_error_flag(DeviceBuf flag) {
  ++counters().flag_reads;
  do_read_error_flag(flag);
}

DeviceStats device_stats() {
  const Counters& c = counters();
  DeviceStats s;
  s.uploads = c.uploads.load();
  s.upload_bytes = c.upload_bytes.load();
  s.downloads = c.downloads.load();
  s.download_bytes = c.download_bytes.load();
  s.device_copies = c.device_copies.load();
  s.device_copy_bytes = c.device_copy_bytes.load();
  s.flag_reads = c.flag_reads.load();
  s.param_uploads = c.param_uploads.load();
  s.last_device_ms = c.last_device_ms.load();
  return s;
}

namespace detail {
void note_param_upload() { ++counters().param_uploads; }
void note_device_ms(double ms) { counters().last_device_ms = ms; }
void note_download(size_t bytes) {
  if (bytes == 0) return;
  ++counters().downloads;
  counters().download_bytes += bytes;
}
}  // namespace detail

}  // namespace rlx
