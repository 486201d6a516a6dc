// CUDA printer of elementwise kernel plans: broadcasting is index arithmetic by compile-time
// constants; a dense plan moves `vec` elements per thread with vector loads and stores (the
// prelude's Vec<T, N>).
#include <sstream>

#include "codegen/elementwise.h"

namespace rlx::codegen {

std::string print_cuda_elementwise(const ElementwisePlan& p, bool early_dependents) {
  const Language& L = cuda_language();
  const size_t n_in = p.in_dtypes.size();
  const int64_t rank = static_cast<int64_t>(p.out_dims.size());
  const std::string I = p.wide_index ? "unsigned long long" : "unsigned int";
  const std::string out_t = L.storage_type(p.out_dtype);
  std::ostringstream b;
  b << "extern \"C\" __global__ void rlx_elementwise(" << out_t << "* out";
  for (size_t k = 0; k < n_in; ++k) b << ", const " << L.storage_type(p.in_dtypes[k]) << "* in" << k;
  if (p.error_flag) b << ", int* err";
  b << ") {\n";
  b << (early_dependents ? "  rlx_pdl_begin_after_dependents();\n" : "  rlx_pdl_begin();\n");
  b << "  const " << I << " items = " << p.items << "ull;\n";
  b << "  for (" << I << " i = blockIdx.x * (" << I << ")blockDim.x + threadIdx.x; i < items; i += (" << I
    << ")gridDim.x * blockDim.x) {\n";
  if (p.dense) {
    for (size_t k = 0; k < n_in; ++k) {
      const std::string T = L.storage_type(p.in_dtypes[k]);
      if (p.access[k] == InputAccess::Contiguous)
        b << "    const Vec<" << T << ", " << p.vec << "> a" << k << " = *(const Vec<" << T << ", " << p.vec << ">*)(in"
          << k << " + (" << I << ")i * " << p.vec << ");\n";
      else
        b << "    const " << T << " s" << k << " = in" << k << "[0];\n";
    }
    b << "    Vec<" << out_t << ", " << p.vec << "> o;\n";
    b << "#pragma unroll\n    for (int e = 0; e < " << p.vec << "; ++e) {\n";
  } else {
    // Unravel the output index (innermost dim first) into each input's element offset.
    for (size_t k = 0; k < n_in; ++k) b << "    " << I << " off" << k << " = 0;\n";
    b << "    " << I << " t = i;\n";
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t dim = p.out_dims[static_cast<size_t>(d)];
      b << "    { const " << I << " c = " << (d == 0 ? std::string("t") : "t % " + std::to_string(dim) + "u");
      b << ";" << (d == 0 ? "" : " t /= " + std::to_string(dim) + "u;");
      for (size_t k = 0; k < n_in; ++k) {
        const int64_t s = p.in_strides[k][static_cast<size_t>(d)];
        if (s != 0) b << " off" << k << " += c * " << s << "u;";
      }
      b << " }\n";
    }
    b << "    {\n";
  }
  std::vector<std::string> xs;
  for (size_t k = 0; k < n_in; ++k) {
    std::string src;
    if (!p.dense) src = "in" + std::to_string(k) + "[off" + std::to_string(k) + "]";
    else if (p.access[k] == InputAccess::Contiguous) src = "a" + std::to_string(k) + ".v[e]";
    else src = "s" + std::to_string(k);
    b << "      const " << L.compute_type(p.in_dtypes[k]) << " x" << k << " = " << L.load(p.in_dtypes[k], src) << ";\n";
    xs.push_back("x" + std::to_string(k));
  }
  Helpers h;
  const ChainCode c = chain_code(L, p, xs, [](const std::string& t, const std::string& n) { return "const " + t + " " + n; }, h);
  for (const auto& line : c.lines) b << "      " << line << "\n";
  if (p.dense) {
    b << "      o.v[e] = " << L.store(p.out_dtype, c.result) << ";\n    }\n";
    b << "    *(Vec<" << out_t << ", " << p.vec << ">*)(out + (" << I << ")i * " << p.vec << ") = o;\n";
  } else {
    b << "      out[i] = " << L.store(p.out_dtype, c.result) << ";\n    }\n";
  }
  b << "  }\n}\n";
  return b.str();
}

}  // namespace rlx::codegen
