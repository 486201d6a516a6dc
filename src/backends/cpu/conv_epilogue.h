#pragma once
// Internal to the CPU backend: a Conv step fused with the elementwise step that alone consumes
// its output (an ElementwiseRegion, Activation or Binary step: bias + BatchNorm are already in
// the conv; this adds the activation, e.g. Relu or HardSwish's Add/Max/Min/Mul/Div chain, and a
// residual Add). The executor decides the fusion once from the schedule (conv_epilogue_fusable);
// each run builds a ConvEpilogue over the consumer's tensors, and the conv kernel hands it every
// finished block of outputs while the block is in cache. The conv's own output is then never
// written: the consumer's output gets the values the two steps compute one after the other
// (the same span functions in the same order, so the same bits).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plan/schedule.h"
#include "rlx/tensor.h"

namespace rlx::cpu {

// Whether `consumer` (the step right after `conv`) can run as the conv's epilogue: f32 values
// and storage throughout, a region of Binary (add, sub, mul, div, max, min, pow) and Activation
// steps, an Activation or such a Binary; every input of the consumer is the conv's output, a
// scalar or a tensor of the output's shape; the consumer's output has the conv output's dims and
// does not overlap the conv's inputs. The single-consumer check (the conv's value read nowhere
// else, not a graph output) is the caller's. On false, `why` says what failed (tests).
bool conv_epilogue_fusable(const plan::Step& conv, const plan::Step& consumer, std::string* why = nullptr);

class ConvEpilogue {
 public:
  // `consumer`: the fused step; `ins` / `out`: its tensors for this run; `conv`: the conv's
  // output value (the inputs holding it read the conv's results instead).
  ConvEpilogue(const plan::Step& consumer, std::span<const Tensor> ins, Tensor& out, Value conv);

  // vals: the conv's results (bias included) for its output elements [offset, offset + n);
  // writes the consumer's output for those elements. Safe to call from several threads on
  // disjoint ranges.
  void apply(const float* vals, int64_t offset, int64_t n) const;

 private:
  enum class ArgKind : uint8_t { Conv, Scalar, Direct, Step };
  struct Arg {
    ArgKind kind = ArgKind::Conv;
    const float* p = nullptr;  // Scalar: the value; Direct: element 0
    int32_t step = 0;          // Step: the index of the step whose result it is
  };
  struct Instr {
    bool binary = true;  // else an Activation
    int32_t op = 0;      // BinaryKind or ActKind
    int fast = 0;        // the AVX2 block path's kind of it
    Arg a, b;
  };
  // The span functions over chunks (any step kind).
  void apply_spans(const float* vals, int64_t offset, int64_t n) const;

  std::vector<Instr> prog_;
  bool fast_ = false;       // every step runs on the AVX2 block path
  bool hardswish_ = false;  // ... and the steps are the imported HardSwish: one pass in registers
  float hs_consts_[4] = {};
  float* out_ = nullptr;
};

}  // namespace rlx::cpu
