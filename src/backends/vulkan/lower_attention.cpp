// Attention: the flash-style kernel of kernels/attention.h (K/V tiles in shared memory, online
// softmax in f32, in double for f64 inputs; the output written once), with the keys split over
// workgroups and a combine dispatch when the query rows alone give too few workgroups (decode
// with a long KV cache).
// Every attribute is honoured: mask kinds (causal / sliding window with the KV-cache offset,
// custom keep mask of any dtype, additive bias with broadcast strides), GQA, softcap,
// score_scale (resolved in the geometry), BSHD / BHSD (strides from the geometry).
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "backends/vulkan/kernels/attention.h"
#include "backends/vulkan/lower.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr int64_t kThreads = 128;       // NT of the flash kernel
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxAccumulators = 32;  // output dims (and score columns) per thread, in registers
constexpr int64_t kTargetGroups = 256;  // workgroups below which the keys are split
constexpr int64_t kMinSplitKeys = 128;  // least keys per split
constexpr int64_t kMaxSplits = 64;
constexpr int64_t kMaxIndex = (int64_t{1} << 31) - 1;

// Query rows (BR) and keys (BC) per tile; TPR = threads per row.
struct Tiles {
  int64_t br = 0, bc = 0, tpr = 0;
};

// `es`: bytes of the compute type (4, or 8 for f64).
uint64_t tile_shared_bytes(int64_t d, int64_t br, int64_t bc, int64_t es) {
  return static_cast<uint64_t>(br * (d + 1) + bc * (d + 1) + br * (bc + 1) + kThreads) * static_cast<uint64_t>(es);
}

// The largest tiles that fit `shared` bytes and the register budget, with at most
// max(8, next power of two of `rows`) query rows (rows: a KV head's query rows, q_len * group).
std::optional<Tiles> pick_tiles(int64_t d, int64_t rows, uint64_t shared, int64_t es) {
  static constexpr int64_t kPrefs[][2] = {{64, 32}, {32, 64}, {32, 32}, {16, 64}, {16, 32},
                                          {16, 16}, {8, 32},  {8, 16}};
  int64_t cap = 8;
  while (cap < rows && cap < 64) cap *= 2;
  for (const auto& p : kPrefs) {
    const int64_t br = p[0], bc = p[1], tpr = kThreads / br;
    if (br > cap || bc % tpr != 0) continue;
    if ((d + tpr - 1) / tpr > kMaxAccumulators || bc / tpr > kMaxAccumulators) continue;
    if (tile_shared_bytes(d, br, bc, es) > shared) continue;
    return Tiles{br, bc, tpr};
  }
  return std::nullopt;
}

bool float_input(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }
// Bytes of the kernels' compute type for inputs of dtype t (f64 computes in double).
int64_t compute_bytes(DType t) { return t == DType::F64 ? 8 : 4; }

std::string def(const char* name, int64_t v) { return "#define " + std::string(name) + " " + std::to_string(v) + "\n"; }

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
// A scalar attribute as two push words: the float's bits (and 0) for float kernels, the double's
// (low, high) for f64 ones.
void push_real(std::vector<uint32_t>& push, double v, bool f64) {
  if (f64) {
    const auto b = std::bit_cast<uint64_t>(v);
    push.push_back(static_cast<uint32_t>(b));
    push.push_back(static_cast<uint32_t>(b >> 32));
  } else {
    push.push_back(std::bit_cast<uint32_t>(static_cast<float>(v)));
    push.push_back(0);
  }
}
// The compute type's defines and the math helpers (kernels/attention.h).
std::string math_prelude(bool f64) {
  std::string s = f64 ? "#define F double\n#define F_DOUBLE 1\n#define TANH_SMALL 1e-5LF\n"
                      : "#define F float\n#define F_DOUBLE 0\n#define TANH_SMALL 0.004\n";
  return s + ksrc::kAttentionMath;
}

// `float NAME(uint i)` loading element i of buffer BUF of dtype t as float.
std::string load_fn(const std::string& name, const std::string& buf, DType t) {
  return "F " + name + "(uint i) { return F(" + glsl_load(t, buf + ".data[i]") + "); }\n";
}
std::string store_fn(DType t) {
  return "void st_o(uint i, F v) { Out.data[i] = " + glsl_store(t, "v") + "; }\n";
}
// `bool keep_at(uint i)`: the key-padding mask's element i is nonzero (NaN keeps).
std::string keep_fn(DType m) {
  const std::string v = glsl_load(m, "Mk.data[i]");
  std::string e;
  if (m == DType::Bool) e = v;
  else if (m == DType::F32 || m == DType::F16 || m == DType::BF16 || m == DType::F64)
    e = "!(" + v + " == " + glsl_compute_type(m) + "(0))";
  else e = "(" + v + " != " + glsl_compute_type(m) + "(0))";
  return "bool keep_at(uint i) { return " + e + "; }\n";
}

void check_index(const plan::Step& st, const char* what, int64_t n) {
  if (n > kMaxIndex)
    throw Error(step_label(st) + ": the Vulkan attention kernel indexes with 32 bits; its " + what + " has " +
                std::to_string(n) + " elements (2^31 or more): split the batch or use the CUDA/CPU backend");
}

}  // namespace

void lower_attention(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::AttentionGeom>(st.geom);
  const DType t = st.in.at(0).dtype;
  const DeviceInfo& info = cx.info();
  if (!float_input(t))
    throw Error(step_label(st) + ": the Vulkan attention kernel takes f32, f16, bf16 or f64, not " + dtype_name(t));
  if (g.head_dim > kMaxHeadDim)
    throw Error(step_label(st) + ": the Vulkan attention kernel takes head_dim <= 256, got " +
                std::to_string(g.head_dim));
  if (g.batch == 0 || g.q_len == 0 || g.num_heads == 0) return;
  const bool f64 = t == DType::F64;
  const DType ct = f64 ? DType::F64 : DType::F32;  // the partials' type
  const bool has_mask = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias;
  check_index(st, "q", st.in[0].numel());
  check_index(st, "k", st.in[1].numel());
  check_index(st, "v", st.in[2].numel());
  check_index(st, "output", st.out.at(0).numel());
  if (has_mask) check_index(st, "mask", st.in.at(3).numel());

  const int64_t rows = g.q_len * g.group;  // query rows per KV head
  const std::optional<Tiles> tiles = pick_tiles(g.head_dim, rows, info.max_shared_bytes, compute_bytes(t));
  if (!tiles)
    throw Error(step_label(st) + ": head_dim " + std::to_string(g.head_dim) + " in " + dtype_name(t) +
                " needs more workgroup shared memory than " + info.name + "'s " +
                std::to_string(info.max_shared_bytes) + " bytes");
  const int64_t nblk = (rows + tiles->br - 1) / tiles->br;
  const int64_t bh = g.batch * g.num_kv_heads;
  check_index(st, "rows", rows);
  check_index(st, "batch x kv heads", bh);

  // Keys split over workgroups when the blocks alone are few.
  int64_t splits = 1, split_len = std::max<int64_t>(g.kv_len, 1);
  const int64_t base = nblk * bh;
  if (base < kTargetGroups && g.kv_len >= 2 * kMinSplitKeys) {
    splits = std::min({(kTargetGroups + base - 1) / base, g.kv_len / kMinSplitKeys, kMaxSplits});
    split_len = (g.kv_len + splits - 1) / splits;
    split_len = (split_len + tiles->bc - 1) / tiles->bc * tiles->bc;
    splits = (g.kv_len + split_len - 1) / split_len;
  }
  const bool split = splits > 1;
  const int64_t part_elems = splits * g.batch * g.num_heads * g.q_len * (g.head_dim + 2);
  if (split) check_index(st, "split partials", part_elems);

  // Bindings: q, k, v, out (or the partials), mask.
  const Operand q = cx.in(st.in[0]), k = cx.in(st.in[1]), v = cx.in(st.in[2]);
  const Operand out = cx.out(st.out.at(0));
  const size_t es = dtype_size(t), ps = dtype_size(ct);
  const Operand part =
      split ? cx.scratch(static_cast<size_t>(part_elems) * ps, step_label(st) + " split partials") : Operand{};
  std::vector<Operand> bind{q, k, v, split ? part : out};
  std::vector<uint32_t> push{q.elem(es), k.elem(es), v.elem(es), split ? part.elem(ps) : out.elem(es)};
  DType mt = t;
  if (has_mask) {
    mt = st.in[3].dtype;
    const Operand m = cx.in(st.in[3]);
    bind.push_back(m);
    push.push_back(m.elem(dtype_size(st.in[3].storage())));
  }
  for (const plan::AttnStrides* s : {&g.q, &g.k, &g.v, &g.out}) {
    push.push_back(u32(s->batch));
    push.push_back(u32(s->seq));
    push.push_back(u32(s->head));
  }
  push.insert(push.end(), {u32(g.batch), u32(g.q_len), u32(g.kv_len), u32(g.num_kv_heads), u32(g.group)});
  push_real(push, g.scale, f64);
  push_real(push, g.softcap, f64);
  // The mask's parameters: the window, the keep mask's batch stride, or the bias strides.
  uint32_t mp[4] = {0, 0, 0, 0};
  if (g.mask == MaskKind::SlidingWindow) mp[0] = u32(g.window);
  if (g.mask == MaskKind::Custom) mp[0] = u32(g.mask_batch_stride);
  if (g.mask == MaskKind::Bias)
    for (int i = 0; i < 4; ++i) mp[i] = u32(g.bias_strides[i]);
  push.insert(push.end(), {mp[0], mp[1], mp[2], mp[3], u32(split_len)});

  std::vector<DType> types{t};
  if (has_mask) types.push_back(mt);
  std::string src = glsl_header(types) + glsl_buffer(0, "Qb", t, true) + glsl_buffer(1, "Kb", t, true) +
                    glsl_buffer(2, "Vb", t, true) + glsl_buffer(3, "Out", split ? ct : t, false);
  if (g.mask == MaskKind::Custom) src += glsl_buffer(4, "Mk", mt, true);
  if (g.mask == MaskKind::Bias) src += glsl_buffer(4, "Bb", mt, true);
  src += "layout(push_constant) uniform PC {\n  uint off_q, off_k, off_v, off_o";
  if (has_mask) src += ", off_m";
  src += ";\n  uint qsb, qss, qsh, ksb, kss, ksh, vsb, vss, vsh, osb, oss, osh;\n"
         "  uint batch, q_len, kv_len, kv_heads, group;\n  uint scale_lo, scale_hi, softcap_lo, softcap_hi;\n"
         "  uint m0, m1, m2, m3, split_len;\n} pc;\n";
  src += f64 ? "#define SCALE packDouble2x32(uvec2(pc.scale_lo, pc.scale_hi))\n"
               "#define SOFTCAP packDouble2x32(uvec2(pc.softcap_lo, pc.softcap_hi))\n"
             : "#define SCALE uintBitsToFloat(pc.scale_lo)\n#define SOFTCAP uintBitsToFloat(pc.softcap_lo)\n";
  src += def("D", g.head_dim) + def("BR", tiles->br) + def("BC", tiles->bc) + def("NT", kThreads) +
         def("TPR", tiles->tpr) + def("MASK", static_cast<int>(g.mask)) + def("SPLIT", split);
  src += math_prelude(f64) + glsl_dtype_helpers(types) + load_fn("ld_q", "Qb", t) + load_fn("ld_k", "Kb", t) +
         load_fn("ld_v", "Vb", t);
  if (!split) src += store_fn(t);
  if (g.mask == MaskKind::Custom) src += keep_fn(mt);
  if (g.mask == MaskKind::Bias) src += load_fn("bias_at", "Bb", mt);
  src += ksrc::kAttentionFlash;

  const auto gx = static_cast<uint32_t>(std::min<int64_t>(nblk, info.max_groups[0]));
  const auto gz = static_cast<uint32_t>(std::min<int64_t>(bh, info.max_groups[2]));
  cx.dispatch(Kernel{"attention", src}, bind, push, gx, static_cast<uint32_t>(splits), gz);
  if (!split) return;

  // The combine: out[b, i, h, :] from the splits' partials.
  const std::string csrc = glsl_header({t}) + glsl_buffer(0, "P", ct, true) + glsl_buffer(1, "Out", t, false) +
                           "layout(push_constant) uniform PC {\n  uint off_p, off_o;\n"
                           "  uint osb, oss, osh, batch, heads, q_len, head_dim, splits;\n} pc;\n" +
                           math_prelude(f64) + glsl_dtype_helpers({t}) + store_fn(t) + ksrc::kAttentionCombine;
  const std::vector<uint32_t> cpush{part.elem(ps),    out.elem(es),  u32(g.out.batch), u32(g.out.seq),
                                    u32(g.out.head),  u32(g.batch),  u32(g.num_heads), u32(g.q_len),
                                    u32(g.head_dim),  u32(splits)};
  Operand part_in = part;
  part_in.write = false;
  cx.dispatch(Kernel{"attention combine", csrc}, {part_in, out}, cpush,
              cx.groups_1d(static_cast<uint64_t>(g.batch * g.num_heads * g.q_len), 1));
}

}  // namespace rlx::vulkan

namespace rlx::vulkan {
namespace {

bool kind(std::string_view name) { return name == "attention"; }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  const auto* a = std::get_if<ops::Attention>(&n.op);
  if (!a) return refuse(why, "the Vulkan attention family runs only 'attention'");
  const DType t = g.shape(n.inputs.at(0)).dtype;
  if (!float_input(t))
    return refuse(why, std::string("the Vulkan attention kernel takes f32, f16, bf16 or f64, not ") + dtype_name(t));
  if (a->head_dim > kMaxHeadDim)
    return refuse(why, "the Vulkan attention kernel takes head_dim <= 256, got " + std::to_string(a->head_dim));
  if (info && !pick_tiles(a->head_dim, 1, info->max_shared_bytes, compute_bytes(t)))
    return refuse(why, "head_dim " + std::to_string(a->head_dim) + " in " + dtype_name(t) +
                           " needs more workgroup shared memory than " +
                           info->name + "'s " + std::to_string(info->max_shared_bytes) + " bytes");
  return true;
}

}  // namespace

const FamilyClaims kAttentionClaims{kind, node};

}  // namespace rlx::vulkan
