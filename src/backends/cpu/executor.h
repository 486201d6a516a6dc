#pragma once
// The CPU executor: runs a graph whose shapes are all static through its plan::Schedule,
// step by step, with every intermediate value placed in one arena by the plan's MemoryPlan
// (slots reused by liveness, views for Reshape/StopGradient/contiguous Narrow, in-place
// elementwise outputs). If/While bodies run through nested executors, one per subgraph.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/kernels.h"
#include "plan/schedule.h"
#include "rlx/graph.h"
#include "rlx/tensor.h"

namespace rlx::cpu {

// Called after each step with the tensors the kernel read and wrote (tests use it to check
// where values live).
using StepHook = std::function<void(const plan::Step&, std::span<const Tensor> in, std::span<const Tensor> out)>;

// The per-step CPU profile (`rlx run --profile --device cpu`): while on, every run of a
// top-level executor adds each step's wall time to the profile under its op kind (a control-flow
// step's time includes its bodies, whose steps are not counted again). Registered as the CPU's
// device profile (runtime/device_profile.h), so take_device_profile(Device::Cpu) prints the table.
void set_step_profile(bool on);
bool step_profile_on();

// Bytes the CPU backend copied whole since the process started: run outputs cloned for the
// caller, inputs copied before a step writes over them (MemoryPlan::written_inputs), and the
// caches CacheWrite copies because it cannot write them in place. Tests read it to check that
// a decode step's copies do not grow with the KV cache.
uint64_t copied_bytes();
void note_copied_bytes(size_t n);

class Executor {
 public:
  // `g` must be verified and fully static.
  explicit Executor(Graph g, const plan::PlanOptions& options = {});

  // leaves: a tensor for every Input and Param node, by node id (borrowed, not modified, except
  // the donated ones below).
  // Returns the graph outputs listed in `which` (owning copies), in that order.
  // `outer_params` resolves Param nodes of subgraphs that are not in the subgraph's own weights.
  // Inputs the plan writes over (MemoryPlan::written_inputs, PlanOptions::write_inputs) are
  // written in place when listed in `donated` (the caller gives their bytes up: carried state
  // that nothing else holds), else copied first. An output that is such an input's whole bytes
  // is returned as that tensor (no copy; it shares the donated or copied storage).
  std::vector<Tensor> run(const std::unordered_map<NodeId, Tensor>& leaves, const std::vector<size_t>& which,
                          const std::map<std::string, Tensor>* outer_params = nullptr,
                          const std::set<NodeId>* donated = nullptr);

  const Graph& graph() const { return graph_; }
  const plan::Schedule& schedule() const { return schedule_; }
  size_t arena_bytes() const { return static_cast<size_t>(schedule_.memory.arena_bytes); }
  const uint8_t* arena() const { return arena_; }
  // The params generation of the next runs (RunArgs::params_generation): kernels rebuild what
  // they derived from a Param (packed conv weights) when it changes.
  void set_params_generation(uint64_t g) { params_generation_ = g; }
  // While a hook is set, every step runs on its own (no conv epilogue fusion).
  void set_step_hook(StepHook hook) { hook_ = std::move(hook); }
  // Conv + elementwise consumer fusion (conv_epilogue.h), on by default; tests compare both.
  void set_conv_fusion(bool on) { conv_fusion_ = on; }
  // DequantMatMul from weights repacked once (quant_pack.h; the cpu_pack_quant knob), on by default.
  void set_pack_quant(bool on) { pack_quant_ = on; }
  // The steps whose next step runs as their epilogue (by step index).
  const std::vector<bool>& conv_epilogue_steps() const { return fuse_next_; }

 private:
  void plan_conv_epilogues();
  std::vector<Tensor> run_subgraph(const Graph& sub, const std::vector<Tensor>& inputs,
                                   const std::map<std::string, Tensor>* outer_params);

  Graph graph_;
  plan::PlanOptions options_;
  plan::Schedule schedule_;
  std::unique_ptr<uint8_t[]> arena_storage_;
  uint8_t* arena_ = nullptr;
  std::map<const Graph*, std::unique_ptr<Executor>> sub_executors_;
  StepHook hook_;
  std::vector<bool> fuse_next_;  // step i runs step i + 1 as its epilogue
  bool conv_fusion_ = true;
  bool pack_quant_ = true;
  std::vector<std::unique_ptr<StepCache>> weight_cache_;  // by step; null: nothing kept
  uint64_t params_generation_ = 0;
  bool nested_ = false;  // a subgraph's executor (its steps are inside its parent's step time)
};

}  // namespace rlx::cpu
