#include "runtime/device_variant.h"

#include <algorithm>

#include "plan/storage.h"
#include "rlx/error.h"

namespace rlx {

DeviceVariant::DeviceVariant(Graph g, std::unique_ptr<DeviceApi> dev, const plan::PlanOptions& plan)
    : graph_(std::move(g)), sched_(plan::build_schedule(graph_, plan)), dev_(std::move(dev)) {
  if (sched_.memory.weights_bytes > 0)
    throw Error("device variant: internal: a weights arena (DeviceLimits::weights_arena) is not supported by the "
                "device runtime");
  const size_t n_arenas = std::max<size_t>(sched_.memory.arena_buffers.size(), 1);
  for (size_t i = 0; i < n_arenas; ++i) {
    const int64_t bytes = sched_.memory.arena_buffers.empty() ? sched_.memory.arena_bytes : sched_.memory.arena_buffers[i];
    arenas_.push_back(dev_->allocate(static_cast<size_t>(bytes),
                                     n_arenas == 1 ? std::string("the arena of a compiled graph")
                                                   : "arena buffer " + std::to_string(i) + " of a compiled graph"));
  }
  flag_ = dev_->allocate(sizeof(int), "the error flag");
  for (const Node& n : graph_.nodes()) {
    const bool input = std::holds_alternative<ops::Input>(n.op), param = std::holds_alternative<ops::Param>(n.op);
    const auto* cst = std::get_if<ops::Constant>(&n.op);
    if (!input && !param && !cst) continue;
    const size_t bytes = leaf_bytes(n.id);
    leaves_.emplace(n.id, dev_->allocate(bytes, "leaf " + node_label(n)));
    if (input) inputs_.push_back(n.id);
    if (param) params_.push_back(n.id);
    if (param || cst) weight_bytes_ += bytes;
    if (cst && bytes > 0) upload_leaf(n.id, cst->value, true);
  }
  dev_->wait();  // the constants' bytes belong to the graph, which the subclass may still move
  staged_.clear();
}

DType DeviceVariant::leaf_storage(NodeId id) const {
  const auto& locs = sched_.memory.locations;
  if (id < locs.size() && !locs[id].empty()) return locs[id][0].storage;
  return graph_.node(id).outputs.at(0).dtype;
}

size_t DeviceVariant::leaf_bytes(NodeId id) const {
  const Shape& s = graph_.node(id).outputs.at(0);
  return static_cast<size_t>(plan::storage_bytes(s.numel(), leaf_storage(id), "leaf " + node_label(graph_.node(id))));
}

void DeviceVariant::upload_leaf(NodeId id, const Tensor& t, bool borrowed) {
  const DType storage = leaf_storage(id);
  if (t.nbytes() == 0) return;
  if (storage == t.dtype()) {
    const HostToDevice c{leaves_.at(id), 0, t.raw(), t.nbytes()};
    borrowed ? dev_->upload_borrowed({&c, 1}) : dev_->upload({&c, 1});
    return;
  }
  const Node& n = graph_.node(id);
  const auto* in = std::get_if<ops::Input>(&n.op);
  const std::string what = in ? "input '" + in->name + "'" : node_label(n);
  staged_.push_back(plan::to_storage(t, storage, what));
  const HostToDevice c{leaves_.at(id), 0, staged_.back().data(), staged_.back().size()};
  dev_->upload_borrowed({&c, 1});  // staged_ keeps the bytes until the next wait()
}

DeviceBuf DeviceVariant::leaf_buf(NodeId id) const {
  auto it = leaves_.find(id);
  if (it == leaves_.end()) throw Error("device variant: internal: node " + std::to_string(id) + " is not a leaf");
  if (dropped_.count(id))
    throw Error("device variant: internal: " + node_label(graph_.node(id)) + " is not kept as stored");
  return it->second;
}

std::pair<DeviceBuf, size_t> DeviceVariant::where(const plan::TensorRef& r) const {
  if (r.loc.kind == plan::Location::Kind::Arena)
    return {arenas_.at(static_cast<size_t>(r.loc.buffer)), static_cast<size_t>(r.loc.offset)};
  return {leaf_buf(r.loc.leaf), static_cast<size_t>(r.loc.offset)};
}

void DeviceVariant::drop_leaf(NodeId id) {
  auto it = leaves_.find(id);
  if (it == leaves_.end() || dropped_.count(id)) return;
  dev_->release(it->second);
  it->second = DeviceBuf{};
  dropped_.insert(id);
}

std::string DeviceVariant::kernel_error_message(int code) const {
  return "a device kernel reported error code " + std::to_string(code);
}

const Tensor& DeviceVariant::leaf_tensor(NodeId id, const RunArgs& args) const {
  auto it = args.leaves.find(id);
  if (it == args.leaves.end()) throw Error("device run: no tensor was given for " + node_label(graph_.node(id)));
  return it->second;
}

void DeviceVariant::check_bytes(NodeId id, const Tensor& t) const {
  const int64_t want = graph_.node(id).outputs.at(0).nbytes();
  if (static_cast<int64_t>(t.nbytes()) != want)
    throw Error("device run: " + node_label(graph_.node(id)) + " got " + std::to_string(t.nbytes()) +
                " bytes, expected " + std::to_string(want));
}

size_t DeviceVariant::output_bytes(size_t k) const {
  const plan::TensorRef& r = sched_.outputs.at(k);
  return static_cast<size_t>(r.numel()) * dtype_size(r.storage());
}

// The carried values are outputs of the previous run, still where it left them. They move
// first, before this run's uploads, since an output may be a view of an input or a param that
// an upload would overwrite. Each goes into its input's leaf buffer (the recorded work reads
// the leaves at fixed addresses, e.g. inside a captured CUDA graph, so buffers are not swapped).
// A source inside another carried input's leaf (state passed through from one input to
// another, e.g. two inputs that trade places) is double-buffered: it is first copied to that
// carry's spare buffer, so that no copy reads bytes another one has already overwritten.
void DeviceVariant::carry_in(std::span<const Carry> carry) {
  if (carry.empty()) return;
  std::set<uint32_t> dests;
  for (const Carry& c : carry) dests.insert(leaf_buf(c.input).id);
  std::vector<DeviceToDevice> to_spare, to_leaf;
  for (const Carry& c : carry) {
    const size_t bytes = output_bytes(c.output);
    if (bytes == 0) continue;
    const auto [src, off] = where(sched_.outputs[c.output]);
    const DeviceBuf dst = leaf_buf(c.input);
    if (src == dst && off == 0) continue;  // the output is the input as it came in
    if (dests.count(src.id)) {
      DeviceBuf& spare = spares_[c.input];
      if (!spare) spare = dev_->allocate(bytes, "the double buffer of carried " + node_label(graph_.node(c.input)));
      to_spare.push_back({spare, 0, src, off, bytes});
      to_leaf.push_back({dst, 0, spare, 0, bytes});
    } else {
      to_leaf.push_back({dst, 0, src, off, bytes});
    }
  }
  dev_->copy(to_spare);
  dev_->copy(to_leaf);
}

std::vector<Tensor> DeviceVariant::download_outputs(const std::vector<size_t>& which, std::vector<Pending>& pending) {
  std::vector<Tensor> outs;
  std::vector<DeviceToHost> downs;
  outs.reserve(which.size());
  pending.reserve(which.size());
  for (size_t k : which) {
    const plan::TensorRef& r = sched_.outputs.at(k);
    outs.push_back(Tensor::empty(r.dtype, r.dims));
    const auto [src, off] = where(r);
    if (r.storage() == r.dtype) {
      if (outs.back().nbytes()) downs.push_back({outs.back().raw(), src, off, outs.back().nbytes()});
      continue;
    }
    pending.push_back({outs.size() - 1, std::vector<uint8_t>(output_bytes(k))});
    if (!pending.back().bytes.empty()) downs.push_back({pending.back().bytes.data(), src, off, pending.back().bytes.size()});
  }
  dev_->download(downs);
  return outs;
}

void DeviceVariant::finish_outputs(const std::vector<size_t>& which, std::vector<Tensor>& outs,
                                   std::vector<Pending>& pending) const {
  for (Pending& p : pending) {
    const plan::TensorRef& r = sched_.outputs.at(which.at(p.index));
    outs[p.index] = plan::from_storage(p.bytes, r.storage(), r.dtype, r.dims, "output " + std::to_string(which[p.index]));
  }
  pending.clear();
}

std::vector<Tensor> DeviceVariant::run(const RunArgs& args) {
  // Every host-side check comes before anything is enqueued.
  std::set<NodeId> carried;
  for (const Carry& c : args.carry) {
    if (!leaves_.count(c.input) || !std::holds_alternative<ops::Input>(graph_.node(c.input).op))
      throw Error("device run: internal: carried node " + std::to_string(c.input) + " is not an input");
    if (c.output >= sched_.outputs.size() || std::find(kept_.begin(), kept_.end(), c.output) == kept_.end())
      throw Error("device run: internal: " + node_label(graph_.node(c.input)) + " carries output " +
                  std::to_string(c.output) + ", which the previous run did not keep");
    if (output_bytes(c.output) != leaf_bytes(c.input))
      throw Error("device run: internal: output " + std::to_string(c.output) + " and carried " +
                  node_label(graph_.node(c.input)) + " differ in size");
    if (!carried.insert(c.input).second)
      throw Error("device run: internal: " + node_label(graph_.node(c.input)) + " is carried twice");
  }
  for (size_t k : args.which)
    if (k >= sched_.outputs.size()) throw Error("device run: output index " + std::to_string(k) + " is out of range");
  for (NodeId id : inputs_)
    if (!carried.count(id)) check_bytes(id, leaf_tensor(id, args));
  check_device_tensors(args, carried);
  const bool new_params = !params_uploaded_ || args.params_generation != params_generation_;
  if (new_params)
    for (NodeId id : params_) check_bytes(id, leaf_tensor(id, args));

  carry_in(args.carry);
  kept_.clear();  // from here on a failure leaves nothing kept
  if (new_params) {
    for (NodeId id : params_) {
      const Tensor& t = leaf_tensor(id, args);
      if (!dropped_.count(id)) upload_leaf(id, t, true);
      param_uploaded(id, t);
    }
    dev_->wait();  // the host tensors may change after set_param
    staged_.clear();
    params_uploaded_ = true;
    params_generation_ = args.params_generation;
    detail::note_param_upload();
  }
  std::vector<HostToDevice> ups;
  std::vector<ExternalToDevice> ins;
  std::set<uintptr_t> producers;  // streams of device inputs and caller outputs to wait for
  for (NodeId id : inputs_) {
    if (carried.count(id)) continue;
    const Tensor& t = leaf_tensor(id, args);
    if (t.is_device()) {
      if (t.stream()) producers.insert(*t.stream());
      if (t.nbytes()) ins.push_back({leaves_.at(id), 0, t.device_data(), t.nbytes()});
    } else if (leaf_storage(id) != t.dtype()) {
      upload_leaf(id, t, false);  // converted into staged_
    } else if (t.nbytes()) {
      ups.push_back({leaves_.at(id), 0, t.raw(), t.nbytes()});
    }
  }
  for (const Tensor& o : args.out)
    if (o.stream()) producers.insert(*o.stream());
  const bool on_device = args.device_outputs || !args.out.empty();
  std::vector<Tensor> device_outs;
  if (on_device) device_outs = device_outputs(args.which, args.out);  // allocated before anything is enqueued
  for (uintptr_t s : producers) dev_->wait_for_stream(s);
  dev_->upload(ups);
  dev_->copy_in(ins);

  dev_->mark_start();
  submit();
  dev_->mark_stop();

  std::vector<Pending> pending;
  std::vector<Tensor> outs;
  if (on_device) {
    copy_outputs(args.which, device_outs);
    outs = std::move(device_outs);
  } else {
    outs = download_outputs(args.which, pending);
  }
  dev_->read_error_flag(flag_);
  try {
    dev_->wait();
  } catch (...) {
    staged_.clear();
    throw;
  }
  staged_.clear();
  detail::note_device_ms(dev_->elapsed_ms());
  if (const int err = dev_->error_flag(); err != 0) throw Error(kernel_error_message(err));
  finish_outputs(args.which, outs, pending);
  kept_.assign(args.keep.begin(), args.keep.end());
  return outs;
}

// Device inputs and outputs (RunArgs): each on this device, and stored on it in its own dtype
// (a leaf or output whose storage dtype differs is converted at the host boundary only).
void DeviceVariant::check_device_tensors(const RunArgs& args, const std::set<NodeId>& carried) const {
  const bool device_outs = args.device_outputs || !args.out.empty();
  bool any_device_input = false;
  for (NodeId id : inputs_)
    if (!carried.count(id) && leaf_tensor(id, args).is_device()) any_device_input = true;
  if (!any_device_input && !device_outs) return;
  if (!dev_->takes_device_tensors())
    throw Error("device run: internal: device tensors reached a device that takes none");
  for (NodeId id : inputs_) {
    if (carried.count(id)) continue;
    const Tensor& t = leaf_tensor(id, args);
    if (!t.is_device()) continue;
    const std::string what = "input '" + std::get<ops::Input>(graph_.node(id).op).name + "'";
    if (t.device_ordinal() != dev_->ordinal())
      throw Error("run: " + what + " is in the memory of " + device_name(t.device()) + " device " +
                  std::to_string(t.device_ordinal()) + ", but this graph runs on device " +
                  std::to_string(dev_->ordinal()) + " (RLX_CUDA_DEVICE picks it); copy it there or to the host");
    if (leaf_storage(id) != t.dtype())
      throw Error("run: " + what + " is a device tensor of " + dtype_name(t.dtype()) + ", which this device stores as " +
                  dtype_name(leaf_storage(id)) + "; pass it as a host tensor (it is converted on the way in)");
    if (t.nbytes()) dev_->check_device_memory(t.device_data(), t.nbytes(), what);
  }
  if (!device_outs) return;
  if (!args.out.empty() && args.out.size() != args.which.size())
    throw Error("run: internal: " + std::to_string(args.out.size()) + " output tensors for " +
                std::to_string(args.which.size()) + " outputs");
  for (size_t i = 0; i < args.which.size(); ++i) {
    const plan::TensorRef& r = sched_.outputs.at(args.which[i]);
    const std::string what = "output " + std::to_string(args.which[i]);
    if (r.storage() != r.dtype)
      throw Error("run: " + what + " (" + dtype_name(r.dtype) + ") is stored as " + dtype_name(r.storage()) +
                  " on this device and converted on the way to the host; ask for host outputs");
    if (args.out.empty()) continue;
    const Tensor& o = args.out[i];
    const std::string dest = "RunOptions::out[" + std::to_string(i) + "] (for " + what + ")";
    if (!o.is_device()) throw Error("run: " + dest + " is in host memory; it must be a device tensor");
    if (o.device_ordinal() != dev_->ordinal())
      throw Error("run: " + dest + " is on device " + std::to_string(o.device_ordinal()) + ", this graph runs on device " +
                  std::to_string(dev_->ordinal()));
    if (o.dtype() != r.dtype || o.shape() != r.dims)
      throw Error("run: " + dest + " is " + o.shape_info().str() + ", the output is " + dtype_name(r.dtype) +
                  dims_str(r.dims) + "; pass a tensor of that dtype and shape");
    if (o.nbytes()) dev_->check_device_memory(o.device_data(), o.nbytes(), dest);
  }
}

// The device tensors that outputs `which` go to: the caller's (RunArgs::out) or new ones.
std::vector<Tensor> DeviceVariant::device_outputs(const std::vector<size_t>& which, std::span<const Tensor> out) {
  std::vector<Tensor> outs;
  outs.reserve(which.size());
  for (size_t i = 0; i < which.size(); ++i) {
    const plan::TensorRef& r = sched_.outputs.at(which[i]);
    outs.push_back(out.empty() ? dev_->allocate_tensor(r.dtype, r.dims, "output " + std::to_string(which[i])) : out[i]);
  }
  return outs;
}

// Enqueues the device-to-device copies of outputs `which` into `outs` (device_outputs).
void DeviceVariant::copy_outputs(const std::vector<size_t>& which, const std::vector<Tensor>& outs) {
  std::vector<DeviceToExternal> copies;
  for (size_t i = 0; i < which.size(); ++i) {
    const auto [src, off] = where(sched_.outputs.at(which[i]));
    if (outs[i].nbytes()) copies.push_back({outs[i].device_data(), src, off, outs[i].nbytes()});
  }
  dev_->copy_out(copies);
}

std::vector<Tensor> DeviceVariant::kept_outputs(const std::vector<size_t>& which, bool on_device) {
  for (size_t k : which)
    if (std::find(kept_.begin(), kept_.end(), k) == kept_.end())
      throw Error("device variant: internal: output " + std::to_string(k) + " was not kept by the last run");
  bool device = on_device && dev_->takes_device_tensors();
  for (size_t k : which) device = device && sched_.outputs.at(k).storage() == sched_.outputs.at(k).dtype;
  if (device) {  // device to device into tensors rlx owns (no host round trip)
    std::vector<Tensor> outs = device_outputs(which, {});
    copy_outputs(which, outs);
    dev_->wait();
    return outs;
  }
  std::vector<Pending> pending;
  std::vector<Tensor> outs = download_outputs(which, pending);
  dev_->wait();
  finish_outputs(which, outs, pending);
  return outs;
}

}  // namespace rlx
