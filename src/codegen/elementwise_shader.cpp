// GLSL and WGSL printers of elementwise kernel plans (the binding layouts are documented in
// codegen/elementwise.h). Both run a grid-stride loop over the plan's work items with 256
// invocations per workgroup, so a dispatch of any size up to the device's limit covers them.
#include <algorithm>
#include <set>
#include <sstream>

#include "codegen/elementwise.h"
#include "rlx/error.h"

namespace rlx::codegen {
namespace {

constexpr int kWorkgroup = 256;

void check_narrow(const ElementwisePlan& p, const char* lang) {
  if (p.wide_index)
    throw Error(std::string(lang) + " elementwise: " + std::to_string(p.numel) +
                " elements (or a broadcast stride) need 64-bit indices; the kernel indexes with 32 bits (split the "
                "tensor below 2^31 elements)");
}

// Unravels the output index `i` (innermost dim first) into every strided input's offset
// `off<k>`, in the language's syntax (`decl_var(name)` declares a mutable u32).
void unravel(std::ostringstream& b, const ElementwisePlan& p, const std::string& indent, bool wgsl) {
  const size_t n_in = p.in_dtypes.size();
  for (size_t k = 0; k < n_in; ++k) b << indent << (wgsl ? "var off" : "uint off") << k << (wgsl ? " = 0u;\n" : " = 0u;\n");
  b << indent << (wgsl ? "var t = i;\n" : "uint t = i;\n");
  for (int64_t d = static_cast<int64_t>(p.out_dims.size()) - 1; d >= 0; --d) {
    const int64_t dim = p.out_dims[static_cast<size_t>(d)];
    b << indent << "{ " << (wgsl ? "let c = " : "uint c = ") << (d == 0 ? std::string("t") : "t % " + std::to_string(dim) + "u")
      << ";" << (d == 0 ? "" : " t = t / " + std::to_string(dim) + "u;");
    for (size_t k = 0; k < n_in; ++k) {
      const int64_t s = p.in_strides[k][static_cast<size_t>(d)];
      if (s != 0) b << " off" << k << " += c * " << s << "u;";
    }
    b << " }\n";
  }
}

// The element index of input k for work item i (element e of its vector when dense).
std::string input_index(const ElementwisePlan& p, size_t k) {
  if (!p.dense) return "off" + std::to_string(k);
  if (p.access[k] == InputAccess::Scalar) return "0u";
  return p.vec == 1 ? "i" : "(i * " + std::to_string(p.vec) + "u + e)";
}

std::string glsl_extensions(const ElementwisePlan& p) {
  std::set<DType> ts(p.in_dtypes.begin(), p.in_dtypes.end());
  ts.insert(p.step_dtypes.begin(), p.step_dtypes.end());
  return codegen::glsl_extensions(ts);
}

}  // namespace

std::string glsl_extensions(const std::set<DType>& ts) {
  bool b8 = false, b16 = false, wide = false;
  for (DType t : ts) {
    b8 |= t == DType::I8 || t == DType::U8 || t == DType::Bool;
    b16 |= t == DType::I16 || t == DType::F16 || t == DType::BF16;
    wide |= t == DType::I64;
  }
  std::string s;
  if (b8 || b16 || wide) s += "#extension GL_EXT_shader_explicit_arithmetic_types : require\n";
  if (b8) s += "#extension GL_EXT_shader_8bit_storage : require\n";
  if (b16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  return s;
}

std::string print_glsl_elementwise(const ElementwisePlan& p) {
  check_narrow(p, "GLSL");
  const Language& L = glsl_language();
  const size_t n_in = p.in_dtypes.size();
  std::ostringstream b;
  b << "#version 450\n" << glsl_extensions(p);
  b << "layout(local_size_x = " << kWorkgroup << ") in;\n";
  b << "layout(std430, set = 0, binding = 0) buffer RlxOut { " << L.storage_type(p.out_dtype) << " data[]; } rlx_out;\n";
  for (size_t k = 0; k < n_in; ++k)
    b << "layout(std430, set = 0, binding = " << k + 1 << ") readonly buffer RlxIn" << k << " { "
      << L.storage_type(p.in_dtypes[k]) << " data[]; } rlx_in" << k << ";\n";
  if (p.error_flag) b << "layout(std430, set = 0, binding = " << n_in + 1 << ") buffer RlxErr { int code; } rlx_err;\n";
  b << "layout(push_constant) uniform RlxOffsets { uint o0;";
  for (size_t k = 0; k < n_in; ++k) b << " uint o" << k + 1 << ";";
  b << " } rlx_off;\n";

  Helpers h;
  std::vector<std::string> xs;
  for (size_t k = 0; k < n_in; ++k) xs.push_back("x" + std::to_string(k));
  const ChainCode c = chain_code(L, p, xs, [](const std::string& t, const std::string& n) { return "const " + t + " " + n; }, h);
  L.dtype_helpers(p.out_dtype, h);
  b << h.source();

  b << "void main() {\n";
  b << "  const uint items = " << p.items << "u;\n";
  b << "  for (uint i = gl_GlobalInvocationID.x; i < items; i += gl_NumWorkGroups.x * " << kWorkgroup << "u) {\n";
  std::string ind = "    ";
  if (!p.dense) unravel(b, p, ind, false);
  if (p.dense && p.vec > 1) {
    b << ind << "for (uint e = 0u; e < " << p.vec << "u; ++e) {\n";
    ind += "  ";
  }
  for (size_t k = 0; k < n_in; ++k)
    b << ind << "const " << L.compute_type(p.in_dtypes[k]) << " x" << k << " = "
      << L.load(p.in_dtypes[k], "rlx_in" + std::to_string(k) + ".data[rlx_off.o" + std::to_string(k + 1) + " + " +
                                    input_index(p, k) + "]")
      << ";\n";
  for (const auto& line : c.lines) b << ind << line << "\n";
  const std::string out_index = p.dense && p.vec > 1 ? "(i * " + std::to_string(p.vec) + "u + e)" : "i";
  b << ind << "rlx_out.data[rlx_off.o0 + " << out_index << "] = " << L.store(p.out_dtype, c.result) << ";\n";
  if (p.dense && p.vec > 1) b << "    }\n";
  b << "  }\n}\n";
  return b.str();
}

bool wgsl_error_flag(const ElementwisePlan& p) {
  if (p.error_flag) return true;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const RegionStep& st = p.steps[s];
    if (st.kind != RegionStepKind::Binary || p.step_dtypes[s] != DType::I64) continue;
    const auto k = static_cast<BinaryKind>(st.op);
    if (k == BinaryKind::Add || k == BinaryKind::Sub || k == BinaryKind::Mul || k == BinaryKind::Pow) return true;
  }
  return false;
}

std::string print_wgsl_elementwise(const ElementwisePlan& p, const std::vector<int>& binding_of_in) {
  check_narrow(p, "WGSL");
  const Language& L = wgsl_language();
  const size_t n_in = p.in_dtypes.size();
  for (DType t : p.in_dtypes)
    if (!L.storage_dtype(t)) throw Error(L.storage_gap(t));
  for (DType t : p.step_dtypes)
    if (!L.storage_dtype(t)) throw Error(L.storage_gap(t));
  std::vector<int> binding_of = binding_of_in;
  if (binding_of.empty())
    for (size_t k = 0; k <= n_in; ++k) binding_of.push_back(static_cast<int>(k));
  if (binding_of.size() != n_in + 1)
    throw Error("WGSL elementwise: binding_of has " + std::to_string(binding_of.size()) + " entries for " +
                std::to_string(n_in + 1) + " operands");
  const int n_bind = *std::max_element(binding_of.begin(), binding_of.end()) + 1;
  for (int v : binding_of)
    if (v < 0) throw Error("WGSL elementwise: a negative binding index");
  std::ostringstream b;
  for (int bi = 0; bi < n_bind; ++bi) {
    if (std::find(binding_of.begin(), binding_of.end(), bi) == binding_of.end())
      throw Error("WGSL elementwise: binding " + std::to_string(bi) + " is used by no operand (number them from 0)");
    const bool written = binding_of[0] == bi;
    b << "@group(0) @binding(" << bi << ") var<storage, " << (written ? "read_write" : "read") << "> rlx_b" << bi
      << ": array<u32>;\n";
  }
  int next = n_bind;
  if (wgsl_error_flag(p)) b << "@group(0) @binding(" << next++ << ") var<storage, read_write> rlx_err: atomic<i32>;\n";
  b << "struct RlxOffsets {";
  for (size_t k = 0; k <= n_in; ++k) b << " o" << k << ": u32,";
  b << " }\n";
  b << "@group(0) @binding(" << next << ") var<uniform> rlx_off: RlxOffsets;\n";

  Helpers h;
  std::vector<std::string> xs;
  for (size_t k = 0; k < n_in; ++k) xs.push_back("x" + std::to_string(k));
  const ChainCode c = chain_code(L, p, xs, [](const std::string&, const std::string& n) { return "let " + n; }, h);
  L.dtype_helpers(p.out_dtype, h);
  b << h.source();

  b << "@compute @workgroup_size(" << kWorkgroup << ")\n";
  b << "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n";
  b << "  let items = " << p.items << "u;\n";
  b << "  for (var i = gid.x; i < items; i += nwg.x * " << kWorkgroup << "u) {\n";
  std::string ind = "    ";
  if (!p.dense) unravel(b, p, ind, true);
  if (p.dense && p.vec > 1) {
    b << ind << "for (var e = 0u; e < " << p.vec << "u; e++) {\n";
    ind += "  ";
  }
  for (size_t k = 0; k < n_in; ++k)
    b << ind << "let x" << k << " = "
      << L.load(p.in_dtypes[k], "rlx_b" + std::to_string(binding_of[k + 1]) + "[rlx_off.o" + std::to_string(k + 1) +
                                    " + " + input_index(p, k) + "]")
      << ";\n";
  for (const auto& line : c.lines) b << ind << line << "\n";
  const std::string out_index = p.dense && p.vec > 1 ? "(i * " + std::to_string(p.vec) + "u + e)" : "i";
  b << ind << "rlx_b" << binding_of[0] << "[rlx_off.o0 + " << out_index << "] = " << L.store(p.out_dtype, c.result)
    << ";\n";
  if (p.dense && p.vec > 1) b << "    }\n";
  b << "  }\n}\n";
  return b.str();
}

}  // namespace rlx::codegen
