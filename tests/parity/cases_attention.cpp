// Attention and RoPE parity cases: every mask kind, both layouts, GQA / MQA, softcap, explicit
// scales, rows with no visible key, the prefill kernels' query-block sizes and the decode shapes
// (one or a few query rows over long KV); RoPE in both styles with partial rotation.
#include <string>
#include <vector>

#include "parity/attention_graph.h"
#include "parity/parity_cases.h"

namespace rlx::testing {

namespace {

constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};

std::string dt(DType t) { return dtype_name(t); }

void add_attention(CaseList& l) {
  const std::vector<AttnCase> cases = {
      {AttnLayout::BSHD, MaskKind::None, 2, 37, 37, 4, 4, 64},
      {AttnLayout::BSHD, MaskKind::Causal, 2, 70, 70, 8, 2, 64},
      {AttnLayout::BHSD, MaskKind::Causal, 1, 33, 90, 4, 1, 128},  // decode-style: kv longer than q
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 100, 100, 2, 2, 32, 0, 0, 17},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 20, 45, 4, 2, 48},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 19, 19, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::None, 1, 16, 16, 2, 2, 80, 0, 5.0},  // softcap, head_dim 80
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 700, 8, 2, 128},       // decode: split-KV path
      {AttnLayout::BSHD, MaskKind::Causal, 2, 5, 3, 2, 2, 16},          // rows with no visible key
      // the CUDA-core kernel's query blocks of 64 / 32 / 16 rows (head_dim <= 64 / 128 / more,
      // when batch x heads fill two waves of the GPU's multiprocessors; else 16)
      {AttnLayout::BSHD, MaskKind::Causal, 8, 70, 70, 34, 17, 64},
      {AttnLayout::BHSD, MaskKind::Causal, 2, 45, 45, 66, 66, 96},
      {AttnLayout::BHSD, MaskKind::Causal, 1, 45, 45, 2, 2, 256},
      {AttnLayout::BSHD, MaskKind::None, 2, 200, 131, 2, 2, 64},
      // Few query rows per KV head (q_len * group <= 8): the grouped split-KV decode kernel, for
      // every mask kind, both layouts, GQA groups 1..8 and head rows of 1..32 sixteen-byte pieces.
      {AttnLayout::BSHD, MaskKind::Causal, 2, 2, 513, 32, 8, 64},
      {AttnLayout::BHSD, MaskKind::None, 1, 1, 300, 4, 4, 64},
      {AttnLayout::BSHD, MaskKind::SlidingWindow, 1, 1, 400, 4, 1, 32, 0, 0, 50},
      {AttnLayout::BSHD, MaskKind::Custom, 3, 1, 200, 4, 2, 64},
      {AttnLayout::BHSD, MaskKind::Bias, 2, 1, 150, 2, 2, 64, 0.3, 0},
      {AttnLayout::BSHD, MaskKind::None, 1, 1, 333, 2, 1, 16, 0, 5.0},  // softcap, 32-byte rows
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 2048, 8, 1, 256},       // group 8, 256-wide heads
      {AttnLayout::BSHD, MaskKind::Causal, 1, 1, 7, 4, 2, 64},           // fewer keys than subgroups
  };
  for (DType t : kFloats)
    for (const AttnCase& c : cases)
      add_case(l, "attention", "attn_" + attention_case_name(c) + "_" + dt(t),
               [t, c] { return one(attention_case_graph(c, t)); });
}

void add_rope(CaseList& l) {
  for (DType t : kFloats)
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      add_case(l, "attention", std::string("rope_") + enum_name(style) + "_partial_" + dt(t), [t, style] {
        std::vector<CaseGraph> v;
        for (bool per_batch : {false, true}) {
          Graph g;
          const Value x = g.input("x", Shape::of({2, 7, 3, 16}, t));
          const std::vector<int64_t> cs = per_batch ? std::vector<int64_t>{2, 7, 6} : std::vector<int64_t>{7, 6};
          g.add_output(
              g.rope(x, g.input("cos", Shape::from(cs, t)), g.input("sin", Shape::from(cs, t)), 16, 12, style));
          v.push_back({per_batch ? "per-batch tables" : "shared tables", std::move(g), {}});
        }
        return v;
      });
}

}  // namespace

void add_attention_cases(CaseList& l) {
  add_attention(l);
  add_rope(l);
}

}  // namespace rlx::testing
