// Attention: the kernels of kernels/attention.h. attn_flash for prefill (register-tiled SIMT
// flash attention: K/V tiles in shared memory, online softmax in f32, in double for f64 inputs;
// the output written once), attn_decode for few query rows per KV head (decode: all rows of a
// GQA group in one workgroup, the keys over its invocations), each with the keys split over
// workgroups when the workgroups are otherwise few (a long KV cache), merged by a combine
// dispatch (attn_flash) or by the last split of each KV head to finish (attn_decode).
// Every attribute is honoured: mask kinds (causal / sliding window with the KV-cache offset,
// custom keep mask of any dtype, additive bias with broadcast strides), GQA, softcap,
// score_scale (resolved in the geometry), BSHD / BHSD (strides from the geometry). attn_coop
// (kernels/attention_coopmat.h) replaces attn_flash for f16 inputs (and f32 under the Fp16
// policy) on devices with VK_NV_cooperative_matrix (knob vulkan_coopmat).
#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <utility>

#include "backends/vulkan/kernels/attention.h"
#include "backends/vulkan/kernels/attention_coopmat.h"
#include "backends/vulkan/kernels/double_math.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "plan/attention_work.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

constexpr int64_t kThreads = 128;        // NT of both kernels
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxScores = 32;       // RS x CS scores per invocation (attn_flash)
constexpr int64_t kMaxAccumulators = 64; // output elements per invocation (attn_flash)
constexpr int64_t kMaxDecodeRows = 16;   // rows per KV head of attn_decode
constexpr int64_t kTargetGroups = 264;   // workgroups below which the keys are split (2 per SM of a 132-SM GPU)
constexpr int64_t kMinSplitKeys = 128;   // least keys per split of attn_flash
constexpr int64_t kMinDecodeSplitKeys = 64;  // of attn_decode
constexpr int64_t kMaxSplits = 64;

int64_t vec4s(int64_t d) { return (d + 3) / 4; }

// attn_flash's tiles: BR query rows, BC keys, TC invocations per row group (TR = NT / TC row
// groups), RS = BR / TR rows and CS = BC / TC keys per invocation; alias: V over K.
struct Tiles {
  int64_t br = 0, bc = 0, tc = 0, tr = 0, rs = 0, cs = 0, ds = 0;
  bool alias = false;
};

// Shared bytes of attn_flash; `es`: bytes of the compute type (4, or 8 for f64).
uint64_t flash_shared_bytes(int64_t d, const Tiles& t, int64_t es) {
  const int64_t row = (vec4s(d) + 1) * 4;  // a padded tile row, in elements
  const int64_t elems = t.br * row + t.bc * row * (t.alias ? 1 : 2) + t.br * (t.bc + 4) + t.br * t.tc;
  return static_cast<uint64_t>(elems * es + 4);
}

// The largest tiles that fit `shared` bytes and the register budget, with at most
// max(8, next power of two of `rows`) query rows (rows: a KV head's query rows, q_len * group).
std::optional<Tiles> pick_tiles(int64_t d, int64_t rows, uint64_t shared, int64_t es) {
  static constexpr int64_t kPrefs[][3] = {{64, 64, 8}, {64, 32, 8}, {64, 32, 4}, {64, 16, 4}, {32, 32, 8},
                                          {32, 32, 4}, {32, 16, 4}, {32, 32, 16}, {16, 32, 8}, {16, 16, 8},
                                          {16, 32, 16}, {8, 16, 16}};
  int64_t cap = 8;
  while (cap < rows && cap < 64) cap *= 2;
  for (const auto& p : kPrefs) {
    Tiles t;
    t.br = p[0], t.bc = p[1], t.tc = p[2], t.tr = kThreads / t.tc;
    if (t.br > cap || t.br % t.tr != 0 || t.bc % t.tc != 0 || t.bc % 4 != 0) continue;
    t.rs = t.br / t.tr, t.cs = t.bc / t.tc, t.ds = (vec4s(d) + t.tc - 1) / t.tc;
    if (t.rs * t.cs > kMaxScores || t.rs * t.ds * 4 > kMaxAccumulators) continue;
    for (bool alias : {false, true}) {
      t.alias = alias;
      if (flash_shared_bytes(d, t, es) <= shared) return t;
    }
  }
  return std::nullopt;
}

// Shared bytes of attn_decode for `rows` rows.
uint64_t decode_shared_bytes(int64_t d, int64_t rows, int64_t es) {
  const int64_t dv = vec4s(d), ks = kThreads / dv;
  return static_cast<uint64_t>((rows * dv * 4 + rows * kThreads + ks * dv * 4) * es);
}

// attn_coop's configuration: NW subgroups (BR = 16 NW rows), BC keys per tile, the V tile over
// the K tile (alias).
struct CoopTiles {
  int64_t nw = 0, bc = 32;  // nw 0: not used
  bool alias = false;
  bool prefetch = false;  // the next K/V tile loaded into registers during this one (not with alias)
  bool bf16 = false;      // bf16 matrices (bf16 inputs, or f32 under the Bf16 policy)
  int64_t br() const { return 16 * nw; }
  int64_t row_words(int64_t d) const { return d / 8 + 1; }
  int64_t kv_words(int64_t d) const { return std::max(br(), alias ? bc : 2 * bc) * row_words(d); }
  uint64_t shared_bytes(int64_t d) const {
    const int64_t rows = 16 * nw;
    return static_cast<uint64_t>(kv_words(d) * 16 + rows * (bc + 4) * 4 + rows * (bc / 8 + 1) * 16 + rows * 4);
  }
};

// attn_coop where the device, the knob, the dtype (f16, or f32 rounded to f16 under the Fp16
// policy; with the device's bf16 matrices bf16, or f32 under the Bf16 policy) and head_dim (a
// multiple of 16 up to 128) allow it and a configuration fits (else nw 0).
CoopTiles pick_coop(const DeviceInfo& info, bool knob, DType t, Precision prec, int64_t d) {
  if (!info.coopmat_nv || !knob || info.subgroup_size != 32 || !info.float16 || !info.subgroup_shuffle) return {};
  const bool bf16 = info.coopmat_bf16 && (t == DType::BF16 || (t == DType::F32 && prec == Precision::Bf16));
  if (!(bf16 || t == DType::F16 || (t == DType::F32 && prec == Precision::Fp16))) return {};
  if (d % 16 != 0 || d > 128) return {};
  // Measured on an H200 (vk_kernel_lab, causal b4 h32 s2048, f16): 32 keys per tile with both
  // tiles and the register prefetch, 70 TFLOP/s at head_dim 128 (16 keys: 61; no prefetch: 39;
  // 64 keys with V over K: 47) and 80 at head_dim 64 (16 keys: 66; no prefetch: 58).
  static constexpr CoopTiles kPrefs[] = {{4, 32, false, true}, {4, 16, false, true}, {4, 32, true}, {4, 16, true}};
  for (CoopTiles c : kPrefs) {
    // The prefetch splits the tile's words evenly over the invocations.
    if (c.prefetch && c.bc * (d / 8) % (c.nw * 32) != 0) c.prefetch = false;
    c.bf16 = bf16;
    if (c.nw * 32 <= info.max_invocations && c.shared_bytes(d) <= info.max_shared_bytes) return c;
  }
  return {};
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
  std::string s = f64 ? "#define F double\n#define FV dvec4\n#define F_DOUBLE 1\n#define TANH_SMALL 1e-5LF\n"
                      : "#define F float\n#define FV vec4\n#define F_DOUBLE 0\n#define TANH_SMALL 0.004\n";
  return s + (f64 ? ksrc::kDoubleMath : "") + ksrc::kAttentionMath;
}

// `F NAME(uint i)` loading element i of buffer BUF of dtype t.
std::string load_fn(const std::string& name, const std::string& buf, DType t) {
  return "F " + name + "(uint i) { return F(" + glsl_load(t, buf + ".data[i]") + "); }\n";
}
// `FV ld4_X(uint row, uint d)` (X: q, k or v): elements d..d+3 of the row starting at element
// `row` (zeros past D), from ld_X, or from buffer BUF declared as vectors of 4 when `vec` (row
// and d multiples of 4, D too).
std::string load4_fn(const std::string& x, const std::string& buf, DType t, bool vec, int64_t d) {
  const std::string name = "ld_" + x;
  std::string s = "FV ld4_" + x + "(uint row, uint d) {\n";
  if (vec) {
    const std::string raw = buf + ".data[(row + d) >> 2]";
    if (t == DType::BF16) s += "  return FV(uintBitsToFloat(uvec4(" + raw + ") << 16));\n";
    else s += "  return FV(" + raw + ");\n";
  } else {
    s += "  FV r = FV(0.0);\n  for (uint e = 0u; e < 4u; ++e)\n";
    s += d % 4 == 0 ? "    r[e] = " + name + "(row + d + e);\n" : "    if (d + e < D) r[e] = " + name + "(row + d + e);\n";
    s += "  return r;\n";
  }
  return s + "}\n";
}
// A readonly buffer of 4-vectors of dtype t (f32, f16 or bf16) at `binding`.
std::string vec_buffer(int binding, const std::string& name, DType t) {
  const char* type = t == DType::F32 ? "vec4" : t == DType::F16 ? "f16vec4" : "u16vec4";
  return "layout(std430, set = 0, binding = " + std::to_string(binding) + ") readonly buffer B" +
         std::to_string(binding) + " { " + type + " data[]; } " + name + ";\n";
}
// A readonly buffer of 16-byte words at `binding` (f16 rows read 8 elements at a time).
std::string word_buffer(int binding, const std::string& name) {
  return "layout(std430, set = 0, binding = " + std::to_string(binding) + ") readonly buffer B" +
         std::to_string(binding) + " { uvec4 data[]; } " + name + ";\n";
}
// attn_coop's `uvec4 ld8_X(uint row, uint d)`: elements d..d+7 of a row as f16 pairs, read as one
// word from buffer BUF (rows starting on words).
std::string load8_words_fn(const std::string& x, const std::string& buf) {
  return "uvec4 ld8_" + x + "(uint row, uint d) { return " + buf + ".data[(row + d) >> 3]; }\n";
}
// The same from two ld4_X reads, rounded to f16 (exact for f16 inputs; the Fp16 policy for f32),
// or as bf16 pairs (`bf16`: exact for bf16 inputs; the Bf16 policy for f32).
std::string load8_fn(const std::string& x, DType t, bool bf16) {
  const std::string r = t == DType::F16 ? "" : "rlx_round_f16";
  auto pair = [&](const std::string& v, const std::string& i) {  // elements i and i + 1 of v as one word
    const std::string lo = v + "[" + i + "]", hi = v + "[" + i + " + 1u]";
    return bf16 ? "rlx_bf16_bits(" + lo + ") | (rlx_bf16_bits(" + hi + ") << 16)"
                : "packFloat2x16(f16vec2(float16_t(" + r + "(" + lo + ")), float16_t(" + r + "(" + hi + "))))";
  };
  return "uvec4 ld8_" + x + "(uint row, uint d) {\n  const vec4 a = ld4_" + x + "(row, d), b = ld4_" + x +
         "(row, d + 4u);\n  uvec4 w;\n  for (uint i = 0u; i < 2u; ++i) {\n    w[i] = " + pair("a", "2u * i") +
         ";\n    w[i + 2u] = " + pair("b", "2u * i") + ";\n  }\n  return w;\n}\n";
}
std::string store_fn(DType t, const std::string& fn = "st_o", const std::string& buf = "Out") {
  return "void " + fn + "(uint i, F v) { " + buf + ".data[i] = " + glsl_store(t, "v") + "; }\n";
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
  plan::check_attention_index(st, what, n, "Vulkan");
}

}  // namespace

plan::DecodeAttentionLimits decode_attention_limits() { return {kMaxDecodeRows, 0}; }

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
  const int64_t es_c = compute_bytes(t);
  const bool positions = g.mask == MaskKind::Positions;
  const bool has_mask = g.mask == MaskKind::Custom || g.mask == MaskKind::Bias || positions;
  plan::check_attention_operands(st, "Vulkan");

  const int64_t rows = g.q_len * g.group;  // query rows per KV head
  const int64_t bh = g.batch * g.num_kv_heads;
  check_index(st, "rows", rows);
  check_index(st, "batch x kv heads", bh);
  // attn_decode for few rows (all in one workgroup), attn_flash otherwise.
  const bool decode = rows <= kMaxDecodeRows && decode_shared_bytes(g.head_dim, rows, es_c) <= info.max_shared_bytes;
  const CoopTiles cti =
      decode ? CoopTiles{} : pick_coop(info, cx.knobs().vulkan_coopmat(), t, cx.options().precision, g.head_dim);
  const bool coop = cti.nw > 0;
  std::optional<Tiles> tiles;
  if (!decode && !coop) {
    tiles = pick_tiles(g.head_dim, rows, info.max_shared_bytes, es_c);
    if (!tiles)
      throw Error(step_label(st) + ": head_dim " + std::to_string(g.head_dim) + " in " + dtype_name(t) +
                  " needs more workgroup shared memory than " + info.name + "'s " +
                  std::to_string(info.max_shared_bytes) + " bytes");
  }
  const int64_t br = decode ? rows : coop ? cti.br() : tiles->br;
  const int64_t nblk = (rows + br - 1) / br;

  // Keys split over workgroups when the blocks alone are few.
  int64_t splits = 1, split_len = std::max<int64_t>(g.kv_len, 1);
  const int64_t base = nblk * bh, min_keys = decode ? kMinDecodeSplitKeys : kMinSplitKeys;
  if (base < kTargetGroups && g.kv_len >= 2 * min_keys) {
    splits = std::min({(kTargetGroups + base - 1) / base, g.kv_len / min_keys, kMaxSplits});
    split_len = (g.kv_len + splits - 1) / splits;
    const int64_t unit = decode ? 16 : coop ? cti.bc : tiles->bc;
    split_len = (split_len + unit - 1) / unit * unit;
    splits = (g.kv_len + split_len - 1) / split_len;
  }
  const bool split = splits > 1;
  const int64_t part_elems = splits * g.batch * g.num_heads * g.q_len * (g.head_dim + 2);
  if (split) check_index(st, "split partials", part_elems);

  // Bindings: q, k, v, out (or the partials), mask.
  // q / k / v, or the fused projections they are slices of (read in place: plan_attention_narrows).
  Operand qkv[3] = {cx.in(st.in[0]), cx.in(st.in[1]), cx.in(st.in[2])};
  plan::AttnStrides strides[3] = {g.q, g.k, g.v};
  uint32_t starts[3] = {0, 0, 0};
  for (const plan::AttentionNarrow& an : cx.attention_narrows(st)) {
    const int64_t seq = an.port == 0 ? g.q_len : g.kv_len;
    qkv[an.port] = cx.in(an.source);
    strides[an.port] = plan::AttnStrides{seq * an.width, an.width, g.head_dim};
    starts[an.port] = u32(an.start);
  }
  // K / V joined from a cache and new rows (plan_attention_concats): the decode kernel reads the
  // two parts where they are (CAT: the second part's binding, strides and first key); any other
  // path runs the concats first. A port not joined reads its whole operand as the first part.
  const std::vector<const plan::Step*> concats = cx.attention_concats(st);
  bool cat = false;
  Operand part2[2] = {qkv[1], qkv[2]};
  plan::AttnStrides strides2[2] = {g.k, g.v};
  int64_t first2[2] = {g.kv_len, g.kv_len};
  if (!concats.empty()) {
    const size_t seq_axis = g.layout == AttnLayout::BSHD ? 1 : 2;
    const plan::AttnStrides dense = plan::attn_strides(g.layout, g.kv_len, g.num_kv_heads, g.head_dim);
    auto is_dense = [&](const plan::AttnStrides& a) {
      return a.batch == dense.batch && a.seq == dense.seq && a.head == dense.head;
    };
    cat = decode && is_dense(g.k) && is_dense(g.v);
    for (const plan::Step* c : concats) cat = cat && c->in.size() == 2 && c->in[0].dims.size() == 4;
    if (!cat) {
      for (const plan::Step* c : concats) lower_step(cx, *c);
    } else {
      for (const plan::Step* c : concats) {
        const size_t port = c->out.at(0).value == st.in[1].value ? 1 : 2;
        const int64_t n1 = c->in[0].dims[seq_axis], n2 = c->in[1].dims[seq_axis];
        qkv[port] = cx.in(c->in[0]);
        strides[port] = plan::attn_strides(g.layout, n1, g.num_kv_heads, g.head_dim);
        part2[port - 1] = cx.in(c->in[1]);
        strides2[port - 1] = plan::attn_strides(g.layout, n2, g.num_kv_heads, g.head_dim);
        first2[port - 1] = n1;
      }
    }
  }
  const Operand &q = qkv[0], &k = qkv[1], &v = qkv[2];
  const Operand out = cx.out(st.out.at(0));
  const size_t es = dtype_size(t), ps = dtype_size(ct);
  const Operand part =
      split ? cx.scratch(static_cast<size_t>(part_elems) * ps, step_label(st) + " split partials") : Operand{};
  std::vector<Operand> bind{q, k, v, split ? part : out};
  std::vector<uint32_t> push{q.elem(es) + starts[0], k.elem(es) + starts[1], v.elem(es) + starts[2],
                             split ? part.elem(ps) : out.elem(es)};
  DType mt = t;
  // The positions (MASK 5) are read as 32-bit words: an i32 each, or an i64's low word (positions
  // are below 2^31; a negative one stays negative).
  const DType pos_storage = positions ? st.in[3].storage() : DType::I32;
  if (positions && pos_storage != DType::I32 && pos_storage != DType::I64)
    throw Error(step_label(st) + ": the Vulkan attention kernels read i32 or i64 positions, not " + dtype_name(pos_storage));
  if (has_mask) {
    mt = st.in[3].dtype;
    const Operand m = cx.in(st.in[3]);
    bind.push_back(m);
    push.push_back(positions ? m.elem(4) : m.elem(dtype_size(st.in[3].storage())));
  }
  // CAT: the second parts, and a table of their offsets, strides and first keys (the push
  // constants are full on devices with the minimum 128 bytes).
  const size_t cat_binding = bind.size();
  if (cat) {
    const Operand tab = cx.table({part2[0].elem(es), part2[1].elem(es), u32(strides2[0].batch), u32(strides2[0].head),
                                  u32(strides2[1].batch), u32(strides2[1].head), u32(first2[0]), u32(first2[1])},
                                 step_label(st) + " KV parts");
    bind.insert(bind.end(), {part2[0], part2[1], tab});
  }
  // A split decode merges its partials itself (MERGE): the result, and a table of its element
  // offset and one ticket per (batch, KV head), which the merging workgroup resets.
  const bool merge = decode && split &&
                     decode_shared_bytes(g.head_dim, rows, es_c) + static_cast<uint64_t>(2 * rows * splits * es_c) <=
                         info.max_shared_bytes;
  const size_t merge_binding = bind.size();
  if (merge) {
    std::vector<uint32_t> words(static_cast<size_t>(1 + bh), 0u);
    words[0] = out.elem(es);
    Operand tickets = cx.table(words, step_label(st) + " split tickets");
    tickets.write = true;
    bind.insert(bind.end(), {out, tickets});
  }
  for (const plan::AttnStrides* s : {&std::as_const(strides[0]), &std::as_const(strides[1]), &std::as_const(strides[2]), &g.out}) {
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
  if (g.mask == MaskKind::Custom || positions) mp[0] = u32(g.mask_batch_stride);
  if (g.mask == MaskKind::Bias)
    for (int i = 0; i < 4; ++i) mp[i] = u32(g.bias_strides[i]);
  push.insert(push.end(), {mp[0], mp[1], mp[2], mp[3], u32(split_len)});

  // Q, K and V read as 4-vectors where every row starts on one (offsets, strides and head_dim
  // multiples of 4 elements, bindings aligned to the vectors).
  // Every Q/K/V row starts on a multiple of n elements: the operands' offsets and strides.
  auto rows_on = [&](uint32_t n) {
    for (int i = 0; i < 3; ++i)
      if (push[static_cast<size_t>(i)] % n != 0) return false;
    for (const plan::AttnStrides& s : strides)
      if (s.batch % n != 0 || s.seq % n != 0 || s.head % n != 0) return false;
    if (cat)
      for (int i = 0; i < 2; ++i)
        if (part2[i].elem(es) % n != 0 || strides2[i].batch % n != 0 || strides2[i].head % n != 0) return false;
    return true;
  };
  const bool vec = !f64 && g.head_dim % 4 == 0 && info.storage_alignment % (4 * es) == 0 && rows_on(4);
  // Subgroup operations: attn_decode's reductions (arithmetic), attn_flash's row reductions
  // (shuffles); not on doubles.
  const bool sg_arith = decode && !f64 && info.subgroup_arith;
  const bool shuf = coop || (!decode && !f64 && info.subgroup_shuffle && tiles->tc > 1);
  // attn_coop reads f16 rows as 16-byte words where every row starts on one.
  const bool words = coop && t == (cti.bf16 ? DType::BF16 : DType::F16) && info.storage_alignment % 16 == 0 && rows_on(8);

  std::vector<DType> types{t};
  if (coop && t != DType::F16) types.push_back(DType::F16);
  if (cti.bf16 && t != DType::BF16) types.push_back(DType::BF16);  // rlx_bf16_bits
  if (has_mask && !positions) types.push_back(mt);
  std::string src = (coop ? coopmat_directive(cx, cti.bf16) : "") + glsl_header(types, sg_arith);
  if (shuf) src += "#extension GL_KHR_shader_subgroup_basic : require\n#extension GL_KHR_shader_subgroup_shuffle : require\n";
  if (coop)
    src += "#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n"
           "#extension GL_EXT_control_flow_attributes : require\n" + std::string(kCoopmatBTypeDecl);
  if (words)
    src += word_buffer(0, "Qb") + word_buffer(1, "Kb") + word_buffer(2, "Vb");
  else if (vec)
    src += vec_buffer(0, "Qb", t) + vec_buffer(1, "Kb", t) + vec_buffer(2, "Vb", t);
  else
    src += glsl_buffer(0, "Qb", t, true) + glsl_buffer(1, "Kb", t, true) + glsl_buffer(2, "Vb", t, true);
  src += glsl_buffer(3, "Out", split ? ct : t, false, merge);
  if (g.mask == MaskKind::Custom) src += glsl_buffer(4, "Mk", mt, true);
  if (g.mask == MaskKind::Bias) src += glsl_buffer(4, "Bb", mt, true);
  if (positions) src += "layout(std430, set = 0, binding = 4) readonly buffer B4 { uint data[]; } Pos;\n";
  if (cat) {
    const int b2 = static_cast<int>(cat_binding);
    src += vec ? vec_buffer(b2, "K2b", t) + vec_buffer(b2 + 1, "V2b", t)
               : glsl_buffer(b2, "K2b", t, true) + glsl_buffer(b2 + 1, "V2b", t, true);
    src += "layout(std430, set = 0, binding = " + std::to_string(b2 + 2) + ") readonly buffer B" +
           std::to_string(b2 + 2) + " { uint data[]; } KvParts;\n";
    const char* names[] = {"OFF_K2", "OFF_V2", "K2SB", "K2SH", "V2SB", "V2SH", "K_PART", "V_PART"};
    for (int i = 0; i < 8; ++i) src += "#define CAT_" + std::string(names[i]) + " KvParts.data[" + std::to_string(i) + "]\n";
  }
  if (merge) {
    const int mb = static_cast<int>(merge_binding);
    src += glsl_buffer(mb, "Fin", t, false) + "layout(std430, set = 0, binding = " + std::to_string(mb + 1) +
           ") coherent buffer B" + std::to_string(mb + 1) + " { uint data[]; } Mrg;\n";
  }
  src += "layout(push_constant) uniform PC {\n  uint off_q, off_k, off_v, off_o";
  if (has_mask) src += ", off_m";
  src += ";\n  uint qsb, qss, qsh, ksb, kss, ksh, vsb, vss, vsh, osb, oss, osh;\n"
         "  uint batch, q_len, kv_len, kv_heads, group;\n  uint scale_lo, scale_hi, softcap_lo, softcap_hi;\n"
         "  uint m0, m1, m2, m3, split_len;\n";
  src += "} pc;\n";
  src += f64 ? "#define SCALE packDouble2x32(uvec2(pc.scale_lo, pc.scale_hi))\n"
               "#define SOFTCAP packDouble2x32(uvec2(pc.softcap_lo, pc.softcap_hi))\n"
             : "#define SCALE uintBitsToFloat(pc.scale_lo)\n#define SOFTCAP uintBitsToFloat(pc.softcap_lo)\n";
  src += def("D", g.head_dim) + def("DV", vec4s(g.head_dim)) + def("NT", kThreads) +
         def("MASK", static_cast<int>(g.mask)) + def("SPLIT", split) + def("CAT", cat);
  if (decode) {
    src += def("NR", rows) + def("SG", sg_arith) + def("MERGE", merge) + def("NSPLIT", splits);
  } else if (coop) {
    const int64_t dt = g.head_dim / 16;
    src += def("NW", cti.nw) + def("BR", cti.br()) + def("BC", cti.bc) + def("DT", dt) +
           def("CT", cti.bc / 16) + def("KV_ALIAS", cti.alias) + def("KVW", cti.kv_words(g.head_dim)) +
           def("V_OFF", cti.alias ? 0 : cti.bc * cti.row_words(g.head_dim)) + def("PREFETCH", cti.prefetch) +
           def("PF", cti.bc * (g.head_dim / 8) / (32 * cti.nw)) + def("BF16M", cti.bf16);
    src += "#define FOR_DT(X)";
    for (int64_t d = 0; d < dt; ++d) src += " X(" + std::to_string(d) + "u)";
    src += "\n#define STORE_O";
    for (int64_t d = 0; d < dt; ++d)
      src += " store_o(o[" + std::to_string(d) + "], " + std::to_string(d) + "u, rid, sg, lane, b, kvh, R0, nrows, heads);";
    src += "\n";
  } else {
    src += def("BR", tiles->br) + def("BC", tiles->bc) + def("TR", tiles->tr) + def("TC", tiles->tc) +
           def("RS", tiles->rs) + def("CS", tiles->cs) + def("DS", tiles->ds) + def("KV_ALIAS", tiles->alias) +
           def("SHUF", shuf);
  }
  src += math_prelude(f64) + glsl_dtype_helpers(types);
  if (words) {
    src += load8_words_fn("q", "Qb") + load8_words_fn("k", "Kb") + load8_words_fn("v", "Vb");
  } else {
    if (!vec) src += load_fn("ld_q", "Qb", t) + load_fn("ld_k", "Kb", t) + load_fn("ld_v", "Vb", t);
    src += load4_fn("q", "Qb", t, vec, g.head_dim) + load4_fn("k", "Kb", t, vec, g.head_dim) +
           load4_fn("v", "Vb", t, vec, g.head_dim);
    if (cat) {
      if (!vec) src += load_fn("ld_k2", "K2b", t) + load_fn("ld_v2", "V2b", t);
      src += load4_fn("k2", "K2b", t, vec, g.head_dim) + load4_fn("v2", "V2b", t, vec, g.head_dim);
    }
    if (coop)
      for (const char* x : {"q", "k", "v"}) src += load8_fn(x, t, cti.bf16);
  }
  if (!split) src += store_fn(t);
  if (merge) src += store_fn(t, "st_fin", "Fin");
  if (g.mask == MaskKind::Custom) src += keep_fn(mt);
  if (g.mask == MaskKind::Bias) src += load_fn("bias_at", "Bb", mt);
  if (positions)  // element e of the positions; off_m counts their 32-bit words
    src += std::string("int pos_at(uint e) { return int(Pos.data[pc.off_m + ") +
           (pos_storage == DType::I64 ? "2u * e" : "e") + "]); }\n";
  src += ksrc::kAttentionScore;
  src += decode ? ksrc::kAttentionDecode : coop ? ksrc::kAttentionCoopNV : ksrc::kAttentionFlash;

  const auto gx = static_cast<uint32_t>(std::min<int64_t>(nblk, info.max_groups[0]));
  const auto gz = static_cast<uint32_t>(std::min<int64_t>(bh, info.max_groups[2]));
  cx.dispatch(Kernel{decode ? "attention decode" : !coop ? "attention" : cti.bf16 ? "attention coopmat bf16" : "attention coopmat", src}, bind, push, gx,
              static_cast<uint32_t>(splits), gz);
  if (!split || merge) return;

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
