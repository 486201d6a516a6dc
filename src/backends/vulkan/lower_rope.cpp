// Rope: rotary position embedding over x (batch, seq, heads, head_dim) with cos/sin tables of
// n_rot / 2 columns per position (or per batch and position), NeoX (half split) or GPT-J
// (interleaved) pairs, partial rotation (the head_dim - n_rot tail copied). One kernel per dtype;
// every size and attribute is a push constant.
#include "backends/vulkan/kernels/rope.h"
#include "backends/vulkan/lower.h"
#include "codegen/language.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr uint64_t kWorkgroup = 256;

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

bool kind(std::string_view name) { return name == "rope"; }

bool node(const Graph& g, const Node& n, const DeviceInfo*, std::string* why) {
  const auto* op = std::get_if<ops::Rope>(&n.op);
  if (!op) return refuse(why, "not a rope node");
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (!is_float_dtype(t)) return refuse(why, std::string("Vulkan rope needs a float x, got ") + dtype_name(t));
  for (size_t i = 1; i < 3; ++i)
    if (g.shape(n.inputs.at(i)).dtype != t)
      return refuse(why, "Vulkan rope needs cos and sin of x's dtype " + std::string(dtype_name(t)));
  return true;
}

uint32_t u32(int64_t v, const std::string& what) {
  if (v < 0 || v > INT32_MAX)
    throw Error(what + ": the Vulkan rope kernel indexes with 32 bits; " + std::to_string(v) +
                " elements (2^31 or more) is too many: split the batch or use the CUDA/CPU backend");
  return static_cast<uint32_t>(v);
}

}  // namespace

const FamilyClaims kRopeClaims{kind, node};

namespace {

// A Rope step's checked sizes: items (rotated pairs and copied elements) and per head row.
struct RopeItems {
  int64_t total = 0, per_head = 0, half = 0;
};

RopeItems rope_items(const plan::Step& st) {
  const std::string what = step_label(st);
  const auto& g = std::get<plan::RopeGeom>(st.geom);
  const DType t = st.out.at(0).dtype;
  if (!is_float_dtype(t)) throw Error(what + ": Vulkan rope needs a float x, got " + dtype_name(t));
  for (size_t i = 0; i < 3; ++i) {
    if (st.in.at(i).dtype != t || st.in.at(i).storage() != t)
      throw Error(what + ": Vulkan rope needs x, cos and sin of one dtype held as itself");
    u32(st.in.at(i).numel(), what);
  }
  if (g.n_rot <= 0 || g.n_rot % 2 != 0 || g.n_rot > g.head_dim)
    throw Error(what + ": rope n_rot " + std::to_string(g.n_rot) + " must be even and in (0, head_dim = " +
                std::to_string(g.head_dim) + "]");
  RopeItems r;
  r.half = g.n_rot / 2;
  r.per_head = r.half + (g.head_dim - g.n_rot);
  const int64_t rows = g.batch * g.seq * g.heads;
  u32(rows * g.head_dim, what);
  r.total = rows * r.per_head;
  return r;
}

}  // namespace

// One dispatch for `st`, or for `first` (the q Rope paired with it by plan_rope_pairs: the same
// tables and rotation) and `st` together.
void lower_rope(LowerContext& cx, const plan::Step& st) {
  const std::string what = step_label(st);
  const plan::Step* first = cx.absorbed_producer(st);
  const plan::Step& a = first ? *first : st;
  const auto& op = std::get<ops::Rope>(a.op);
  const auto& g = std::get<plan::RopeGeom>(a.geom);
  const DType t = a.out.at(0).dtype;
  const RopeItems ra = rope_items(a);
  const RopeItems rb = first ? rope_items(st) : RopeItems{};
  if (first && (st.out.at(0).dtype != t || rb.per_head != ra.per_head || rb.half != ra.half))
    throw Error(what + ": internal: a paired rope has another dtype or rotation");
  u32(ra.total + rb.total, what);
  if (ra.total + rb.total == 0) return;

  const std::string C = glsl_compute_type(t);
  const std::string header = glsl_header({t}) + "#define PAIR " + (first ? "1" : "0") + "\n#define T " +
                             codegen::glsl_language().storage_type(t) + "\n#define C " + C + "\n#define LOAD(r) (" +
                             glsl_load(t, "(r)") + ")\n#define STORE(v) (" + glsl_store(t, "(v)") + ")\n" +
                             glsl_dtype_helpers({t});
  const std::string src = codegen::replace_all(ksrc::kRope, "HEADER", header);
  const Operand x = cx.in(a.in[0]), cs = cx.in(a.in[1]), sn = cx.in(a.in[2]), dst = cx.out(a.out.at(0));
  const size_t e = dtype_size(t);
  std::vector<Operand> bind{x, cs, sn, dst};
  std::vector<uint32_t> push{x.elem(e), cs.elem(e), sn.elem(e), dst.elem(e)};
  if (first) {
    const Operand x2 = cx.in(st.in[0]), dst2 = cx.out(st.out.at(0));
    bind.push_back(x2);
    bind.push_back(dst2);
    push.insert(push.end(), {x2.elem(e), dst2.elem(e), static_cast<uint32_t>(rb.total),
                             u32(std::get<plan::RopeGeom>(st.geom).heads, what)});
  }
  push.insert(push.end(), {static_cast<uint32_t>(ra.total), static_cast<uint32_t>(ra.per_head),
                           static_cast<uint32_t>(ra.half), static_cast<uint32_t>(g.n_rot), u32(g.head_dim, what),
                           u32(g.heads, what), u32(g.seq, what), g.per_batch ? 1u : 0u,
                           op.style == RopeStyle::NeoX ? 1u : 0u});
  cx.dispatch(Kernel{std::string(first ? "rope_pair_" : "rope_") + dtype_name(t), src}, bind, push,
              cx.groups_1d(static_cast<uint64_t>(ra.total + rb.total), kWorkgroup));
}

}  // namespace rlx::vulkan
