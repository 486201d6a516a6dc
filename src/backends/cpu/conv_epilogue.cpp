// The Conv + elementwise consumer fusion of the CPU executor (conv_epilogue.h).
#include "backends/cpu/conv_epilogue.h"

#include <algorithm>

#include "backends/cpu/elementwise_core.h"
#include "backends/cpu/vec_math.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace epilogue_avx2 {
void step_block(int kind, const float* a, bool a_bc, const float* b, bool b_bc, float* dst);
void hardswish_block(const float* x, const float* c, float* out);
}
namespace {

constexpr int64_t kChunk = 256;  // elements per pass of the step chain (span path)
constexpr int64_t kBlock = 64;   // elements per pass of the AVX2 path
constexpr size_t kMaxFastSteps = 16;

bool fusable_binary(int32_t k) {
  switch (static_cast<BinaryKind>(k)) {
    case BinaryKind::Add: case BinaryKind::Sub: case BinaryKind::Mul: case BinaryKind::Div:
    case BinaryKind::Max: case BinaryKind::Min: case BinaryKind::Pow: return true;
    default: return false;
  }
}
bool fusable_activation(int32_t k) { return static_cast<ActKind>(k) != ActKind::Not; }

bool f32(const plan::TensorRef& r) { return r.dtype == DType::F32 && r.storage() == DType::F32; }

// Bytes [offset, offset + bytes) of two locations overlap. The CPU executor addresses every
// location that is not a leaf's from its one arena, so those count as one memory (buffer and
// kind aside: conservative).
bool overlap(const plan::Location& a, const plan::Location& b) {
  if (a.kind == plan::Location::Kind::Leaf || b.kind == plan::Location::Kind::Leaf) return false;
  if (a.bytes == 0 || b.bytes == 0) return false;
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

bool fail(std::string* why, const char* what) {
  if (why) *why = what;
  return false;
}

}  // namespace

bool conv_epilogue_fusable(const plan::Step& conv, const plan::Step& consumer, std::string* why) {
  if (!std::holds_alternative<ops::Conv>(conv.op)) return fail(why, "not a conv");
  if (conv.out.size() != 1 || consumer.out.size() != 1) return fail(why, "not one output");
  const plan::TensorRef& co = conv.out[0];
  for (const plan::TensorRef& r : conv.in)
    if (!f32(r)) return fail(why, "the conv is not f32");
  if (!f32(co)) return fail(why, "the conv is not f32");
  // Its output written into part of another value (absorbed into a concat, ...) must be written.
  if (co.loc.is_view) return fail(why, "the conv's output is a view");
  const plan::TensorRef& out = consumer.out[0];
  if (!f32(out) || out.dims != co.dims) return fail(why, "the consumer's output is not f32 of the conv's dims");
  if (const auto* r = std::get_if<ops::ElementwiseRegion>(&consumer.op)) {
    if (r->steps.empty()) return fail(why, "an empty region");
    for (size_t s = 0; s < r->steps.size(); ++s) {
      const ops::RegionStep& st = r->steps[s];
      const bool bin = st.kind == RegionStepKind::Binary;
      if (!bin && st.kind != RegionStepKind::Activation) return fail(why, "a region step other than binary / activation");
      if (bin ? !fusable_binary(st.op) : !fusable_activation(st.op)) return fail(why, "a region step of another kind");
      if (st.args.size() != (bin ? 2u : 1u)) return fail(why, "a region step of the wrong arity");
      for (int32_t a : st.args)
        if (a >= static_cast<int32_t>(consumer.in.size()) || (a < 0 && static_cast<size_t>(-a - 1) >= s))
          return fail(why, "a region argument out of range");
    }
  } else if (const auto* a = std::get_if<ops::Activation>(&consumer.op)) {
    if (!fusable_activation(static_cast<int32_t>(a->kind))) return fail(why, "an activation of another kind");
  } else if (const auto* b = std::get_if<ops::Binary>(&consumer.op)) {
    if (!fusable_binary(static_cast<int32_t>(b->kind))) return fail(why, "a binary op of another kind");
  } else {
    return fail(why, "the consumer is not an elementwise step");
  }
  bool reads_conv = false;
  for (const plan::TensorRef& r : consumer.in) {
    if (r.value == co.value) {
      if (r.dims != co.dims) return fail(why, "the consumer reads the conv's output through another shape");
      reads_conv = true;
      continue;
    }
    if (!f32(r)) return fail(why, "a consumer input is not f32");
    if (r.numel() != 1 && r.dims != out.dims) return fail(why, "a consumer input broadcasts");
  }
  if (!reads_conv) return fail(why, "the consumer does not read the conv's output");
  // The fused step writes the consumer's output while the conv still reads its inputs.
  for (const plan::TensorRef& r : conv.in)
    if (overlap(r.loc, out.loc)) return fail(why, "the consumer's output overlaps a conv input");
  return true;
}

ConvEpilogue::ConvEpilogue(const plan::Step& consumer, std::span<const Tensor> ins, Tensor& out, Value conv)
    : out_(out.data<float>()) {
  auto arg = [&](int32_t a) {
    Arg g;
    if (a < 0) {
      g.kind = ArgKind::Step;
      g.step = -a - 1;
      return g;
    }
    const auto i = static_cast<size_t>(a);
    if (i >= ins.size()) throw Error("conv epilogue: argument " + std::to_string(a) + " out of range");
    if (consumer.in.at(i).value == conv) return g;
    g.kind = ins[i].numel() == 1 ? ArgKind::Scalar : ArgKind::Direct;
    g.p = ins[i].data<float>();
    return g;
  };
  if (const auto* r = std::get_if<ops::ElementwiseRegion>(&consumer.op)) {
    for (const ops::RegionStep& st : r->steps) {
      Instr in;
      in.binary = st.kind == RegionStepKind::Binary;
      in.op = st.op;
      in.a = arg(st.args.at(0));
      if (in.binary) in.b = arg(st.args.at(1));
      prog_.push_back(in);
    }
  } else if (const auto* a = std::get_if<ops::Activation>(&consumer.op)) {
    Instr in;
    in.binary = false;
    in.op = static_cast<int32_t>(a->kind);
    in.a = arg(0);
    prog_.push_back(in);
  } else if (const auto* b = std::get_if<ops::Binary>(&consumer.op)) {
    Instr in;
    in.op = static_cast<int32_t>(b->kind);
    in.a = arg(0);
    in.b = arg(1);
    prog_.push_back(in);
  } else {
    throw Error("conv epilogue: the consumer is not an elementwise step");
  }
  // The AVX2 block path: Add / Sub / Mul / Div / Max / Min and Relu (step_block's kinds 0..6).
  fast_ = vec::has_avx2() && prog_.size() <= kMaxFastSteps;
  for (Instr& in : prog_) {
    if (in.binary && in.op <= static_cast<int32_t>(BinaryKind::Min)) in.fast = in.op;
    else if (!in.binary && static_cast<ActKind>(in.op) == ActKind::Relu) in.fast = 6;
    else fast_ = false;
  }
  // HardSwish as imported: Mul(x, c0), Add(., c1), Min(., c2), Max(., c3), Mul(x, .), x the conv.
  const auto is = [&](size_t s, BinaryKind k, ArgKind a, ArgKind b) {
    const Instr& in = prog_[s];
    return in.binary && in.op == static_cast<int32_t>(k) && in.a.kind == a && in.b.kind == b &&
           (a != ArgKind::Step || in.a.step + 1 == static_cast<int32_t>(s)) &&
           (b != ArgKind::Step || in.b.step + 1 == static_cast<int32_t>(s));
  };
  if (fast_ && prog_.size() == 5 && is(0, BinaryKind::Mul, ArgKind::Conv, ArgKind::Scalar) &&
      is(1, BinaryKind::Add, ArgKind::Step, ArgKind::Scalar) && is(2, BinaryKind::Min, ArgKind::Step, ArgKind::Scalar) &&
      is(3, BinaryKind::Max, ArgKind::Step, ArgKind::Scalar) && is(4, BinaryKind::Mul, ArgKind::Conv, ArgKind::Step)) {
    hardswish_ = true;
    for (size_t s = 0; s < 4; ++s) hs_consts_[s] = *prog_[s].b.p;
  }
}

void ConvEpilogue::apply(const float* vals, int64_t offset, int64_t n) const {
  int64_t done = 0;
  if (hardswish_) {
    for (; done + kBlock <= n; done += kBlock) epilogue_avx2::hardswish_block(vals + done, hs_consts_, out_ + offset + done);
  } else if (fast_ && n >= kBlock) {
    float tmp[kMaxFastSteps][kBlock];
    const size_t steps = prog_.size();
    for (; done + kBlock <= n; done += kBlock) {
      auto ptr = [&](const Arg& a, bool& bc) -> const float* {
        bc = false;
        switch (a.kind) {
          case ArgKind::Conv: return vals + done;
          case ArgKind::Direct: return a.p + offset + done;
          case ArgKind::Step: return tmp[a.step];
          case ArgKind::Scalar: bc = true; return a.p;
        }
        return nullptr;
      };
      for (size_t s = 0; s < steps; ++s) {
        const Instr& in = prog_[s];
        bool abc = false, bbc = true;
        const float* pa = ptr(in.a, abc);
        const float* pb = in.binary ? ptr(in.b, bbc) : pa;
        float* dst = s + 1 == steps ? out_ + offset + done : tmp[s];
        epilogue_avx2::step_block(in.fast, pa, abc, pb, bbc, dst);
      }
    }
  }
  if (done < n) apply_spans(vals + done, offset + done, n - done);
}

void ConvEpilogue::apply_spans(const float* vals, int64_t offset, int64_t n) const {
  thread_local std::vector<float> buf;  // one chunk per step, then one for a splatted scalar
  const size_t steps = prog_.size();
  if (buf.size() < (steps + 1) * kChunk) buf.resize((steps + 1) * kChunk);
  float* splat = buf.data() + steps * kChunk;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t cnt = std::min(kChunk, n - c0);
    auto ptr = [&](const Arg& a, int64_t& stride) -> const float* {
      stride = 1;
      switch (a.kind) {
        case ArgKind::Conv: return vals + c0;
        case ArgKind::Direct: return a.p + offset + c0;
        case ArgKind::Step: return buf.data() + static_cast<size_t>(a.step) * kChunk;
        case ArgKind::Scalar: stride = 0; return a.p;
      }
      return nullptr;
    };
    for (size_t s = 0; s < steps; ++s) {
      const Instr& in = prog_[s];
      float* dst = s + 1 == steps ? out_ + offset + c0 : buf.data() + s * kChunk;
      int64_t sa = 1, sb = 1;
      const float* pa = ptr(in.a, sa);
      if (in.binary) {
        const float* pb = ptr(in.b, sb);
        binary_span(static_cast<BinaryKind>(in.op), DType::F32, pa, sa, pb, sb, dst, cnt);
      } else {
        if (sa == 0) {
          std::fill(splat, splat + cnt, *pa);
          pa = splat;
        }
        activation_span(static_cast<ActKind>(in.op), DType::F32, pa, dst, cnt);
      }
    }
  }
}

}  // namespace rlx::cpu
