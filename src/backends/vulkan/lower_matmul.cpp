// MatMul, FusedMatMulBiasAct and GroupedMatMul on Vulkan (kernels/matmul.h, matmul_coopmat.h).
//
// Products of at most 4 rows of A against one shared row-major B (decode) run on a GEMV kernel,
// split over K when the columns alone give too few workgroups (partial sums, then a second
// pass): the vector GEMV (16-byte loads of B) for f32/f16/bf16 where n and B's offset allow,
// else the element GEMV. Everything else runs on a tiled GEMM: the cooperative-matrix one
// (VK_NV_cooperative_matrix, knob vulkan_coopmat) for f16 operands where the device has it,
// else the shared-memory SIMT GEMM (128 x 128 tiles for large f32-accumulated products). The FusedMatMulBiasAct
// epilogue (bias, activation, residual) runs inside the kernel that stores the result, as the
// shared elementwise chain spelled by the GLSL printer, with the CPU oracle's rounding: floats,
// f64 and integers store the product in their dtype and then run each step in it (integers
// wrap), f16/bf16 run the steps on the f32 accumulator and round once at the store
// (docs/passes.md). Accumulation: f32 for f32/f16/bf16, double for f64, 32-bit wrapping for
// integers up to 32 bits and 64-bit for i64 (the low bits of the CPU's 64-bit wrapping sum).
// Under the Fp16 / Bf16 precision policy the operands of f32 products are rounded to the half
// type as they are loaded (f32 accumulation and result, as on CUDA); Tf32 computes in full f32.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/vulkan/kernels/matmul.h"
#include "backends/vulkan/kernels/matmul_coopmat.h"
#include "backends/vulkan/lower.h"
#include "backends/vulkan/spirv_coopmat.h"
#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/gpu_claims.h"
#include "plan/matmul_work.h"
#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

// The accumulation dtype of a product of `t`.
DType acc_dtype(DType t) {
  if (t == DType::F64) return DType::F64;
  if (is_float(t)) return DType::F32;
  return dtype_size(t) == 8 ? DType::I64 : DType::I32;
}

// The dtype the epilogue's steps compute in: the f32 accumulator for f16/bf16, else t.
DType epilogue_dtype(DType t) { return plan::matmul_epilogue_dtype(t); }

// ---- claims ----

bool kind(std::string_view name) { return plan::matmul_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  (void)info;
  return plan::matmul_claims_node(codegen::glsl_language(), "Vulkan", g, n, why);
}

// ---- kernel assembly ----

// The bindings and push constants of one kernel in the kernel convention's order: one element
// offset `pc.o_<NAME>` per binding, then the parameters `pc.<name>`.
class KernelArgs {
 public:
  explicit KernelArgs(std::string what) : what_(std::move(what)) {}

  void buffer(const std::string& name, DType t, const Operand& op, bool readonly) {
    decl_ += glsl_buffer(static_cast<int>(ops_.size()), name, t, readonly);
    add(name, op, dtype_size(t));
  }
  // A buffer written and read by different workgroups of one dispatch (not cached per SM).
  void coherent_buffer(const std::string& name, DType t, const Operand& op) {
    decl_ += glsl_buffer(static_cast<int>(ops_.size()), name, t, false, true);
    add(name, op, dtype_size(t));
  }
  // An f32 buffer as 16-byte words (uvec4: glslang 12 stores a cooperative matrix to uint vectors,
  // not vec4), written and read by different invocations of one dispatch.
  void coherent_vec4_buffer(const std::string& name, const Operand& op) {
    const std::string b = std::to_string(ops_.size());
    decl_ += "layout(std430, set = 0, binding = " + b + ") coherent buffer B" + b + " { uvec4 data[]; } " + name + ";\n";
    add(name, op, 16);
  }
  // A buffer of 32-bit words of GLSL type `type` (the error flag, an offset table).
  void words(const std::string& name, const std::string& type, const Operand& op, bool readonly) {
    const std::string b = std::to_string(ops_.size());
    decl_ += "layout(std430, set = 0, binding = " + b + ") " + (readonly ? "readonly " : "") + "buffer B" + b + " { " +
             type + " data[]; } " + name + ";\n";
    add(name, op, 4);
  }
  // B as 16-byte vectors (uvec4): the operand must start on a 16-byte boundary of its window.
  void vec4_buffer(const std::string& name, const Operand& op) {
    const std::string b = std::to_string(ops_.size());
    decl_ += "layout(std430, set = 0, binding = " + b + ") readonly buffer B" + b + " { uvec4 data[]; } " + name + ";\n";
    add(name, op, 16);
  }
  void param(const std::string& name, int64_t v) {
    if (v < 0 || v > static_cast<int64_t>(UINT32_MAX))
      throw Error(what_ + ": internal: kernel parameter " + name + " = " + std::to_string(v) + " does not fit 32 bits");
    names_.push_back(name);
    values_.push_back(static_cast<uint32_t>(v));
  }
  std::string source() const {
    std::string s = decl_ + "layout(push_constant) uniform Push {";
    for (const std::string& n : names_) s += " uint " + n + ";";
    return s + " } pc;\n";
  }
  std::vector<uint32_t> push(const DeviceInfo& info) const {
    if (values_.size() * 4 > info.max_push_bytes)
      throw Error(what_ + ": internal: a matmul kernel needs " + std::to_string(values_.size() * 4) +
                  " bytes of push constants, above the device's " + std::to_string(info.max_push_bytes));
    return values_;
  }
  const std::vector<Operand>& operands() const { return ops_; }

 private:
  void add(const std::string& name, const Operand& op, size_t elem_bytes) {
    ops_.push_back(op);
    names_.insert(names_.begin() + static_cast<std::ptrdiff_t>(ops_.size() - 1), "o_" + name);
    values_.insert(values_.begin() + static_cast<std::ptrdiff_t>(ops_.size() - 1), op.elem(elem_bytes));
  }
  std::string what_;
  std::string decl_;
  std::vector<Operand> ops_;
  std::vector<std::string> names_;
  std::vector<uint32_t> values_;
};

// What every matmul kernel of one step shares: dtypes, operand rounding and the epilogue.
struct Product {
  DType t = DType::F32;    // A, B, C (and bias, residual)
  DType acc = DType::F32;  // accumulation
  DType round_ab = DType::F32;  // F16 / BF16: f32 operands rounded to it on load (precision policy)
  int64_t n = 0;
  int64_t bias_len = 0;  // 0, 1 (scalar) or n (per column)
  std::optional<ActKind> act;
  const plan::TensorRef* bias = nullptr;
  const plan::TensorRef* residual = nullptr;
};

// `ACC name(uint i)`: element i of buffer `buf` in the accumulation type.
std::string load_fn(const std::string& name, const std::string& buf, const Product& p) {
  std::string v = glsl_load(p.t, buf + ".data[i]");
  // By the bits (codegen's rounding helper): packHalf2x16's rounding is implementation-defined,
  // and NVIDIA's compiler folds float(float16_t(x)) away.
  if (p.round_ab != DType::F32) v = codegen::glsl_language().round(p.round_ab, v);
  return "ACC " + name + "(uint i) { return ACC(" + v + "); }\n";
}

// Binds C, the bias and the residual (in this order) and returns `rlx_epilogue`.
std::string bind_epilogue(LowerContext& cx, const plan::Step& st, const Product& p, KernelArgs& args,
                          codegen::Helpers& h) {
  args.buffer("C", p.t, cx.out(st.out.at(0)), false);
  if (p.bias) args.buffer("BIAS", p.t, cx.in(*p.bias), true);
  if (p.residual) args.buffer("RES", p.t, cx.in(*p.residual), true);
  const DType e = epilogue_dtype(p.t);
  const std::string E = glsl_compute_type(e);
  std::string s = "void rlx_epilogue(uint o, uint col, ACC acc) {\n";
  s += "  const " + E + " x0 = " + (is_int(p.t) ? glsl_compute_type(p.t) + "(acc)" : std::string("acc")) + ";\n";
  std::vector<std::string> ins{"x0"};
  if (p.bias) {
    ins.push_back("x" + std::to_string(ins.size()));
    s += "  const " + E + " " + ins.back() + " = " +
         glsl_load(p.t, std::string("BIAS.data[pc.o_BIAS + ") + (p.bias_len == 1 ? "0u" : "col") + "]") + ";\n";
  }
  if (p.residual) {
    ins.push_back("x" + std::to_string(ins.size()));
    s += "  const " + E + " " + ins.back() + " = " + glsl_load(p.t, "RES.data[pc.o_RES + o]") + ";\n";
  }
  std::string result = "x0";
  const codegen::ElementwisePlan plan =
      plan::matmul_epilogue_plan(p.t, p.bias != nullptr, p.act, p.residual != nullptr);
  if (!plan.steps.empty()) {
    const codegen::ChainCode code = codegen::chain_code(
        codegen::glsl_language(), plan, ins,
        [](const std::string& type, const std::string& name) { return "const " + type + " " + name; }, h);
    for (const std::string& line : code.lines) s += "  " + line + "\n";
    result = code.result;
  }
  return s + "  C.data[pc.o_C + o] = " + glsl_store(p.t, result) + ";\n}\n";
}

std::string flag(bool b) { return b ? "1" : "0"; }

// The whole shader: header, defines, bindings and push constants, helpers, functions, body.
std::string shader(const std::vector<DType>& dtypes, const std::string& defines, const KernelArgs& args,
                   const codegen::Helpers& h, const std::string& functions, const char* body) {
  return glsl_header(dtypes) + defines + args.source() + h.source() + functions + body;
}

std::string acc_defines(DType acc, uint32_t nt) {
  return "#define ACC " + glsl_compute_type(acc) + "\n#define NT " + std::to_string(nt) + "u\n" +
         (is_float(acc) ? "#define MAD(c, a, b) fma(a, b, c)\n" : "#define MAD(c, a, b) ((c) + (a) * (b))\n") +
         "layout(local_size_x = " + std::to_string(nt) + ") in;\n";
}

uint32_t clamp_groups(int64_t g, uint32_t max) { return static_cast<uint32_t>(std::clamp<int64_t>(g, 1, max)); }

// ---- GEMM ----

// Per batch item, the element offsets of its A and B (batch dims that do not collapse to one
// stride), interleaved.
std::vector<uint32_t> batch_table(const plan::MatMulGeom& g) {
  std::vector<uint32_t> words;
  words.reserve(static_cast<size_t>(2 * g.batch));
  for (int64_t i = 0; i < g.batch; ++i) {
    int64_t t = i, oa = 0, ob = 0;
    for (size_t d = g.batch_dims.size(); d-- > 0;) {
      const int64_t idx = t % g.batch_dims[d];
      t /= g.batch_dims[d];
      oa += idx * g.a_batch_strides[d];
      ob += idx * g.b_batch_strides[d];
    }
    words.push_back(static_cast<uint32_t>(oa));
    words.push_back(static_cast<uint32_t>(ob));
  }
  return words;
}

void gemm_params(KernelArgs& args, const plan::MatMulGeom& g, bool strided) {
  args.param("m", g.m);
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("batch", g.batch);
  args.param("lda", g.lda);
  args.param("ldb", g.ldb);
  args.param("sa", strided ? g.a_stride : 0);
  args.param("sb", strided ? g.b_stride : 0);
}

// The tile configuration of the cooperative-matrix GEMM: WM x WN subgroups of 32, each TMC x TNC
// accumulators of 16 x 16, K slices BK deep.
struct CoopShape {
  uint32_t wm, wn, tmc, tnc, bk = 32;
  uint32_t nt() const { return wm * wn * 32; }
  uint32_t bm() const { return wm * tmc * 16; }
  uint32_t bn() const { return wn * tnc * 16; }
  size_t shared_bytes() const { return (bm() * (bk + 8) + bk * (bn() + 8)) * 2 + wm * wn * 256 * 4; }
};
// 128 x 128 tiles (4 subgroups of 64 x 64: 138 TFLOP/s at 4096^3 f16 on an H200, against 106 with
// 8 subgroups of 64 x 32); 64 x 64 (4 subgroups of 32 x 32) when the large tiles would leave most
// of a large GPU's 132 SMs idle; 32 x 32 tiles 128 deep (4 subgroups of 16 x 16) when even those
// would. A product of few tiles is a chain of K slices, each a round trip to memory (about 0.36
// us on an H200 with the data in L2, more from DRAM) for a few products: 4x the tiles and 4x the
// depth ran BERT-base b1 (128-row products) in 1.26 instead of 2.12 ms.
constexpr CoopShape kCoopLarge{2, 2, 4, 4}, kCoopSmall{2, 2, 2, 2}, kCoopThin{2, 2, 1, 1, 128};

// Workgroups that fill a large GPU (an H100 / H200 has 132 SMs).
constexpr int64_t kCoopFill = 132;

CoopShape default_coop_shape(const plan::MatMulGeom& g) {
  auto tiles = [&](int64_t side) { return ((g.m + side - 1) / side) * ((g.n + side - 1) / side) * g.batch; };
  return tiles(128) >= kCoopFill ? kCoopLarge : tiles(64) >= kCoopFill ? kCoopSmall : kCoopThin;
}

// The tile of knob vulkan_gemm_tile ('wm,wn,tmc,tnc,bk'), or nullopt for auto; rlx::Error naming
// the knob when malformed.
std::optional<CoopShape> coop_shape_knob(const ResolvedKnobs& knobs) {
  const std::string& spec = knobs.vulkan_gemm_tile();
  if (spec.empty()) return std::nullopt;
  int v[5] = {0, 0, 0, 0, 0};
  char tail = 0;
  const bool parsed = std::sscanf(spec.c_str(), "%d,%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &v[4], &tail) == 5;
  const bool ok = parsed && v[0] >= 1 && v[0] <= 8 && v[1] >= 1 && v[1] <= 8 && v[0] * v[1] <= 32 && v[2] >= 1 &&
                  v[2] <= 8 && v[3] >= 1 && v[3] <= 8 && (v[4] == 16 || v[4] == 32 || v[4] == 64 || v[4] == 128 || v[4] == 256);
  if (!ok)
    throw Error(knobs.origin("vulkan_gemm_tile") + "='" + spec +
                "' is not '<wm>,<wn>,<tmc>,<tnc>,<bk>' with wm, wn, tmc, tnc in 1..8 (wm * wn at most 32) and bk "
                "16/32/64/128/256 (e.g. '2,2,4,4,32'); unset it for the default tile");
  const CoopShape cs{static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1]), static_cast<uint32_t>(v[2]),
                     static_cast<uint32_t>(v[3]), static_cast<uint32_t>(v[4])};
  // Every invocation stages whole 8-element chunks of both tiles.
  if ((cs.bm() * cs.bk / 8) % cs.nt() != 0 || (cs.bk * cs.bn() / 8) % cs.nt() != 0)
    throw Error(knobs.origin("vulkan_gemm_tile") + "='" + spec + "': the " + std::to_string(cs.bm()) + " x " +
                std::to_string(cs.bk) + " and " + std::to_string(cs.bk) + " x " + std::to_string(cs.bn()) +
                " slices do not split into 8-element chunks evenly over its " + std::to_string(cs.nt()) +
                " invocations");
  return cs;
}

// `void name(uint gi, uint valid, out STG h[8])` of kGemmCoopNV for operand `buf`: f16 values, or
// bf16 bits (`bits`: bf16 operands as they are, f32 ones rounded to bf16 under the Bf16 policy).
std::string load8_fn(const std::string& name, const std::string& buf, const std::string& load, const Product& p,
                     bool vec, bool bits) {
  const std::string stg = bits ? "uint16_t" : "float16_t";
  std::string s = "void " + name + "(uint gi, uint valid, out " + stg + " h[8]) {\n";
  if (!vec) {
    const std::string raw = "(pc.o_" + buf + " + gi + i)";
    const std::string v = !bits ? "float16_t(" + load + raw + ")"
                          : p.t == DType::BF16 ? buf + ".data[pc.o_" + buf + " + gi + i]"
                                               : "uint16_t(rlx_bf16_bits(" + load + raw + "))";
    return s + "  for (uint i = 0u; i < 8u; ++i) h[i] = i < valid ? " + v + " : " + stg + "(0);\n}\n";
  }
  if (p.t == DType::F16 || p.t == DType::BF16) {
    const std::string pair = bits ? "    h[2u * i] = uint16_t(w[i] & 0xffffu);\n    h[2u * i + 1u] = uint16_t(w[i] >> 16);\n"
                                  : "    const f16vec2 v = unpackFloat2x16(w[i]);\n    h[2u * i] = v.x;\n"
                                    "    h[2u * i + 1u] = v.y;\n";
    return s + "  uvec4 w = uvec4(0u);\n  if (valid != 0u) w = " + buf + ".data[pc.o_" + buf +
           " + gi / 8u];\n  for (uint i = 0u; i < 4u; ++i) {\n" + pair + "  }\n}\n";
  }
  // f32 operands rounded to f16 / bf16 by the bits (the Fp16 / Bf16 policy), then converted exactly.
  auto at = [&](const std::string& w) {
    return bits ? "uint16_t(rlx_bf16_bits(uintBitsToFloat(" + w + ")))"
                : "float16_t(rlx_round_f16(uintBitsToFloat(" + w + ")))";
  };
  return s + "  uvec4 w0 = uvec4(0u), w1 = uvec4(0u);\n  if (valid != 0u) {\n    w0 = " + buf + ".data[pc.o_" + buf +
         " + gi / 4u];\n    w1 = " + buf + ".data[pc.o_" + buf + " + gi / 4u + 1u];\n  }\n" +
         "  for (uint i = 0u; i < 4u; ++i) {\n    h[i] = " + at("w0[i]") + ";\n    h[i + 4u] = " + at("w1[i]") +
         ";\n  }\n}\n";
}

// The second pass of a split-K product (GEMV, cooperative-matrix GEMM): the `splits` partial sums
// of each of rows * n outputs added, through the epilogue.
void add_split_sum(LowerContext& cx, const plan::Step& st, const Product& p, Operand partials, int64_t rows,
                   int64_t n, int64_t splits) {
  constexpr uint32_t kSumGroup = 256;
  KernelArgs sum(step_label(st));
  partials.write = false;
  sum.buffer("P", p.acc, partials, true);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  const std::string epi = bind_epilogue(cx, st, p, sum, h);
  sum.param("rows", rows);
  sum.param("n", n);
  sum.param("splits", splits);
  const Kernel k{"matmul_splitk_sum", shader({p.t, p.acc}, acc_defines(p.acc, kSumGroup), sum, h, epi, ksrc::kSplitSum)};
  cx.dispatch(k, sum.operands(), sum.push(cx.info()), cx.groups_1d(static_cast<uint64_t>(rows * n), kSumGroup));
}

// The workgroup-scope GEMM (kGemmCoopWg): 128 x 256 tiles 64 deep on 256 invocations, for
// products whose tiles lie inside the operands (M, N, K multiples of the tile: no bounds checks
// in these loads), A untransposed, both operands 16-byte words, where the device lists
// workgroup-scope products of the operands' type into f32 for 256 invocations at granularities
// dividing the tile; and only for large products (three waves of tiles on a 132-SM GPU, K at
// least 2048): on an H200 it runs 4096^3 / 8192^3 at 243-275 TFLOP/s where the subgroup kernel
// runs 233-256, but BERT-base b32's and Llama prefill 512's products (96-384 tiles, K 768-2048)
// 1.5x / 1.03x slower (docs/backends/vulkan.md). False where any of that fails.
constexpr uint32_t kWgM = 128, kWgN = 256, kWgK = 64, kWgThreads = 256;

bool lower_gemm_coop_wg(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p,
                        bool bits) {
  const DeviceInfo& info = cx.info();
  if (!info.coopmat2_workgroup || info.coopmat2_max_workgroup < kWgThreads || info.max_invocations < kWgThreads) return false;
  if (!(bits ? p.t == DType::BF16 : p.t == DType::F16 && info.coopmat_khr_f16 && cx.knobs().vulkan_coopmat_khr()))
    return false;
  constexpr uint32_t kF16 = 0, kF32 = 1, kBf16 = 1000141000, kWorkgroup = 2;
  const uint32_t comp = bits ? kBf16 : kF16;
  bool listed = false;
  for (const DeviceInfo::FlexShape& f : info.coopmat2_shapes)
    listed = listed || (f.scope == kWorkgroup && f.invocations == kWgThreads && f.a == comp && f.b == comp &&
                        f.c == kF32 && f.result == kF32 && f.m > 0 && f.n > 0 && f.k > 0 && kWgM % f.m == 0 &&
                        kWgN % f.n == 0 && kWgK % f.k == 0);
  if (!listed || g.trans_a || g.m % kWgM != 0 || g.n % kWgN != 0 || g.k % kWgK != 0) return false;
  if (g.a_stride < 0 || g.b_stride < 0) return false;  // a batch offset table: the subgroup kernel
  if (g.lda >= (int64_t{1} << 31) || g.ldb >= (int64_t{1} << 31) || g.k >= (int64_t{1} << 31)) return false;
  const int64_t tiles = (g.m / kWgM) * (g.n / kWgN) * g.batch;
  if (tiles < 3 * kCoopFill || g.k < 2048 || g.batch * g.m * g.n >= (int64_t{1} << 30)) return false;
  if (g.m / kWgM > info.max_groups[1] || g.n / kWgN > info.max_groups[0] || g.batch > info.max_groups[2]) return false;
  const Operand a = cx.in(st.in.at(0)), b = cx.in(st.in.at(1));
  auto words = [](const Operand& op, int64_t ld, int64_t stride) { return ld % 8 == 0 && stride % 8 == 0 && op.skip % 16 == 0; };
  if (!words(a, g.lda, g.a_stride) || !words(b, g.ldb, g.b_stride)) return false;
  const std::string what = step_label(st);
  KernelArgs args(what);
  args.vec4_buffer("A", a);
  args.vec4_buffer("B", b);
  Operand acc = cx.scratch(static_cast<size_t>(g.batch * g.m * g.n) * 4, what + " accumulators");
  args.coherent_vec4_buffer("P", acc);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  const std::string epi = bind_epilogue(cx, st, p, args, h);
  gemm_params(args, g, true);
  auto u = [](uint32_t v) { return std::to_string(v) + "u"; };
  const std::string defines =
      "#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n"
      "#define ACC float\nlayout(local_size_x = " + std::to_string(kWgThreads) + ") in;\n#define NT " + u(kWgThreads) +
      "\n#define BM " + u(kWgM) + "\n#define BN " + u(kWgN) + "\n#define BK " + u(kWgK) + "\n#define TRANS_B " +
      flag(g.trans_b) + "\n#define KD " + u(static_cast<uint32_t>(g.k)) + "\n#define LDA " +
      u(static_cast<uint32_t>(g.lda)) + "\n#define LDB " + u(static_cast<uint32_t>(g.ldb)) + "\n";
  std::vector<DType> types{p.t, DType::F32, DType::F16};
  const std::string src = coopmat_directive(cx, bits) + shader(types, defines, args, h, epi, ksrc::kGemmCoopWg);
  const Kernel k{bits ? "matmul_gemm_coopmat_wg_bf16" : "matmul_gemm_coopmat_wg", src};
  cx.dispatch(k, args.operands(), args.push(info), static_cast<uint32_t>(g.n / kWgN), static_cast<uint32_t>(g.m / kWgM),
              static_cast<uint32_t>(g.batch));
  return true;
}

// The cooperative-matrix GEMM (kGemmCoopNV) for f16 operands (f16 products, and f32 products
// under the Fp16 policy) and, where the device has bf16 matrices, bf16 operands (bf16 products,
// f32 products under the Bf16 policy). False where the device or the product does not allow it.
bool lower_gemm_coop(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p) {
  const DeviceInfo& info = cx.info();
  if (!info.coopmat_nv || !cx.knobs().vulkan_coopmat() || info.subgroup_size != 32 || !info.float16) return false;
  const bool bits = info.coopmat_bf16 && (p.t == DType::BF16 || (p.t == DType::F32 && p.round_ab == DType::BF16));
  if (!(bits || p.t == DType::F16 || (p.t == DType::F32 && p.round_ab == DType::F16))) return false;
  const std::optional<CoopShape> asked = coop_shape_knob(cx.knobs());
  if (!asked && lower_gemm_coop_wg(cx, st, g, p, bits)) return true;
  const CoopShape cs = asked ? *asked : default_coop_shape(g);
  if (cs.nt() > info.max_invocations || cs.shared_bytes() > info.max_shared_bytes) {
    if (asked)
      throw Error(cx.knobs().origin("vulkan_gemm_tile") + "='" + cx.knobs().vulkan_gemm_tile() + "': " +
                  std::to_string(cs.nt()) + " invocations and " + std::to_string(cs.shared_bytes()) +
                  " bytes of shared memory; " + info.name + " allows " + std::to_string(info.max_invocations) +
                  " and " + std::to_string(info.max_shared_bytes));
    return false;
  }
  const std::string what = step_label(st);
  const bool strided = g.a_stride >= 0 && g.b_stride >= 0;
  const std::vector<uint32_t> table = strided ? std::vector<uint32_t>{} : batch_table(g);
  // 16-byte vector loads where every chunk of 8 elements along an operand's contiguous dim starts
  // on a multiple of 8 elements (the extent, ld, batch offsets) and the operand on 16 bytes.
  auto vec_ok = [&](const Operand& op, int64_t ld, int64_t stride, size_t which) {
    if (ld % 8 != 0 || op.skip % 16 != 0) return false;
    if (strided) return stride % 8 == 0;
    for (size_t i = which; i < table.size(); i += 2)
      if (table[i] % 8 != 0) return false;
    return true;
  };
  const Operand a = cx.in(st.in.at(0)), b = cx.in(st.in.at(1));
  const bool vec_a = vec_ok(a, g.lda, g.a_stride, 0), vec_b = vec_ok(b, g.ldb, g.b_stride, 1);
  // f16 words straight to shared memory: untransposed, every chunk of 8 whole (K, N multiples of 8).
  const bool half = p.t == DType::F16 || p.t == DType::BF16;
  const bool words_a = vec_a && half && !g.trans_a && g.k % 8 == 0;
  const bool words_b = vec_b && half && !g.trans_b && g.n % 8 == 0;
  KernelArgs args(what);
  if (vec_a) args.vec4_buffer("A", a);
  else args.buffer("A", p.t, a, true);
  if (vec_b) args.vec4_buffer("B", b);
  else args.buffer("B", p.t, b, true);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  if (p.round_ab != DType::F32) codegen::glsl_language().dtype_helpers(p.round_ab, h);
  // Few tiles and a long K: K split over workgroups (at least 4 slices each), partial sums added
  // and passed through the epilogue by a second dispatch.
  const int64_t tiles = ((g.m + cs.bm() - 1) / cs.bm()) * ((g.n + cs.bn() - 1) / cs.bn()) * g.batch;
  int64_t splits = 1, kchunk = g.k;
  if (cx.knobs().vulkan_gemm_splitk() && tiles < kCoopFill && (g.k + cs.bk - 1) / cs.bk >= 8)
    std::tie(splits, kchunk) = plan::k_splits(tiles, g.k, int64_t{4} * cs.bk, 2 * kCoopFill);
  // The partials (indexed with 32 bits) stay below 2^26 elements: large tiles asked through the
  // knob keep one pass.
  if (splits * g.batch * g.m * g.n >= (int64_t{1} << 26)) splits = 1, kchunk = g.k;
  const bool split = splits > 1;
  std::string epi;
  Operand partials;
  if (split) {
    partials = cx.scratch(static_cast<size_t>(splits * g.batch * g.m * g.n) * dtype_size(p.acc),
                          what + " split-K partial sums");
    partials.write = true;
    args.buffer("P", p.acc, partials, false);
  } else {
    epi = bind_epilogue(cx, st, p, args, h);
  }
  if (!strided) args.words("TAB", "uint", cx.table(table, what + " batch offsets"), true);
  gemm_params(args, g, strided);
  auto u = [](uint32_t v) { return std::to_string(v) + "u"; };
  std::string defines =
      "#extension GL_NV_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n"
      "#extension GL_KHR_shader_subgroup_basic : require\n" + std::string(kCoopmatBTypeDecl) + "#define STG " +
      (bits ? "uint16_t" : "float16_t") + "\n#define ACC float\nlayout(local_size_x = " +
      std::to_string(cs.nt()) + ") in;\n#define NT " + u(cs.nt()) + "\n#define WM " + u(cs.wm) + "\n#define WN " +
      u(cs.wn) + "\n#define TMC " + u(cs.tmc) + "\n#define TNC " + u(cs.tnc) + "\n#define BM " + u(cs.bm()) +
      "\n#define BN " + u(cs.bn()) + "\n#define BK " + u(cs.bk) + "\n#define TRANS_A " + flag(g.trans_a) + "\n#define TRANS_B " +
      flag(g.trans_b) + "\n#define HAS_TABLE " + flag(!strided) + "\n#define WA " + flag(words_a) + "\n#define WB " +
      flag(words_b) + "\n#define SPLITK " + flag(split) + "\n#define SPLITS " + u(static_cast<uint32_t>(splits)) +
      "\n#define KCHUNK " + (split ? u(static_cast<uint32_t>(kchunk)) : std::string("pc.k")) + "\n#define STORE_TILES";
  for (uint32_t i = 0; i < cs.tmc; ++i)
    for (uint32_t j = 0; j < cs.tnc; ++j) defines += " store_tile(acc[" + u(i) + "][" + u(j) + "], " + u(i) + ", " + u(j) + ", b, row0, col0);";
  defines += "\n";
  std::string fns = epi;
  if (!vec_a) fns += load_fn("load_a", "A", p);
  if (!vec_b) fns += load_fn("load_b", "B", p);
  fns += load8_fn("load8_a", "A", "load_a", p, vec_a, bits) + load8_fn("load8_b", "B", "load_b", p, vec_b, bits);
  std::vector<DType> types{p.t, p.acc, DType::F16};
  if (bits) types.push_back(DType::BF16);  // uint16_t staging
  const std::string src = coopmat_directive(cx, bits) + shader(types, defines, args, h, fns, ksrc::kGemmCoopNV);
  const Kernel k{bits ? "matmul_gemm_coopmat_bf16" : "matmul_gemm_coopmat", src};
  cx.dispatch(k, args.operands(), args.push(info), clamp_groups((g.n + cs.bn() - 1) / cs.bn(), info.max_groups[0]),
              clamp_groups((g.m + cs.bm() - 1) / cs.bm(), info.max_groups[1]),
              clamp_groups(g.batch * splits, info.max_groups[2]));
  if (split) add_split_sum(cx, st, p, partials, g.batch * g.m, g.n, splits);
  return true;
}

void lower_gemm(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p) {
  if (lower_gemm_coop(cx, st, g, p)) return;
  const DeviceInfo& info = cx.info();
  const std::string what = step_label(st);
  // 64 x 64 tiles of 256 invocations (4 x 4 outputs each); a side of at most 16 rows or columns
  // (small batched products) gets tiles of 16 on that side instead of idle rows. Products with f32
  // accumulation and enough 128 x 128 tiles to fill a large GPU (132 SMs) take those (8 x 8
  // outputs per invocation: half the shared-memory reads per product).
  const uint32_t full = info.max_invocations >= 256 ? 16 : 8;
  const bool large = p.acc == DType::F32 && full == 16 && g.m >= 128 && g.n >= 128 &&
                     ((g.m + 127) / 128) * ((g.n + 127) / 128) * g.batch >= 132;
  const uint32_t wx = g.n <= 16 ? 4 : 16, wy = g.m <= 16 ? 4 : full, tm = large ? 8 : 4, tn = tm, pad = 1;
  const uint32_t bm = wy * tm, bn = wx * tn;
  uint32_t bk = 16;
  const size_t es = dtype_size(p.acc);
  while (bk > 4 && 2 * bk * (std::max(bm, bn) + pad) * es > info.max_shared_bytes) bk /= 2;
  KernelArgs args(what);
  args.buffer("A", p.t, cx.in(st.in.at(0)), true);
  args.buffer("B", p.t, cx.in(st.in.at(1)), true);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  if (p.round_ab != DType::F32) codegen::glsl_language().dtype_helpers(p.round_ab, h);
  const std::string epi = bind_epilogue(cx, st, p, args, h);
  const bool strided = g.a_stride >= 0 && g.b_stride >= 0;
  if (!strided) args.words("TAB", "uint", cx.table(batch_table(g), what + " batch offsets"), true);
  gemm_params(args, g, strided);
  const std::string defines = acc_defines(p.acc, wx * wy) + "#define WX " + std::to_string(wx) + "u\n#define WY " +
                              std::to_string(wy) + "u\n#define TM " + std::to_string(tm) + "u\n#define TN " +
                              std::to_string(tn) + "u\n#define BM " + std::to_string(bm) + "u\n#define BN " +
                              std::to_string(bn) + "u\n#define BK " + std::to_string(bk) + "u\n#define PAD " +
                              std::to_string(pad) + "u\n#define TRANS_A " + flag(g.trans_a) + "\n#define TRANS_B " +
                              flag(g.trans_b) + "\n#define HAS_TABLE " + flag(!strided) + "\n";
  const std::string fns = load_fn("load_a", "A", p) + load_fn("load_b", "B", p) + epi;
  const Kernel k{"matmul_gemm", shader({p.t, p.acc}, defines, args, h, fns, ksrc::kGemm)};
  cx.dispatch(k, args.operands(), args.push(info), clamp_groups((g.n + bn - 1) / bn, info.max_groups[0]),
              clamp_groups((g.m + bm - 1) / bm, info.max_groups[1]), clamp_groups(g.batch, info.max_groups[2]));
}

// ---- GEMV ----

// 256 invocations: 32 columns (a 32-wide subgroup reads 32 consecutive elements of a row of
// B) x 8 slices of K; KT elements of each row of A staged at a time.
struct GemvShape {
  uint32_t nt = 256, cols = 32, ks = 8, kt = 256;
};

GemvShape gemv_shape(const DeviceInfo& info, int64_t rows, DType acc) {
  GemvShape s;
  if (info.max_invocations < 256) {
    s.nt = 128;
    s.ks = 4;
  }
  const size_t es = dtype_size(acc);
  while (s.kt > 32 && (rows * s.kt + s.ks * rows * s.cols) * es > info.max_shared_bytes) s.kt /= 2;
  return s;
}

std::string gemv_defines(const GemvShape& s, DType acc, int64_t rows, bool split, bool grouped) {
  return acc_defines(acc, s.nt) + "#define COLS " + std::to_string(s.cols) + "u\n#define KS " + std::to_string(s.ks) +
         "u\n#define KT " + std::to_string(s.kt) + "u\n#define R " + std::to_string(rows) + "u\n#define SPLIT " +
         flag(split) + "\n#define GROUPED " + flag(grouped) + "\n";
}

// Rows of a skinny product the GEMV kernel takes (A contiguous [rows, k] against one row-major
// B), or 0.
int64_t gemv_rows(const plan::MatMulGeom& g) {
  if (g.trans_a || g.trans_b || g.k == 0 || g.n == 0) return 0;
  // A batch against one shared weight arrives folded into m (plan geometry).
  const int64_t rows = g.batch == 1 ? g.m : 0;
  return rows >= 1 && rows <= 4 ? rows : 0;
}

// `void unpack_b(uvec4 w, out float f[V])` for B's dtype (operands rounded under a precision policy).
std::string unpack_fn(const Product& p) {
  std::string s = "void unpack_b(uvec4 w, out float f[V]) {\n";
  auto rnd = [&](const std::string& v) {
    return p.round_ab == DType::F32 ? v : codegen::glsl_language().round(p.round_ab, v);
  };
  for (int i = 0; i < 4; ++i) {
    const std::string wi = "w[" + std::to_string(i) + "]";
    if (p.t == DType::F32) {
      s += "  f[" + std::to_string(i) + "] = " + rnd("uintBitsToFloat(" + wi + ")") + ";\n";
    } else if (p.t == DType::BF16) {
      s += "  f[" + std::to_string(2 * i) + "] = uintBitsToFloat(" + wi + " << 16);\n";
      s += "  f[" + std::to_string(2 * i + 1) + "] = uintBitsToFloat(" + wi + " & 0xffff0000u);\n";
    } else {
      s += "  { const vec2 h = vec2(unpackFloat2x16(" + wi + ")); f[" + std::to_string(2 * i) + "] = h.x; f[" +
           std::to_string(2 * i + 1) + "] = h.y; }\n";
    }
  }
  return s + "}\n";
}

// kGemvVec's PRO defines for an absorbed RmsNorm (PRO 1) or FusedSwiGLU (PRO 2), or PRO 0.
std::string prologue_defines(const plan::Step* pro) {
  if (!pro) return "#define PRO 0\n";
  if (std::holds_alternative<ops::FusedSwiGLU>(pro->op)) return "#define PRO 2\n";
  const float eps = static_cast<float>(std::get<ops::RmsNorm>(pro->op).eps);
  return "#define PRO 1\n#define PRO_EPS uintBitsToFloat(" + std::to_string(std::bit_cast<uint32_t>(eps)) + "u)\n";
}

// kGemvVec's pro_x / pro_a for an absorbed RmsNorm: y = x * inv * gamma (+ beta), rounded to the
// stored dtype as the RmsNorm step would store it (then to the precision policy's operand type).
std::string prologue_fns(const plan::Step& pro, const Product& p) {
  const auto& lang = codegen::glsl_language();
  if (const auto* sw = std::get_if<ops::FusedSwiGLU>(&pro.op)) {
    // silu(gate) rounded to the stored dtype, times up, rounded again (as the SwiGLU step stores
    // it); gate and up are the halves of the 2k-wide row.
    auto rnd = [&](const std::string& v) { return p.t == DType::F32 ? v : lang.round(p.t, v); };
    auto at = [&](const char* half) {
      return "float(" + glsl_load(p.t, std::string("X.data[pc.o_X + r * 2u * pc.k + ") + half + " + j]") + ")";
    };
    const std::string g = at(sw->gate_first ? "0u" : "pc.k"), u = at(sw->gate_first ? "pc.k" : "0u");
    std::string y = rnd(rnd("(gv / (1.0 + exp(-gv)))") + " * " + u);
    if (p.round_ab != DType::F32) y = lang.round(p.round_ab, y);
    return "float pro_a(uint r, uint j, float inv) {\n  const float gv = " + g + ";\n  return " + y + ";\n}\n";
  }
  std::string y = "pro_x(r * pc.k + j) * inv * float(" + glsl_load(p.t, "G.data[pc.o_G + j]") + ")";
  if (pro.in.size() > 2) y = "(" + y + " + float(" + glsl_load(p.t, "PB.data[pc.o_PB + j]") + "))";
  if (p.t != DType::F32) y = lang.round(p.t, y);
  if (p.round_ab != DType::F32) y = lang.round(p.round_ab, y);
  return "float pro_x(uint i) { return float(" + glsl_load(p.t, "X.data[pc.o_X + i]") + "); }\n" +
         "float pro_a(uint r, uint j, float inv) { return " + y + "; }\n";
}

// The vector GEMV (kGemvVec) when B can be read as 16-byte vectors: a float dtype, n a multiple
// of the vector and B starting on a 16-byte boundary of its window. False when it cannot.
bool lower_gemv_vec(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p,
                    int64_t rows) {
  if (p.t != DType::F32 && p.t != DType::F16 && p.t != DType::BF16) return false;
  const int64_t v = 16 / static_cast<int64_t>(dtype_size(p.t));
  const Operand b = cx.in(st.in.at(1));
  if (g.n % v != 0 || b.skip % 16 != 0) return false;
  const DeviceInfo& info = cx.info();
  const std::string what = step_label(st);
  const uint32_t nt = info.max_invocations >= 256 ? 256 : 128, cg = 32, ks = nt / cg, u = 4;
  if (static_cast<size_t>(ks * cg * (v + 1) * 4) > info.max_shared_bytes) return false;
  const int64_t nv = g.n / v;
  const int64_t tiles = (nv + cg - 1) / cg;
  // About two workgroups per SM of a large GPU (132 on an H100): K split when the tiles are few,
  // each split reading at least 64 KiB of B (a second pass costs more than a small product).
  const int64_t b_bytes = g.k * g.n * static_cast<int64_t>(dtype_size(p.t));
  const int64_t target = std::min<int64_t>(264, tiles * std::max<int64_t>(1, b_bytes / 65536));
  const auto [splits, kchunk] = plan::k_splits(tiles, g.k, int64_t{ks} * u, target);
  const bool split = splits > 1;
  KernelArgs args(what);
  const plan::Step* pro = cx.absorbed_producer(st);  // an RmsNorm of A's rows
  if (pro) {  // an RmsNorm (x, gamma, beta?) or a FusedSwiGLU (x) of A's rows
    args.buffer("X", p.t, cx.in(pro->in.at(0)), true);
    if (pro->in.size() > 1) args.buffer("G", p.t, cx.in(pro->in.at(1)), true);
    if (pro->in.size() > 2) args.buffer("PB", p.t, cx.in(pro->in.at(2)), true);
  } else {
    args.buffer("A", p.t, cx.in(st.in.at(0)), true);
  }
  args.vec4_buffer("B", b);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  if (p.round_ab != DType::F32) codegen::glsl_language().dtype_helpers(p.round_ab, h);
  if (split) {
    Operand partials =
        cx.scratch(static_cast<size_t>(splits * rows * g.n) * dtype_size(p.acc), what + " split-K partial sums");
    partials.write = true;
    args.coherent_buffer("P", p.acc, partials);
    Operand counters = cx.table(std::vector<uint32_t>(static_cast<size_t>(tiles), 0u), what + " split-K counters");
    counters.write = true;
    args.words("CNT", "uint", counters, false);
  }
  const std::string epi = bind_epilogue(cx, st, p, args, h);
  args.param("n", g.n);
  args.param("nv", nv);
  args.param("k", g.k);
  args.param("kchunk", kchunk);
  const std::string defines = "#define ACC float\nlayout(local_size_x = " + std::to_string(nt) +
                              ") in;\n#define NT " + std::to_string(nt) + "u\n#define CG " + std::to_string(cg) +
                              "u\n#define KS " + std::to_string(ks) + "u\n#define U " + std::to_string(u) +
                              "u\n#define R " + std::to_string(rows) + "u\n#define V " + std::to_string(v) +
                              "u\n#define SPLIT " + flag(split) + "\n" + prologue_defines(pro);
  const std::string fns = (pro ? prologue_fns(*pro, p) : load_fn("load_a", "A", p)) + unpack_fn(p) + epi;
  const Kernel k{"matmul_gemv_vec", shader({p.t, p.acc}, defines, args, h, fns, ksrc::kGemvVec)};
  cx.dispatch(k, args.operands(), args.push(info), clamp_groups(tiles, info.max_groups[0]),
              static_cast<uint32_t>(splits));
  return true;
}

void lower_gemv(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p, int64_t rows) {
  if (lower_gemv_vec(cx, st, g, p, rows)) return;
  if (const plan::Step* pro = cx.absorbed_producer(st)) lower_step(cx, *pro);  // A is read as stored
  const DeviceInfo& info = cx.info();
  const std::string what = step_label(st);
  const GemvShape s = gemv_shape(info, rows, p.acc);
  // Enough workgroups to fill a large GPU: the K range is split when the column tiles are few.
  constexpr int64_t kTargetGroups = 256;
  const int64_t tiles = (g.n + s.cols - 1) / s.cols;
  const auto [splits, kchunk] = plan::k_splits(tiles, g.k, s.kt, kTargetGroups);
  const bool split = splits > 1;
  KernelArgs args(what);
  args.buffer("A", p.t, cx.in(st.in.at(0)), true);
  args.buffer("B", p.t, cx.in(st.in.at(1)), true);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(p.t, h);
  if (p.round_ab != DType::F32) codegen::glsl_language().dtype_helpers(p.round_ab, h);
  std::string epi;
  Operand partials;
  if (split) {
    partials = cx.scratch(static_cast<size_t>(splits * rows * g.n) * dtype_size(p.acc), what + " split-K partial sums");
    partials.write = true;
    args.buffer("P", p.acc, partials, false);
  } else {
    epi = bind_epilogue(cx, st, p, args, h);
  }
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("kchunk", kchunk);
  const std::string fns = load_fn("load_a", "A", p) + load_fn("load_b", "B", p) + epi;
  const Kernel k{"matmul_gemv", shader({p.t, p.acc}, gemv_defines(s, p.acc, rows, split, false), args, h, fns, ksrc::kGemv)};
  cx.dispatch(k, args.operands(), args.push(info), clamp_groups(tiles, info.max_groups[0]),
              static_cast<uint32_t>(splits));
  if (split) add_split_sum(cx, st, p, partials, rows, g.n, splits);
}

// ---- GroupedMatMul ----

void lower_grouped(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::GroupedMatMulGeom>(st.geom);
  const DeviceInfo& info = cx.info();
  const std::string what = step_label(st);
  const DType t = st.out.at(0).dtype;
  const DType it = st.in.at(2).dtype;
  plan::check_grouped_matmul(st, "Vulkan");
  Product p;
  p.t = t;
  p.acc = acc_dtype(t);
  p.n = g.n;
  const GemvShape s = gemv_shape(info, 1, p.acc);
  KernelArgs args(what);
  args.buffer("A", t, cx.in(st.in.at(0)), true);
  args.buffer("B", t, cx.in(st.in.at(1)), true);
  codegen::Helpers h;
  codegen::glsl_language().dtype_helpers(t, h);
  const std::string epi = bind_epilogue(cx, st, p, args, h);
  args.buffer("IDX", it, cx.in(st.in.at(2)), true);
  args.words("ERR", "int", cx.error_flag(), false);
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("kchunk", g.k);
  args.param("rows", g.m);
  args.param("experts", g.experts);
  const DType wide = it == DType::I64 ? DType::I64 : DType::I32;
  const std::string defines =
      gemv_defines(s, p.acc, 1, false, true) + "#define IDX_T " + glsl_compute_type(wide) + "\n";
  const std::string fns = load_fn("load_a", "A", p) + load_fn("load_b", "B", p) + epi;
  const Kernel k{"grouped_matmul", shader({t, p.acc, it, wide}, defines, args, h, fns, ksrc::kGemv)};
  cx.dispatch(k, args.operands(), args.push(info), clamp_groups((g.n + s.cols - 1) / s.cols, info.max_groups[0]),
              clamp_groups(g.m, info.max_groups[1]));
}

}  // namespace

const FamilyClaims kMatmulClaims{kind, node};

void lower_matmul(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::GroupedMatMul>(st.op)) return lower_grouped(cx, st);
  const plan::MatmulOperands mo = plan::matmul_operands(st, "Vulkan");
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const plan::TensorRef& c = st.out.at(0);
  Product p;
  p.t = c.dtype;
  p.acc = acc_dtype(c.dtype);
  p.n = g.n;
  const Precision prec = cx.options().precision;
  if (p.t == DType::F32 && prec == Precision::Fp16) p.round_ab = DType::F16;
  if (p.t == DType::F32 && prec == Precision::Bf16) p.round_ab = DType::BF16;
  if (mo.fused) {
    p.act = g.activation;
    if (mo.bias) p.bias = mo.bias, p.bias_len = mo.bias_len;
    p.residual = mo.residual;
  }
  if (const int64_t rows = gemv_rows(g)) return lower_gemv(cx, st, g, p, rows);
  if (const plan::Step* pro = cx.absorbed_producer(st)) lower_step(cx, *pro);
  lower_gemm(cx, st, g, p);
}

int64_t gemv_prologue_rows(const plan::Step& st) {
  if (!std::holds_alternative<ops::MatMul>(st.op) && !std::holds_alternative<ops::FusedMatMulBiasAct>(st.op)) return 0;
  const DType t = st.out.at(0).dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return 0;
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  const int64_t v = 16 / static_cast<int64_t>(dtype_size(t));
  return g.n % v == 0 ? gemv_rows(g) : 0;
}

}  // namespace rlx::vulkan
