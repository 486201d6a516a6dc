#pragma once
// The run protocol of a device backend, written once over the device API (runtime/device_api.h):
// the schedule and its arena, one device buffer per leaf (constants uploaded at prepare, params
// once per params generation, inputs every run through the API's staging, or device-to-device
// from device tensors after waiting for their producer streams), the carried state of
// bind_state moved on the device, readback of only the requested outputs (or device-to-device
// copies into device tensors), and the kernels' error flag checked after every run (so the run
// has finished on the device when run() returns). A backend subclasses it: its constructor lowers the
// schedule into recorded work (reading the buffers' addresses through its own device type), and
// submit() enqueues that work.
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "plan/schedule.h"
#include "runtime/backend.h"
#include "runtime/device_api.h"

namespace rlx {

class DeviceVariant : public Variant {
 public:
  std::vector<Tensor> run(const RunArgs& args) override;
  std::vector<Tensor> kept_outputs(const std::vector<size_t>& which, bool on_device) override;
  const Graph& graph() const override { return graph_; }
  size_t arena_bytes() const override { return static_cast<size_t>(sched_.memory.arena_bytes); }

 protected:
  // Plans `g` (verified, static) under `plan` (a device's buffer limits and storage dtypes:
  // plan/device_limits.h), allocates the arena buffers, the error flag and a buffer per leaf on
  // `dev`, and uploads the constants. Leaves and outputs whose storage dtype differs from their
  // dtype are converted at the host boundary (plan/storage.h), each element checked.
  DeviceVariant(Graph g, std::unique_ptr<DeviceApi> dev, const plan::PlanOptions& plan = {});

  DeviceApi& dev() const { return *dev_; }
  const plan::Schedule& schedule() const { return sched_; }
  DeviceBuf arena_buf(size_t i = 0) const { return arenas_.at(i); }  // arena buffer i (memory.arena_buffers)
  DeviceBuf flag_buf() const { return flag_; }  // one int, 0 unless a kernel reported bad data
  // The buffer of leaf `id` (an Input, Param or Constant node); rlx::Error when it has none.
  DeviceBuf leaf_buf(NodeId id) const;
  // Where value `r` lives: its buffer and byte offset.
  std::pair<DeviceBuf, size_t> where(const plan::TensorRef& r) const;
  size_t stored_weight_bytes() const { return weight_bytes_; }  // params and constants
  // A param or constant that no recorded work reads as stored (the backend keeps it in another
  // form, e.g. packed): its buffer is freed and new param values are no longer uploaded into it.
  void drop_leaf(NodeId id);
  bool is_dropped(NodeId id) const { return dropped_.count(id) != 0; }
  DType leaf_storage(NodeId id) const;  // the dtype leaf `id` is stored as on the device

  // Enqueues the recorded work once (after this run's uploads, before its readback).
  virtual void submit() = 0;
  // Called for each param after its new value was enqueued for upload (also for dropped params,
  // whose bytes were not): `value` stays valid until the next wait().
  virtual void param_uploaded(NodeId id, const Tensor& value) { (void)id, (void)value; }
  // The message for error code `code` (non-zero) of the error flag.
  virtual std::string kernel_error_message(int code) const;

 private:
  const Tensor& leaf_tensor(NodeId id, const RunArgs& args) const;
  void check_bytes(NodeId id, const Tensor& t) const;
  void carry_in(std::span<const Carry> carry);
  size_t output_bytes(size_t k) const;  // in its storage dtype
  size_t leaf_bytes(NodeId id) const;   // the device bytes of a leaf (its storage dtype)
  // Enqueues the upload of host tensor `t` (leaf `id`), converted to the leaf's storage dtype when
  // that differs (the converted bytes are kept in staged_ until the next wait()).
  void upload_leaf(NodeId id, const Tensor& t, bool borrowed);
  // New host tensors for outputs `which`, filled at the next wait() and finish_outputs().
  struct Pending {
    size_t index;                // into the returned vector
    std::vector<uint8_t> bytes;  // the storage bytes, converted by finish_outputs
  };
  std::vector<Tensor> download_outputs(const std::vector<size_t>& which, std::vector<Pending>& pending);
  // Device tensors (RunArgs: device inputs, device_outputs, out): checked before anything is
  // enqueued; outputs copied device-to-device into the returned device tensors.
  void check_device_tensors(const RunArgs& args, const std::set<NodeId>& carried) const;
  // The device tensors outputs `which` go to: `out` (the caller's) or, when empty, new ones.
  std::vector<Tensor> device_outputs(const std::vector<size_t>& which, std::span<const Tensor> out);
  void copy_outputs(const std::vector<size_t>& which, const std::vector<Tensor>& outs);
  void finish_outputs(const std::vector<size_t>& which, std::vector<Tensor>& outs, std::vector<Pending>& pending) const;

  Graph graph_;
  plan::Schedule sched_;
  std::unique_ptr<DeviceApi> dev_;
  std::vector<DeviceBuf> arenas_;
  DeviceBuf flag_;
  std::vector<std::vector<uint8_t>> staged_;  // converted leaf bytes until the next wait()
  std::unordered_map<NodeId, DeviceBuf> leaves_;
  std::vector<NodeId> inputs_, params_;
  std::set<NodeId> dropped_;
  size_t weight_bytes_ = 0;
  bool params_uploaded_ = false;
  uint64_t params_generation_ = 0;
  std::unordered_map<NodeId, DeviceBuf> spares_;  // per carried input: its double buffer
  std::vector<size_t> kept_;                      // outputs the last run kept (RunArgs::keep)
};

}  // namespace rlx
