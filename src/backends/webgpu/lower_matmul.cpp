// MatMul, FusedMatMulBiasAct and GroupedMatMul on WebGPU: WGSL kernels generated per product
// shape class (tile sizes, transposes, dtype, epilogue); every size is a uniform parameter.
//
//   - GEMM: a workgroup of WX x WY invocations computes a BM x BN output tile (BM = WY * TM,
//     BN = WX * TN; 64 x 64 with 4 x 4 accumulators per invocation, 128 x 128 with 8 x 8 for
//     large f32 products, 16-wide sides for small m or n), staging BK-deep slices of A and B in
//     workgroup memory (loads along each operand's contiguous dim, the next slice fetched into
//     registers while the current one is multiplied). Column tiles, row tiles and batch items
//     are the x, y and z grid, each a grid-stride loop (so batches beyond 65535 work). Batch
//     items are found by a single stride per operand or, for broadcast batch dims that do not
//     collapse, by walking the batch dims (strides of 0 broadcast).
//   - GEMV (decode): 1 to 4 rows of A against one B: a workgroup owns a group of output columns
//     (64 of a row-major B, 8 of a transposed B, each read along its contiguous dim), staging A's
//     rows in workgroup memory; the K slices' partial sums are added in workgroup memory.
//   - GroupedMatMul: the GEMV kernel with one row per y workgroup and w[idx[row]] as B.
// The FusedMatMulBiasAct epilogue (bias, activation, residual) is the shared elementwise chain
// printed by the WGSL language into the kernel's store, with the CPU oracle's rounding: f32 and
// integers store the product in their dtype and run each step in it (sub-word integers wrap),
// f16/bf16 run the steps on the f32 accumulator and round once at the store.
// Accumulation: f32 for floats, 32-bit wrapping for integers up to 32 bits (the low bits of the
// CPU's 64-bit sum), and for i64 (held in 32-bit words) 32-bit arithmetic that reports a
// product or sum leaving [-2^31, 2^31) through the error flag instead of wrapping.
#include <algorithm>
#include <bit>
#include <string>
#include <utility>
#include <vector>

#include "backends/webgpu/lower.h"
#include "codegen/elementwise.h"
#include "codegen/language.h"
#include "plan/gpu_claims.h"
#include "plan/matmul_work.h"
#include "rlx/error.h"

namespace rlx::webgpu {
namespace {

const codegen::Language& L() { return codegen::wgsl_language(); }

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }
DType epilogue_dtype(DType t) { return plan::matmul_epilogue_dtype(t); }

std::string u(uint64_t v) { return std::to_string(v) + "u"; }

// ---- claims ----

bool kind(std::string_view name) { return plan::matmul_claims_kind(name); }

bool node(const Graph& g, const Node& n, const DeviceInfo* info, std::string* why) {
  (void)info;
  return plan::matmul_claims_node(L(), "WebGPU", g, n, why);
}

// ---- kernel assembly ----

// The operands and uniform parameters of one kernel, in the kernel convention's order.
struct Args {
  std::vector<Operand> ops;
  std::vector<std::string> names;  // "name: u32"
  std::vector<uint32_t> values;
  std::string what;

  size_t add(const Operand& o) {
    ops.push_back(o);
    return ops.size() - 1;
  }
  void param(const std::string& name, int64_t v) {
    if (v < 0 || v > static_cast<int64_t>(UINT32_MAX))
      throw Error(what + ": internal: kernel parameter " + name + " = " + std::to_string(v) + " does not fit 32 bits");
    names.push_back(name + ": u32");
    values.push_back(static_cast<uint32_t>(v));
  }
};

// What every kernel of one product shares: dtypes, operands and the epilogue.
struct Product {
  DType t = DType::F32;
  std::string acc = "f32";  // WGSL accumulation type
  bool checked = false;     // i64: checked 32-bit arithmetic (error flag)
  int64_t bias_len = 0;
  std::optional<ActKind> act;
  const plan::TensorRef* bias = nullptr;
  const plan::TensorRef* residual = nullptr;
};

Product make_product(DType t) {
  Product p;
  p.t = t;
  p.acc = L().compute_type(t);
  p.checked = t == DType::I64;
  return p;
}

// `fn name(i: u32) -> ACC`: element i (from the binding's start) of operand k. A packed operand
// (f16/bf16 values two per word, element i in half i % 2 of word i / 2) is unpacked: f16 by
// unpack2x16float (core WGSL), bf16 by moving its bits to the top of an f32.
std::string load_fn(const std::string& name, const Binds& b, size_t k, const Product& p, const Operand& o) {
  const std::string buf = "rlx_b" + std::to_string(b.binding_of.at(k));
  if (!o.packed) return "fn " + name + "(i: u32) -> " + p.acc + " { return " + L().load(p.t, buf + "[i]") + "; }\n";
  if (p.acc != "f32" || !is_half(p.t))
    throw Error("WebGPU: internal: a packed operand of a " + std::string(dtype_name(p.t)) + " product");
  std::string s = "fn " + name + "(i: u32) -> f32 {\n  let w = " + buf + "[i >> 1u];\n";
  if (p.t == DType::F16) return s + "  return unpack2x16float(w >> ((i & 1u) << 4u)).x;\n}\n";
  return s + "  return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));\n}\n";
}

// mad(c, a, b) = c + a * b and add(a, b) in ACC (checked for i64), and their vec4 forms.
std::string arith_fns(const Product& p, codegen::Helpers& h) {
  const std::string A = p.acc, V = "vec4<" + A + ">";
  std::string s;
  if (p.checked) {
    bool flag = false;
    L().binary(BinaryKind::Mul, DType::I64, "a", "b", h, &flag);  // adds the checked i64 helpers
    s += "fn mad(c: i32, a: i32, b: i32) -> i32 { return rlx_i64_add(c, rlx_i64_mul(a, b)); }\n";
    s += "fn add(a: i32, b: i32) -> i32 { return rlx_i64_add(a, b); }\n";
    s += "fn mad4(c: " + V + ", a: i32, b: " + V + ") -> " + V +
         " { return " + V + "(mad(c.x, a, b.x), mad(c.y, a, b.y), mad(c.z, a, b.z), mad(c.w, a, b.w)); }\n";
    s += "fn add4(a: " + V + ", b: " + V + ") -> " + V + " { return " + V +
         "(add(a.x, b.x), add(a.y, b.y), add(a.z, b.z), add(a.w, b.w)); }\n";
  } else if (A == "f32") {
    s += "fn mad(c: f32, a: f32, b: f32) -> f32 { return fma(a, b, c); }\n";
    s += "fn add(a: f32, b: f32) -> f32 { return a + b; }\n";
    s += "fn mad4(c: " + V + ", a: f32, b: " + V + ") -> " + V + " { return fma(" + V + "(a), b, c); }\n";
    s += "fn add4(a: " + V + ", b: " + V + ") -> " + V + " { return a + b; }\n";
  } else {
    s += "fn mad(c: " + A + ", a: " + A + ", b: " + A + ") -> " + A + " { return c + a * b; }\n";
    s += "fn add(a: " + A + ", b: " + A + ") -> " + A + " { return a + b; }\n";
    s += "fn mad4(c: " + V + ", a: " + A + ", b: " + V + ") -> " + V + " { return c + " + V + "(a) * b; }\n";
    s += "fn add4(a: " + V + ", b: " + V + ") -> " + V + " { return a + b; }\n";
  }
  return s;
}

// Adds C, the bias and the residual (in this order) to `args`; the indices of C, bias, residual.
struct EpiOps {
  size_t c = 0, bias = 0, res = 0;
};
EpiOps add_epilogue_ops(LowerContext& cx, const plan::Step& st, const Product& p, Args& args) {
  EpiOps e;
  e.c = args.add(cx.out(st.out.at(0)));
  if (p.bias) e.bias = args.add(cx.in(*p.bias));
  if (p.residual) e.res = args.add(cx.in(*p.residual));
  return e;
}

// `fn rlx_epilogue(o: u32, col: u32, acc: ACC)`: stores output element o (column col).
std::string epilogue_fn(const Product& p, const Binds& b, const EpiOps& e, codegen::Helpers& h) {
  const DType ed = epilogue_dtype(p.t);
  const std::string E = L().compute_type(ed);
  L().dtype_helpers(p.t, h);
  std::string s = "fn rlx_epilogue(o: u32, col: u32, acc: " + p.acc + ") {\n";
  s += "  let x0: " + E + " = " + (is_int(p.t) ? L().round(p.t, "acc") : std::string("acc")) + ";\n";
  std::vector<std::string> ins{"x0"};
  if (p.bias) {
    ins.push_back("x" + std::to_string(ins.size()));
    s += "  let " + ins.back() + ": " + E + " = " + L().load(p.t, b.at(e.bias, p.bias_len == 1 ? "0u" : "col")) + ";\n";
  }
  if (p.residual) {
    ins.push_back("x" + std::to_string(ins.size()));
    s += "  let " + ins.back() + ": " + E + " = " + L().load(p.t, b.at(e.res, "o")) + ";\n";
  }
  std::string result = "x0";
  const codegen::ElementwisePlan plan =
      plan::matmul_epilogue_plan(p.t, p.bias != nullptr, p.act, p.residual != nullptr);
  if (!plan.steps.empty()) {
    const codegen::ChainCode code = codegen::chain_code(
        L(), plan, ins, [](const std::string&, const std::string& name) { return "let " + name; }, h);
    for (const std::string& line : code.lines) s += "  " + line + "\n";
    result = code.result;
  }
  if (is_half(p.t)) result = L().round(p.t, result);
  return s + "  " + b.at(e.c, "o") + " = " + L().store(p.t, result) + ";\n}\n";
}

uint32_t clamp_groups(int64_t g) { return static_cast<uint32_t>(std::clamp<int64_t>(g, 1, kMaxGroups1d)); }

// ---- GEMM ----

struct GemmShape {
  uint32_t wx = 16, wy = 16, tm = 4, tn = 4, bk = 16, pad = 1;  // pad: vec4s per slice row
  uint32_t nt() const { return wx * wy; }
  uint32_t bm() const { return wy * tm; }
  uint32_t bn() const { return wx * tn; }
};

// The GEMM kernel's body (see the file comment). ACC, load_a/load_b (element from the binding's
// start), mad/mad4/add4, batch_off(b) -> vec2 (A and B element offsets of item b) and
// rlx_epilogue are defined before it.
std::string gemm_body(const GemmShape& s, bool trans_a, bool trans_b, const std::string& A) {
  const uint32_t nt = s.nt(), bm = s.bm(), bn = s.bn(), bk = s.bk;
  const uint32_t la = (bm * bk + nt - 1) / nt, lb = (bn * bk + nt - 1) / nt;
  const std::string V = "vec4<" + A + ">";
  const uint32_t tn4 = s.tn / 4;
  std::string c;
  // Slices as vec4s: an invocation's 4 consecutive rows (columns) are one 16-byte read; rows of
  // the slice padded by one vec4 (stores along k spread over the banks).
  const uint32_t sa = bm / 4 + s.pad, sb = bn / 4 + s.pad;
  c += "var<workgroup> As: array<" + V + ", " + std::to_string(bk * sa) + ">;\n";
  c += "var<workgroup> Bs: array<" + V + ", " + std::to_string(bk * sb) + ">;\n";
  // slot of element e of a slice: (row or column in the tile, kk)
  c += "fn slot_a(e: u32) -> vec2<u32> { " +
       std::string(trans_a ? "return vec2<u32>(e % " + u(bm) + ", e / " + u(bm) + ");"
                           : "return vec2<u32>(e / " + u(bk) + ", e % " + u(bk) + ");") +
       " }\n";
  c += "fn slot_b(e: u32) -> vec2<u32> { " +
       std::string(trans_b ? "return vec2<u32>(e / " + u(bk) + ", e % " + u(bk) + ");"
                           : "return vec2<u32>(e % " + u(bn) + ", e / " + u(bn) + ");") +
       " }\n";
  c += "@compute @workgroup_size(" + std::to_string(nt) + ")\n";
  c += "fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,\n"
       "        @builtin(num_workgroups) nwg: vec3<u32>) {\n";
  c += "  let tx = tid % " + u(s.wx) + ";\n  let ty = tid / " + u(s.wx) + ";\n";
  c += "  let tiles_m = (rlx_p.m + " + u(bm - 1) + ") / " + u(bm) + ";\n";
  c += "  let tiles_n = (rlx_p.n + " + u(bn - 1) + ") / " + u(bn) + ";\n";
  c += "  for (var bi = wid.z; bi < rlx_p.batch; bi += nwg.z) {\n";
  c += "    let off = batch_off(bi);\n    let a0 = rlx_p.o0 + off.x;\n    let b0 = rlx_p.o1 + off.y;\n";
  c += "    for (var tmi = wid.y; tmi < tiles_m; tmi += nwg.y) {\n";
  c += "      for (var tni = wid.x; tni < tiles_n; tni += nwg.x) {\n";
  c += "        let row0 = tmi * " + u(bm) + ";\n        let col0 = tni * " + u(bn) + ";\n";
  for (uint32_t i = 0; i < s.tm; ++i)
    for (uint32_t j = 0; j < tn4; ++j) c += "        var acc" + std::to_string(i) + "_" + std::to_string(j) + " = " + V + "();\n";
  c += "        var ra: array<" + A + ", " + std::to_string(la) + ">;\n";
  c += "        var rb: array<" + A + ", " + std::to_string(lb) + ">;\n";
  // fetch of the slice at k0 into ra / rb
  std::string fetch;
  fetch += "for (var q = 0u; q < " + u(la) + "; q++) {\n";
  fetch += "  let e = tid + q * " + u(nt) + ";\n  let sl = slot_a(e);\n  let gr = row0 + sl.x;\n  let gk = kf + sl.y;\n";
  fetch += "  ra[q] = " + A + "(0);\n";
  fetch += "  if (e < " + u(bm * bk) + " && gr < rlx_p.m && gk < rlx_p.k) { ra[q] = load_a(a0 + " +
           (trans_a ? "gk * rlx_p.lda + gr" : "gr * rlx_p.lda + gk") + "); }\n}\n";
  fetch += "for (var q = 0u; q < " + u(lb) + "; q++) {\n";
  fetch += "  let e = tid + q * " + u(nt) + ";\n  let sl = slot_b(e);\n  let gc = col0 + sl.x;\n  let gk = kf + sl.y;\n";
  fetch += "  rb[q] = " + A + "(0);\n";
  fetch += "  if (e < " + u(bn * bk) + " && gc < rlx_p.n && gk < rlx_p.k) { rb[q] = load_b(b0 + " +
           (trans_b ? "gc * rlx_p.ldb + gk" : "gk * rlx_p.ldb + gc") + "); }\n}\n";
  auto indent = [](const std::string& text, const std::string& pre) {
    std::string out, line;
    for (char ch : text) {
      line += ch;
      if (ch == '\n') out += pre + line, line.clear();
    }
    return out + (line.empty() ? "" : pre + line + "\n");
  };
  c += "        {\n          let kf = 0u;\n" + indent(fetch, "          ") + "        }\n";
  c += "        for (var k0 = 0u; k0 < rlx_p.k; k0 += " + u(bk) + ") {\n";
  c += "          for (var q = 0u; q < " + u(la) + "; q++) {\n            let e = tid + q * " + u(nt) +
       ";\n            let sl = slot_a(e);\n            if (e < " + u(bm * bk) + ") { As[sl.y * " + u(sa) +
       " + sl.x / 4u][sl.x % 4u] = ra[q]; }\n          }\n";
  c += "          for (var q = 0u; q < " + u(lb) + "; q++) {\n            let e = tid + q * " + u(nt) +
       ";\n            let sl = slot_b(e);\n            if (e < " + u(bn * bk) + ") { Bs[sl.y * " + u(sb) +
       " + sl.x / 4u][sl.x % 4u] = rb[q]; }\n          }\n";
  c += "          workgroupBarrier();\n";
  c += "          if (k0 + " + u(bk) + " < rlx_p.k) {\n            let kf = k0 + " + u(bk) + ";\n" +
       indent(fetch, "            ") + "          }\n";
  // Each BK slice summed apart, then added (blocked summation: the rounding error of long K
  // stays near the BLAS kernels').
  for (uint32_t i = 0; i < s.tm; ++i)
    for (uint32_t j = 0; j < tn4; ++j) c += "          var p" + std::to_string(i) + "_" + std::to_string(j) + " = " + V + "();\n";
  c += "          for (var kk = 0u; kk < " + u(bk) + "; kk++) {\n";
  // Invocation (tx, ty) owns rows 4 * ty + 4 * WY * i4 + q and columns 4 * tx + 4 * WX * j + q.
  c += "            let ao = kk * " + u(sa) + " + ty;\n            let bo = kk * " + u(sb) + " + tx;\n";
  for (uint32_t j = 0; j < tn4; ++j)
    c += "            let bv" + std::to_string(j) + " = Bs[bo + " + u(j * s.wx) + "];\n";
  static const char* comp[] = {"x", "y", "z", "w"};
  for (uint32_t i4 = 0; i4 < s.tm / 4; ++i4) {
    c += "            let av" + std::to_string(i4) + " = As[ao + " + u(i4 * s.wy) + "];\n";
    for (uint32_t q = 0; q < 4; ++q)
      for (uint32_t j = 0; j < tn4; ++j) {
        const std::string pij = "p" + std::to_string(4 * i4 + q) + "_" + std::to_string(j);
        c += "            " + pij + " = mad4(" + pij + ", av" + std::to_string(i4) + "." + comp[q] + ", bv" +
             std::to_string(j) + ");\n";
      }
  }
  c += "          }\n";
  for (uint32_t i = 0; i < s.tm; ++i)
    for (uint32_t j = 0; j < tn4; ++j) {
      const std::string ij = std::to_string(i) + "_" + std::to_string(j);
      c += "          acc" + ij + " = add4(acc" + ij + ", p" + ij + ");\n";
    }
  c += "          workgroupBarrier();\n        }\n";
  // stores
  for (uint32_t i = 0; i < s.tm; ++i) {
    c += "        {\n          let r = row0 + ty * 4u + " + u((i / 4) * 4 * s.wy + i % 4) + ";\n          if (r < rlx_p.m) {\n";
    for (uint32_t j = 0; j < tn4; ++j)
      for (uint32_t q = 0; q < 4; ++q) {
        const std::string col = "col0 + tx * 4u + " + u(j * 4 * s.wx + q);
        c += "            if (" + col + " < rlx_p.n) { rlx_epilogue((bi * rlx_p.m + r) * rlx_p.n + " + col + ", " + col +
             ", acc" + std::to_string(i) + "_" + std::to_string(j) + "." + comp[q] + "); }\n";
      }
    c += "          }\n        }\n";
  }
  c += "      }\n    }\n  }\n}\n";
  return c;
}

// Collapses the batch dims: drops size-1 dims and merges neighbours whose strides chain.
void collapse_batch(const plan::MatMulGeom& g, std::vector<int64_t>& dims, std::vector<int64_t>& sa,
                    std::vector<int64_t>& sb) {
  for (size_t d = 0; d < g.batch_dims.size(); ++d) {
    if (g.batch_dims[d] == 1) continue;
    if (!dims.empty() && sa.back() == g.a_batch_strides[d] * g.batch_dims[d] &&
        sb.back() == g.b_batch_strides[d] * g.batch_dims[d]) {
      dims.back() *= g.batch_dims[d];
      sa.back() = g.a_batch_strides[d];
      sb.back() = g.b_batch_strides[d];
      continue;
    }
    dims.push_back(g.batch_dims[d]);
    sa.push_back(g.a_batch_strides[d]);
    sb.push_back(g.b_batch_strides[d]);
  }
}

// `fn batch_off(b: u32) -> vec2<u32>` and its parameters.
std::string batch_fn(const plan::MatMulGeom& g, Args& args) {
  std::string s = "fn batch_off(b: u32) -> vec2<u32> {\n";
  const bool strided = g.a_stride >= 0 && g.b_stride >= 0;
  if (strided || g.batch <= 1) {
    args.param("sa", g.batch <= 1 ? 0 : g.a_stride);
    args.param("sb", g.batch <= 1 ? 0 : g.b_stride);
    return s + "  return vec2<u32>(b * rlx_p.sa, b * rlx_p.sb);\n}\n";
  }
  std::vector<int64_t> dims, sa, sb;
  collapse_batch(g, dims, sa, sb);
  s += "  var t = b;\n  var oa = 0u;\n  var ob = 0u;\n";
  for (size_t d = dims.size(); d-- > 0;) {
    const std::string i = std::to_string(d);
    args.param("bd" + i, dims[d]);
    args.param("sa" + i, sa[d]);
    args.param("sb" + i, sb[d]);
    s += "  { let c = t % rlx_p.bd" + i + "; t = t / rlx_p.bd" + i + "; oa += c * rlx_p.sa" + i + "; ob += c * rlx_p.sb" +
         i + "; }\n";
  }
  return s + "  return vec2<u32>(oa, ob);\n}\n";
}

void lower_gemm(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p) {
  const DeviceInfo& info = cx.info();
  const uint32_t max_inv = info.limits.max_compute_invocations_per_workgroup;
  const uint32_t full = max_inv >= 256 ? 16 : 8;
  GemmShape s;
  const bool large = p.acc == "f32" && !p.checked && full == 16 && g.m >= 128 && g.n >= 128 &&
                     ((g.m + 127) / 128) * ((g.n + 127) / 128) * g.batch >= 132;
  s.wx = g.n <= 16 ? 4 : full;
  s.wy = g.m <= 16 ? 4 : full;
  s.tm = s.tn = large ? 8 : 4;
  const uint64_t limit = info.limits.max_compute_workgroup_storage_size;
  while (s.bk > 4 && uint64_t{s.bk} * (s.bm() + s.bn() + 8 * s.pad) * 4 > limit) s.bk /= 2;
  Args args;
  args.what = step_label(st);
  args.add(cx.in(st.in.at(0)));
  args.add(cx.in(st.in.at(1)));
  const EpiOps e = add_epilogue_ops(cx, st, p, args);
  args.param("m", g.m);
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("batch", g.batch);
  args.param("lda", g.lda);
  args.param("ldb", g.ldb);
  const std::string bfn = batch_fn(g, args);
  const Binds b = plan_binds(args.ops, p.checked);
  codegen::Helpers h;
  const std::string fns = load_fn("load_a", b, 0, p, args.ops[0]) + load_fn("load_b", b, 1, p, args.ops[1]) +
                          arith_fns(p, h) + epilogue_fn(p, b, e, h) + bfn;
  const std::string src = b.decls(args.names) + h.source() + fns + gemm_body(s, g.trans_a, g.trans_b, p.acc);
  cx.dispatch(Kernel{"matmul_gemm", src, true}, args.ops, args.values, p.checked, clamp_groups((g.n + s.bn() - 1) / s.bn()),
              clamp_groups((g.m + s.bm() - 1) / s.bm()), clamp_groups(g.batch));
}

// ---- GEMV ----

// Rows of a skinny product the GEMV kernel takes (A contiguous [rows, k] against one B), or 0.
int64_t gemv_rows(const plan::MatMulGeom& g) {
  if (g.trans_a || g.k == 0 || g.n == 0) return 0;
  // A batch against one shared weight arrives folded into m (plan geometry).
  const int64_t rows = g.batch == 1 ? g.m : 0;
  return rows >= 1 && rows <= 4 ? rows : 0;
}

// The GEMV kernel: R rows (GROUPED: one row per y workgroup, B = w[idx[row]]). A workgroup of
// COLS x KS invocations owns COLS output columns; B is read along its contiguous dim (a
// row-major B: consecutive invocations take consecutive columns; a transposed one: consecutive
// invocations take consecutive k of one column).
std::string gemv_body(uint32_t cols, uint32_t ks, uint32_t kt, int64_t rows, bool trans_b, bool grouped,
                      const std::string& A, const std::string& idx_check, const std::string& partial = "") {
  const uint32_t nt = cols * ks;
  const std::string R = std::to_string(rows);
  std::string c;
  c += "var<workgroup> xs: array<" + A + ", " + std::to_string(rows * kt) + ">;\n";
  c += "var<workgroup> red: array<" + A + ", " + std::to_string(ks * rows * cols) + ">;\n";
  c += "@compute @workgroup_size(" + std::to_string(nt) + ")\n";
  c += "fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,\n"
       "        @builtin(num_workgroups) nwg: vec3<u32>) {\n";
  if (!grouped) c += "  prologue(tid);\n";
  c += trans_b ? "  let c = tid / " + u(ks) + ";\n  let s = tid % " + u(ks) + ";\n"
               : "  let c = tid % " + u(cols) + ";\n  let s = tid / " + u(cols) + ";\n";
  c += "  let tiles = (rlx_p.n + " + u(cols - 1) + ") / " + u(cols) + ";\n";
  if (grouped) {
    c += "  for (var row = wid.y; row < rlx_p.rows; row += nwg.y) {\n";
    c += idx_check;  // defines `valid` and `ex`
    c += "    let a0 = rlx_p.o0 + row * rlx_p.k;\n    let b0 = rlx_p.o1 + ex * rlx_p.k * rlx_p.n;\n";
    c += "    let orow = row;\n";
  } else {
    c += "  {\n    let valid = true;\n    let a0 = rlx_p.o0;\n    let b0 = rlx_p.o1;\n    let orow = 0u;\n";
  }
  // K range: a split of kchunk (y) for a split product, else all of K.
  c += grouped ? "    let kb = 0u;\n    let ke = rlx_p.k;\n"
               : "    let kb = wid.y * rlx_p.kchunk;\n    let ke = min(rlx_p.k, kb + rlx_p.kchunk);\n";
  c += "    for (var t = wid.x; t < tiles; t += nwg.x) {\n";
  c += "      let col = t * " + u(cols) + " + c;\n";
  c += "      var acc = array<" + A + ", " + R + ">();\n";
  c += "      for (var k0 = kb; k0 < ke; k0 += " + u(kt) + ") {\n";
  c += "        let kn = min(" + u(kt) + ", ke - k0);\n";
  c += "        for (var e = tid; e < " + u(rows * kt) + "; e += " + u(nt) + ") {\n";
  c += "          let r = e / " + u(kt) + ";\n          let kk = e % " + u(kt) + ";\n";
  c += "          var v = " + A + "(0);\n";
  c += grouped ? "          if (valid && kk < kn) { v = load_a(a0 + r * rlx_p.k + k0 + kk); }\n"
               : "          if (kk < kn) { v = a_at(r, k0 + kk); }\n";
  c += "          xs[e] = v;\n        }\n";
  c += "        workgroupBarrier();\n";
  c += "        if (valid && col < rlx_p.n) {\n";
  c += "          for (var kk = s; kk < kn; kk += " + u(ks) + ") {\n";
  c += std::string("            let w = load_b(b0 + ") + (trans_b ? "col * rlx_p.ldb + k0 + kk" : "(k0 + kk) * rlx_p.ldb + col") + ");\n";
  for (int64_t r = 0; r < rows; ++r)
    c += "            acc[" + u(r) + "] = mad(acc[" + u(r) + "], xs[" + u(r * kt) + " + kk], w);\n";
  c += "          }\n        }\n        workgroupBarrier();\n      }\n";
  for (int64_t r = 0; r < rows; ++r) c += "      red[(s * " + u(rows) + " + " + u(r) + ") * " + u(cols) + " + c] = acc[" + u(r) + "];\n";
  c += "      workgroupBarrier();\n";
  c += "      if (tid < " + u(rows * cols) + ") {\n";
  c += "        let r = tid / " + u(cols) + ";\n        let cc = tid % " + u(cols) + ";\n";
  c += "        let oc = t * " + u(cols) + " + cc;\n";
  c += "        var sum = " + A + "(0);\n";
  c += "        for (var q = 0u; q < " + u(ks) + "; q++) { sum = add(sum, red[(q * " + u(rows) + " + r) * " + u(cols) +
       " + cc]); }\n";
  if (partial.empty())
    c += "        if (valid && oc < rlx_p.n) { rlx_epilogue((orow + r) * rlx_p.n + oc, oc, sum); }\n";
  else  // the split's partial sums: P[split][row][n]
    c += "        if (oc < rlx_p.n) { " + partial + "[rlx_p.o2 + (wid.y * " + u(rows) + " + r) * rlx_p.n + oc] = " +
         (A == "f32" ? "bitcast<u32>(sum)" : A == "i32" ? "bitcast<u32>(sum)" : "sum") + "; }\n";
  c += "      }\n      workgroupBarrier();\n    }\n  }\n}\n";
  return c;
}

// The GEMV of a packed row-major B whose rows start on word boundaries (even offset and ldb):
// each invocation reads one word, the two 16-bit weights of columns col and col + 1, so a
// workgroup of COLS x KS invocations owns 2 * COLS columns and a load moves twice the weights of
// the one-value-per-load kernel above (whose loads, not the bytes, bound a decode's GEMV).
// load_b2(i) -> vec2<f32>: elements i and i + 1 (i even).
std::string gemv_pair_body(uint32_t cols, uint32_t ks, uint32_t kt, int64_t rows, const std::string& partial) {
  const uint32_t nt = cols * ks, cc = 2 * cols;
  const std::string R = std::to_string(rows);
  std::string c;
  c += "var<workgroup> xs: array<f32, " + std::to_string(rows * kt) + ">;\n";
  c += "var<workgroup> red: array<f32, " + std::to_string(ks * rows * cc) + ">;\n";
  c += "@compute @workgroup_size(" + std::to_string(nt) + ")\n";
  c += "fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,\n"
       "        @builtin(num_workgroups) nwg: vec3<u32>) {\n";
  c += "  prologue(tid);\n";
  c += "  let c = tid % " + u(cols) + ";\n  let s = tid / " + u(cols) + ";\n";
  c += "  let tiles = (rlx_p.n + " + u(cc - 1) + ") / " + u(cc) + ";\n";
  c += "  let a0 = rlx_p.o0;\n  let b0 = rlx_p.o1;\n";
  c += "  let kb = wid.y * rlx_p.kchunk;\n  let ke = min(rlx_p.k, kb + rlx_p.kchunk);\n";
  c += "  for (var t = wid.x; t < tiles; t += nwg.x) {\n";
  c += "    let col = t * " + u(cc) + " + 2u * c;\n";
  c += "    var acc = array<vec2<f32>, " + R + ">();\n";
  c += "    for (var k0 = kb; k0 < ke; k0 += " + u(kt) + ") {\n";
  c += "      let kn = min(" + u(kt) + ", ke - k0);\n";
  c += "      for (var e = tid; e < " + u(rows * kt) + "; e += " + u(nt) + ") {\n";
  c += "        let r = e / " + u(kt) + ";\n        let kk = e % " + u(kt) + ";\n";
  c += "        var v = 0.0f;\n        if (kk < kn) { v = a_at(r, k0 + kk); }\n        xs[e] = v;\n      }\n";
  c += "      workgroupBarrier();\n";
  c += "      if (col < rlx_p.n) {\n";
  c += "        for (var kk = s; kk < kn; kk += " + u(ks) + ") {\n";
  c += "          let w = load_b2(b0 + (k0 + kk) * rlx_p.ldb + col);\n";
  for (int64_t r = 0; r < rows; ++r)
    c += "          acc[" + u(r) + "] = fma(vec2<f32>(xs[" + u(r * kt) + " + kk]), w, acc[" + u(r) + "]);\n";
  c += "        }\n      }\n      workgroupBarrier();\n    }\n";
  for (int64_t r = 0; r < rows; ++r) {
    const std::string at = "(s * " + u(rows) + " + " + u(r) + ") * " + u(cc) + " + 2u * c";
    c += "    red[" + at + "] = acc[" + u(r) + "].x;\n    red[" + at + " + 1u] = acc[" + u(r) + "].y;\n";
  }
  c += "    workgroupBarrier();\n";
  c += "    for (var e = tid; e < " + u(rows * cc) + "; e += " + u(nt) + ") {\n";
  c += "      let r = e / " + u(cc) + ";\n      let cx = e % " + u(cc) + ";\n      let oc = t * " + u(cc) + " + cx;\n";
  c += "      var sum = 0.0f;\n";
  c += "      for (var q = 0u; q < " + u(ks) + "; q++) { sum = sum + red[(q * " + u(rows) + " + r) * " + u(cc) + " + cx]; }\n";
  if (partial.empty())
    c += "      if (oc < rlx_p.n) { rlx_epilogue(r * rlx_p.n + oc, oc, sum); }\n";
  else
    c += "      if (oc < rlx_p.n) { " + partial + "[rlx_p.o2 + (wid.y * " + u(rows) + " + r) * rlx_p.n + oc] = bitcast<u32>(sum); }\n";
  c += "    }\n    workgroupBarrier();\n  }\n}\n";
  return c;
}

struct GemvShape {
  uint32_t cols, ks, kt = 256;
  bool pair = false;  // gemv_pair_body: 2 * cols columns per workgroup
  uint32_t columns() const { return pair ? 2 * cols : cols; }
};

GemvShape gemv_shape(const DeviceInfo& info, int64_t rows, bool trans_b, bool pair = false) {
  const uint32_t nt = info.limits.max_compute_invocations_per_workgroup >= 256 ? 256 : 128;
  GemvShape s{trans_b ? 8u : 64u, 0};
  s.pair = pair;
  s.ks = nt / s.cols;
  const uint64_t limit = info.limits.max_compute_workgroup_storage_size;
  while (s.kt > 32 && (rows * s.kt + uint64_t{s.ks} * rows * s.columns()) * 4 > limit) s.kt /= 2;
  return s;
}

// `fn prologue(tid)` (run first by every invocation) and `fn a_at(r, j)`: element j of A's row r.
// Without a producer A is read; with an absorbed RmsNorm each workgroup first computes the rows'
// 1 / rms (sum of squares over k in two levels in workgroup memory), and A = x * inv * gamma
// (+ beta) rounded to the dtype as the RmsNorm step stores it; with an absorbed FusedSwiGLU,
// A = round(round(silu(gate)) * up) from the 2k-wide rows, as the SwiGLU step computes it.
// Operands: x at index 0 (in place of A), gamma at `kg`, beta at `kb` (0: none).
std::string prologue_fns(const plan::Step* pro, const Binds& b, const Product& p, uint32_t nt, int64_t rows,
                         size_t kg, size_t kb, codegen::Helpers& h) {
  if (pro) L().dtype_helpers(p.t, h);  // the rounding to the dtype
  const std::string x = "rlx_b" + std::to_string(b.binding_of.at(0));
  auto ld = [&](const std::string& word) { return L().load(p.t, word); };
  if (!pro)
    return "fn prologue(tid: u32) {}\nfn a_at(r: u32, j: u32) -> " + p.acc + " { return load_a(rlx_p.o0 + r * rlx_p.k + j); }\n";
  auto rnd = [&](const std::string& v) { return is_half(p.t) ? L().round(p.t, v) : v; };
  if (const auto* sw = std::get_if<ops::FusedSwiGLU>(&pro->op)) {
    const std::string row = "rlx_p.o0 + r * 2u * rlx_p.k + j";
    const std::string gv = ld(x + "[" + row + (sw->gate_first ? "" : " + rlx_p.k") + "]");
    const std::string uv = ld(x + "[" + row + (sw->gate_first ? " + rlx_p.k" : "") + "]");
    return "fn prologue(tid: u32) {}\nfn a_at(r: u32, j: u32) -> f32 {\n  let gv = " + gv + ";\n  let sv = " +
           rnd("gv / (1.0f + exp(-gv))") + ";\n  return " + rnd("sv * " + uv) + ";\n}\n";
  }
  const float eps = static_cast<float>(std::get<ops::RmsNorm>(pro->op).eps);
  const uint32_t gs = std::min<uint32_t>(nt, 16), ng = nt / gs;
  std::string s = "var<workgroup> pro_q: array<f32, " + std::to_string(nt) + ">;\n";
  s += "var<workgroup> pro_q2: array<f32, " + std::to_string(ng) + ">;\n";
  s += "var<workgroup> pro_inv: array<f32, " + std::to_string(rows) + ">;\n";
  s += "fn prologue(tid: u32) {\n  for (var r = 0u; r < " + u(rows) + "; r++) {\n    var q = 0.0f;\n";
  s += "    for (var j = tid; j < rlx_p.k; j += " + u(nt) + ") {\n      let v = " + ld(x + "[rlx_p.o0 + r * rlx_p.k + j]") +
       ";\n      q += v * v;\n    }\n";
  s += "    pro_q[tid] = q;\n    workgroupBarrier();\n";
  s += "    if (tid < " + u(ng) + ") {\n      var a = 0.0f;\n      for (var i = 0u; i < " + u(gs) +
       "; i++) { a += pro_q[tid * " + u(gs) + " + i]; }\n      pro_q2[tid] = a;\n    }\n    workgroupBarrier();\n";
  s += "    if (tid == 0u) {\n      var t = 0.0f;\n      for (var i = 0u; i < " + u(ng) + "; i++) { t += pro_q2[i]; }\n";
  s += "      pro_inv[r] = 1.0f / sqrt(t / f32(rlx_p.k) + bitcast<f32>(" + u(std::bit_cast<uint32_t>(eps)) + "));\n    }\n";
  s += "    workgroupBarrier();\n  }\n}\n";
  std::string y = ld(x + "[rlx_p.o0 + r * rlx_p.k + j]") + " * pro_inv[r] * " + ld(b.at(kg, "j"));
  if (kb) y = "(" + y + " + " + ld(b.at(kb, "j")) + ")";
  return s + "fn a_at(r: u32, j: u32) -> f32 { return " + rnd(y) + "; }\n";
}

// `fn load_b2(i: u32) -> vec2<f32>`: packed elements i and i + 1 (i even: one word) of operand k.
std::string load_pair_fn(const Binds& b, size_t k, DType t) {
  const std::string w = "rlx_b" + std::to_string(b.binding_of.at(k)) + "[i >> 1u]";
  if (t == DType::F16) return "fn load_b2(i: u32) -> vec2<f32> { return unpack2x16float(" + w + "); }\n";
  return "fn load_b2(i: u32) -> vec2<f32> {\n  let w = " + w +
         ";\n  return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));\n}\n";
}

// Few column groups (a narrow B) leave most of a large GPU idle: K is then split over the y
// grid (about two workgroups per SM of a 132-SM GPU, each split reading at least 64 KiB of B),
// the splits' partial sums go to scratch and a second kernel adds them through the epilogue.
void lower_gemv(LowerContext& cx, const plan::Step& st, const plan::MatMulGeom& g, const Product& p, int64_t rows) {
  const Operand bop = cx.in(st.in.at(1));
  const bool pair = bop.packed && !g.trans_b && bop.half() % 2 == 0 && g.ldb % 2 == 0;
  const GemvShape s = gemv_shape(cx.info(), rows, g.trans_b, pair);
  const int64_t tiles = (g.n + s.columns() - 1) / s.columns();
  const int64_t b_bytes = g.k * g.n * static_cast<int64_t>(dtype_size(st.in.at(1).storage()));
  const int64_t target = std::min<int64_t>(264, tiles * std::max<int64_t>(1, b_bytes / 65536));
  const auto [splits, kchunk] = plan::k_splits(tiles, g.k, s.kt, std::min<int64_t>(target, kMaxGroups1d));
  const bool split = splits > 1;
  Args args;
  args.what = step_label(st);
  const plan::Step* pro = cx.absorbed_producer(st);
  if (pro && (p.acc != "f32" || p.checked))
    throw Error(args.what + ": internal: a GEMV prologue on a " + std::string(dtype_name(p.t)) + " product");
  args.add(cx.in(pro ? pro->in.at(0) : st.in.at(0)));  // the producer's x in place of A
  args.add(cx.in(st.in.at(1)));
  Operand partials;
  EpiOps e;
  if (split) {
    partials = cx.scratch(static_cast<size_t>(splits * rows * g.n) * 4, args.what + " split-K partial sums");
    partials.write = true;
    args.add(partials);
  } else {
    e = add_epilogue_ops(cx, st, p, args);
  }
  size_t kg = 0, kb = 0;
  if (pro && std::holds_alternative<ops::RmsNorm>(pro->op)) {
    kg = args.add(cx.in(pro->in.at(1)));
    if (pro->in.size() > 2) kb = args.add(cx.in(pro->in.at(2)));
  }
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("ldb", g.ldb);
  args.param("kchunk", kchunk);
  const Binds b = plan_binds(args.ops, p.checked);
  codegen::Helpers h;
  std::string fns = load_fn("load_a", b, 0, p, args.ops[0]) + load_fn("load_b", b, 1, p, args.ops[1]) + arith_fns(p, h);
  if (pair) fns += load_pair_fn(b, 1, p.t);
  fns += prologue_fns(pro, b, p, s.cols * s.ks, rows, kg, kb, h);
  if (!split) fns += epilogue_fn(p, b, e, h);
  const std::string pbuf = split ? "rlx_b" + std::to_string(b.binding_of[2]) : "";
  const std::string src = b.decls(args.names) + h.source() + fns +
                          (pair ? gemv_pair_body(s.cols, s.ks, s.kt, rows, pbuf)
                                : gemv_body(s.cols, s.ks, s.kt, rows, g.trans_b, false, p.acc, "", pbuf));
  const std::string pname = !pro ? "" : std::holds_alternative<ops::RmsNorm>(pro->op) ? "_rms_norm" : "_swiglu";
  cx.dispatch(Kernel{std::string(split ? "matmul_gemv_splitk" : "matmul_gemv") + (pair ? "_pairs" : "") + pname, src, true},
              args.ops, args.values, p.checked,
              clamp_groups(tiles), static_cast<uint32_t>(splits));
  if (!split) return;
  // The second pass: rows * n sums of `splits` partials, through the epilogue.
  Args sum;
  sum.what = args.what;
  partials.write = false;
  sum.add(partials);
  const EpiOps se = add_epilogue_ops(cx, st, p, sum);
  sum.param("total", rows * g.n);
  sum.param("n", g.n);
  sum.param("splits", splits);
  const Binds sb = plan_binds(sum.ops, p.checked);
  codegen::Helpers sh;
  std::string sfns = arith_fns(p, sh) + epilogue_fn(p, sb, se, sh);
  std::string body = "@compute @workgroup_size(256)\n";
  body += "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n";
  body += "  for (var i = gid.x; i < rlx_p.total; i += nwg.x * 256u) {\n";
  body += "    var acc = " + p.acc + "(0);\n";
  body += "    for (var q = 0u; q < rlx_p.splits; q++) { acc = add(acc, " +
          L().load(p.t, sb.at(0, "q * rlx_p.total + i")) + "); }\n";
  body += "    rlx_epilogue(i, i % rlx_p.n, acc);\n  }\n}\n";
  cx.dispatch(Kernel{"matmul_splitk_sum", sb.decls(sum.names) + sh.source() + sfns + body}, sum.ops, sum.values,
              p.checked, cx.groups_1d(static_cast<uint64_t>(rows * g.n), 256));
}

// ---- GroupedMatMul ----

void lower_grouped(LowerContext& cx, const plan::Step& st) {
  const auto& g = std::get<plan::GroupedMatMulGeom>(st.geom);
  const std::string what = step_label(st);
  const DType t = st.out.at(0).dtype, it = st.in.at(2).dtype;
  plan::check_grouped_matmul(st, "WebGPU");
  Product p = make_product(t);
  const GemvShape s = gemv_shape(cx.info(), 1, false);
  Args args;
  args.what = what;
  args.add(cx.in(st.in.at(0)));
  args.add(cx.in(st.in.at(1)));
  const EpiOps e = add_epilogue_ops(cx, st, p, args);
  const size_t ki = args.add(cx.in(st.in.at(2)));
  args.param("n", g.n);
  args.param("k", g.k);
  args.param("ldb", g.n);
  args.param("rows", g.m);
  args.param("experts", g.experts);
  const Binds b = plan_binds(args.ops, true);
  codegen::Helpers h;
  const std::string fns = load_fn("load_a", b, 0, p, args.ops[0]) + load_fn("load_b", b, 1, p, args.ops[1]) +
                          arith_fns(p, h) + epilogue_fn(p, b, e, h);
  const std::string raw = L().load(it, b.at(ki, "row"));
  std::string check;
  if (is_signed_int(it)) {
    check = "    let exs = " + raw + ";\n    let valid = exs >= 0i && exs < i32(rlx_p.experts);\n";
    check += "    let ex = select(0u, u32(exs), valid);\n";
  } else {
    check = "    let exu = " + raw + ";\n    let valid = exu < rlx_p.experts;\n    let ex = select(0u, exu, valid);\n";
  }
  check += "    if (!valid && tid == 0u && wid.x == 0u) { atomicMax(&rlx_err, " + std::to_string(codegen::kErrExpertIndex) + "); }\n";
  const std::string src = b.decls(args.names) + h.source() + fns + gemv_body(s.cols, s.ks, s.kt, 1, false, true, p.acc, check);
  cx.dispatch(Kernel{"grouped_matmul", src, true}, args.ops, args.values, true, clamp_groups((g.n + s.cols - 1) / s.cols),
              clamp_groups(g.m));
}

}  // namespace

const FamilyClaims kMatmulClaims{kind, node};

void lower_matmul(LowerContext& cx, const plan::Step& st) {
  if (std::holds_alternative<ops::GroupedMatMul>(st.op)) return lower_grouped(cx, st);
  const plan::MatmulOperands mo = plan::matmul_operands(st, "WebGPU");
  const auto& g = std::get<plan::MatMulGeom>(st.geom);
  Product p = make_product(st.out.at(0).dtype);
  if (mo.fused) {
    p.act = g.activation;
    if (mo.bias) p.bias = mo.bias, p.bias_len = mo.bias_len;
    p.residual = mo.residual;
  }
  if (const int64_t rows = gemv_rows(g)) return lower_gemv(cx, st, g, p, rows);
  if (const plan::Step* pro = cx.absorbed_producer(st)) lower_step(cx, *pro);  // not a GEMV after all: run it
  lower_gemm(cx, st, g, p);
}

int64_t gemv_prologue_rows(const plan::Step& st) {
  if (!std::holds_alternative<ops::MatMul>(st.op) && !std::holds_alternative<ops::FusedMatMulBiasAct>(st.op)) return 0;
  const DType t = st.out.at(0).dtype;
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) return 0;
  return gemv_rows(std::get<plan::MatMulGeom>(st.geom));
}

}  // namespace rlx::webgpu
