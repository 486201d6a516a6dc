#include "backends/webgpu/wgpu_device.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "backends/webgpu/wgpu_pipelines.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

uint64_t round4(uint64_t b) { return (b + 3) / 4 * 4; }

// The copy kernel for regions of one buffer: words [src, src + n) -> [dst, dst + n).
const char* kCopyWords = R"(@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
struct P { dst: u32, src: u32, n: u32, pad: u32, }
@group(0) @binding(1) var<uniform> p: P;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = gid.x; i < p.n; i += nwg.x * 256u) { buf[p.dst + i] = buf[p.src + i]; }
}
)";

}  // namespace

WebGpuDevice::WebGpuDevice() : cx_(context()) {}

WebGpuDevice::~WebGpuDevice() {
  const Api& a = api();
  try {
    if (!pending_.empty()) wait();
  } catch (...) {
  }
  clear_pending();
  for (auto& [id, b] : bufs_) a.BufferDestroy(b.first), a.BufferRelease(b.first);
  for (auto& [b, n] : free_staging_) a.BufferDestroy(b), a.BufferRelease(b);
  if (queries_) a.QuerySetDestroy(queries_), a.QuerySetRelease(queries_);
  if (resolve_) a.BufferDestroy(resolve_), a.BufferRelease(resolve_);
}

void WebGpuDevice::encode_timestamp(abi::CommandEncoder enc, bool end) {
  if (!timing_ || !cx_.info.timestamps) return;
  const Api& a = api();
  if (!queries_) {
    abi::QuerySetDescriptor qd;
    qd.type = abi::QueryType::Timestamp;
    qd.count = 2;
    abi::BufferDescriptor rd;
    rd.usage = abi::usage::QueryResolve | abi::usage::CopySrc;
    rd.size = 16;
    scoped("creating timestamp queries", [&] {
      queries_ = a.DeviceCreateQuerySet(cx_.device, &qd);
      resolve_ = a.DeviceCreateBuffer(cx_.device, &rd);
    });
  }
  abi::PassTimestampWrites tw;
  tw.query_set = queries_;
  (end ? tw.end_index : tw.beginning_index) = end ? 1 : 0;
  abi::ComputePassDescriptor pd;
  pd.timestamp_writes = &tw;
  abi::ComputePassEncoder pass = a.CommandEncoderBeginComputePass(enc, &pd);
  a.ComputePassEncoderEnd(pass);
  a.ComputePassEncoderRelease(pass);
  if (!end) return;
  a.CommandEncoderResolveQuerySet(enc, queries_, 0, 2, resolve_, 0);
  Readback r;
  std::tie(r.staging, r.capacity) = staging_buffer(16);
  r.bytes = 16;
  r.timestamps = true;
  a.CommandEncoderCopyBufferToBuffer(enc, resolve_, 0, r.staging, 0, 16);
  pending_.push_back(std::move(r));  // submitted with `enc`, before wait()
}

DeviceBuf WebGpuDevice::allocate(size_t bytes, const std::string& what) {
  const Api& a = api();
  const uint64_t n = std::max<uint64_t>(round4(bytes), 4);
  if (n > cx_.info.limits.max_buffer_size)
    throw Error("WebGPU: " + what + " needs " + std::to_string(bytes) + " bytes, above " + cx_.info.name +
                "'s maxBufferSize of " + std::to_string(cx_.info.limits.max_buffer_size) +
                " bytes; use a smaller batch or another device");
  abi::BufferDescriptor d;
  d.label = view(what);
  d.usage = abi::usage::Storage | abi::usage::CopySrc | abi::usage::CopyDst;
  d.size = n;
  abi::Buffer b = nullptr;
  try {
    scoped("allocating " + std::to_string(bytes) + " bytes for " + what, [&] { b = a.DeviceCreateBuffer(cx_.device, &d); });
  } catch (...) {
    if (b) a.BufferRelease(b);
    throw;
  }
  const uint32_t id = next_id_++;
  bufs_[id] = {b, n};
  return DeviceBuf{id};
}

void WebGpuDevice::release(DeviceBuf b) {
  auto it = bufs_.find(b.id);
  if (it == bufs_.end()) return;
  api().BufferDestroy(it->second.first);
  api().BufferRelease(it->second.first);
  bufs_.erase(it);
}

abi::Buffer WebGpuDevice::buffer(DeviceBuf b) const {
  auto it = bufs_.find(b.id);
  if (it == bufs_.end()) throw Error("WebGPU: internal: unknown buffer " + std::to_string(b.id));
  return it->second.first;
}

uint64_t WebGpuDevice::size(DeviceBuf b) const {
  auto it = bufs_.find(b.id);
  if (it == bufs_.end()) throw Error("WebGPU: internal: unknown buffer " + std::to_string(b.id));
  return it->second.second;
}

abi::CommandEncoder WebGpuDevice::encoder() const {
  abi::CommandEncoderDescriptor d;
  return api().DeviceCreateCommandEncoder(cx_.device, &d);
}

void WebGpuDevice::finish_and_submit(abi::CommandEncoder enc) {
  abi::CommandBufferDescriptor d;
  abi::CommandBuffer cb = api().CommandEncoderFinish(enc, &d);
  api().CommandEncoderRelease(enc);
  submit(cb);
}

void WebGpuDevice::submit(abi::CommandBuffer cb) {
  api().QueueSubmit(cx_.queue, 1, &cb);
  api().CommandBufferRelease(cb);
}

void WebGpuDevice::do_upload(std::span<const HostToDevice> copies, bool staged) {
  (void)staged;  // wgpuQueueWriteBuffer copies the bytes before it returns
  const Api& a = api();
  for (const HostToDevice& c : copies) {
    if (c.bytes == 0) continue;
    if (c.offset % 4 || (c.bytes % 4 && c.offset + round4(c.bytes) > size(c.dst)))
      throw Error("WebGPU: internal: an upload of " + std::to_string(c.bytes) + " bytes at offset " +
                  std::to_string(c.offset) + " is not 4-byte aligned");
    // WebGPU writes whole words: a tail of 2 bytes (an odd count of packed 16-bit values) goes
    // as one word padded with zeros (the buffer is allocated in words).
    const uint64_t body = c.bytes / 4 * 4;
    if (body) a.QueueWriteBuffer(cx_.queue, buffer(c.dst), c.offset, c.src, body);
    if (body < c.bytes) {
      uint8_t tail[4] = {0, 0, 0, 0};
      std::memcpy(tail, static_cast<const uint8_t*>(c.src) + body, c.bytes - body);
      a.QueueWriteBuffer(cx_.queue, buffer(c.dst), c.offset + body, tail, 4);
    }
  }
}

std::pair<abi::Buffer, uint64_t> WebGpuDevice::staging_buffer(uint64_t bytes) {
  for (size_t i = 0; i < free_staging_.size(); ++i)
    if (free_staging_[i].second >= bytes) {
      const auto b = free_staging_[i];
      free_staging_.erase(free_staging_.begin() + static_cast<std::ptrdiff_t>(i));
      return b;
    }
  abi::BufferDescriptor d;
  d.label = view("rlx read-back");
  d.usage = abi::usage::MapRead | abi::usage::CopyDst;
  d.size = std::max<uint64_t>(round4(bytes), 256);
  abi::Buffer b = nullptr;
  scoped("allocating a read-back buffer of " + std::to_string(bytes) + " bytes",
         [&] { b = api().DeviceCreateBuffer(cx_.device, &d); });
  return {b, d.size};
}

void WebGpuDevice::do_download(std::span<const DeviceToHost> copies) {
  uint64_t total = 0;
  for (const DeviceToHost& c : copies) total += round4(c.bytes);
  if (total == 0) return;
  Readback r;
  std::tie(r.staging, r.capacity) = staging_buffer(total);
  r.bytes = total;
  abi::CommandEncoder enc = encoder();
  uint64_t at = 0;
  for (const DeviceToHost& c : copies) {
    if (c.bytes == 0) continue;
    if (c.offset % 4) throw Error("WebGPU: internal: a download at offset " + std::to_string(c.offset) + " is not 4-byte aligned");
    api().CommandEncoderCopyBufferToBuffer(enc, buffer(c.src), c.offset, r.staging, at, round4(c.bytes));
    r.copies.push_back(c);
    at += round4(c.bytes);
  }
  finish_and_submit(enc);
  pending_.push_back(std::move(r));
}

void WebGpuDevice::do_read_error_flag(DeviceBuf flag) {
  Readback r;
  std::tie(r.staging, r.capacity) = staging_buffer(4);
  r.bytes = 4;
  r.flag = &flag_value_;
  abi::CommandEncoder enc = encoder();
  api().CommandEncoderCopyBufferToBuffer(enc, buffer(flag), 0, r.staging, 0, 4);
  finish_and_submit(enc);
  pending_.push_back(std::move(r));
}

void WebGpuDevice::encode_copy(abi::CommandEncoder enc, abi::Buffer dst, uint64_t dst_off, abi::Buffer src,
                               uint64_t src_off, uint64_t bytes) {
  if (bytes == 0) return;
  if (bytes % 4 || dst_off % 4 || src_off % 4)
    throw Error("WebGPU: internal: a device copy of " + std::to_string(bytes) + " bytes is not 4-byte aligned");
  const Api& a = api();
  if (dst != src) {
    a.CommandEncoderCopyBufferToBuffer(enc, src, src_off, dst, dst_off, bytes);
    return;
  }
  const Pipeline& p = pipeline_for("copy_words", kCopyWords, {BindingKind::ReadWrite, BindingKind::Uniform});
  const uint32_t words[4] = {static_cast<uint32_t>(dst_off / 4), static_cast<uint32_t>(src_off / 4),
                             static_cast<uint32_t>(bytes / 4), 0};
  abi::BufferDescriptor ud;
  ud.usage = abi::usage::Uniform | abi::usage::CopyDst;
  ud.size = 16;
  abi::Buffer ub = a.DeviceCreateBuffer(cx_.device, &ud);
  a.QueueWriteBuffer(cx_.queue, ub, 0, words, 16);
  abi::BindGroupEntry e[2];
  e[0].binding = 0, e[0].buffer = dst, e[0].offset = 0, e[0].size = abi::kWholeSize;
  e[1].binding = 1, e[1].buffer = ub, e[1].offset = 0, e[1].size = 16;
  abi::BindGroupDescriptor bd;
  bd.layout = p.layout;
  bd.entry_count = 2;
  bd.entries = e;
  abi::BindGroup bg = a.DeviceCreateBindGroup(cx_.device, &bd);
  abi::ComputePassDescriptor pd;
  abi::ComputePassEncoder pass = a.CommandEncoderBeginComputePass(enc, &pd);
  a.ComputePassEncoderSetPipeline(pass, p.pipeline);
  a.ComputePassEncoderSetBindGroup(pass, 0, bg, 0, nullptr);
  const uint64_t groups = std::min<uint64_t>((bytes / 4 + 255) / 256, 65535);
  a.ComputePassEncoderDispatchWorkgroups(pass, static_cast<uint32_t>(groups), 1, 1);
  a.ComputePassEncoderEnd(pass);
  a.ComputePassEncoderRelease(pass);
  a.BindGroupRelease(bg);  // the encoder keeps what it references alive
  a.BufferRelease(ub);
}

void WebGpuDevice::do_copy(std::span<const DeviceToDevice> copies) {
  if (copies.empty()) return;
  abi::CommandEncoder enc = encoder();
  for (const DeviceToDevice& c : copies) {
    // A tail of 2 bytes (packed 16-bit values) moves as a whole word when both buffers have it
    // (they are allocated in words; the extra half is padding no kernel reads).
    uint64_t bytes = c.bytes;
    if (bytes % 4 && c.dst_offset + round4(bytes) <= size(c.dst) && c.src_offset + round4(bytes) <= size(c.src))
      bytes = round4(bytes);
    encode_copy(enc, buffer(c.dst), c.dst_offset, buffer(c.src), c.src_offset, bytes);
  }
  finish_and_submit(enc);
}

void WebGpuDevice::mark_start() {
  timing_ = true;
  start_ = std::chrono::steady_clock::now();
}

void WebGpuDevice::mark_stop() {}

void WebGpuDevice::clear_pending() {
  for (Readback& r : pending_) free_staging_.push_back({r.staging, r.capacity});
  pending_.clear();
}

void WebGpuDevice::wait() {
  const Api& a = api();
  struct Done {
    abi::QueueWorkDoneStatus status{};
    std::string message;
  } done;
  abi::CallbackInfo<abi::QueueWorkDoneCallback> cb;
  cb.callback = [](abi::QueueWorkDoneStatus s, abi::StringView msg, void* u1, void*) {
    static_cast<Done*>(u1)->status = s;
    static_cast<Done*>(u1)->message = str(msg);
  };
  cb.userdata1 = &done;
  try {
    wait_for(a.QueueOnSubmittedWorkDone(cx_.queue, cb), "the queue");
    if (timing_) {
      elapsed_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
      timing_ = false;
    }
    check_uncaptured("running the recorded work");
    if (done.status != abi::QueueWorkDoneStatus::Success) throw Error("WebGPU: the queue's work failed (status " + std::to_string(static_cast<uint32_t>(done.status)) + ")" + (done.message.empty() ? "" : ": " + done.message));
    for (Readback& r : pending_) {
      struct Mapped {
        abi::MapAsyncStatus status{};
        std::string message;
      } m;
      abi::CallbackInfo<abi::BufferMapCallback> mc;
      mc.callback = [](abi::MapAsyncStatus s, abi::StringView msg, void* u1, void*) {
        auto* mm = static_cast<Mapped*>(u1);
        mm->status = s, mm->message = str(msg);
      };
      mc.userdata1 = &m;
      const size_t n = static_cast<size_t>(round4(r.bytes));
      wait_for(a.BufferMapAsync(r.staging, abi::kMapRead, 0, n, mc), "a read-back");
      if (m.status != abi::MapAsyncStatus::Success) throw Error("WebGPU: mapping a read-back buffer failed: " + m.message);
      const auto* src = static_cast<const uint8_t*>(a.BufferGetConstMappedRange(r.staging, 0, n));
      if (!src) throw Error("WebGPU: a mapped read-back buffer has no data");
      if (r.flag) std::memcpy(r.flag, src, sizeof(int));
      if (r.timestamps) {
        uint64_t t[2];
        std::memcpy(t, src, sizeof t);
        if (t[1] > t[0]) elapsed_ms_ = static_cast<double>(t[1] - t[0]) * 1e-6;
      }
      size_t at = 0;
      for (const DeviceToHost& c : r.copies) {
        std::memcpy(c.dst, src + at, c.bytes);
        at += static_cast<size_t>(round4(c.bytes));
      }
      a.BufferUnmap(r.staging);
    }
  } catch (...) {
    clear_pending();
    throw;
  }
  clear_pending();
}

}  // namespace rlx::webgpu
