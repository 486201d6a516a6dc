#include "plan/copy_work.h"

#include <cstdint>

#include "plan/gpu_claims.h"
#include "rlx/error.h"

namespace rlx::plan {
CopyWork copy_work(const Step& st, std::string_view backend) {
  if (const auto* cg = std::get_if<CopyGeom>(&st.geom)) return StridedCopyWork{cg->out_dims, cg->in_strides, cg->in_offset};
  if (std::holds_alternative<ops::Narrow>(st.op)) {
    const auto& g = std::get<AxisGeom>(st.geom);
    if (g.outer == 1) return ContiguousCopyWork{g.start * g.inner, g.out_axis * g.inner};
    return StridedCopyWork{{g.outer, g.out_axis * g.inner}, {g.axis * g.inner, 1}, g.start * g.inner};
  }
  if (std::holds_alternative<ops::Concat>(st.op)) return ConcatCopyWork{};
  if (std::holds_alternative<ops::Gather>(st.op)) return GatherCopyWork{};
  if (const auto* op = std::get_if<ops::Pad>(&st.op)) return PadCopyWork{op};
  throw Error(step_node_label(st) + ": not a data-movement op of the " + std::string(backend) + " backend");
}

bool copy_claims_kind(std::string_view n) {
  return n == "reshape" || n == "stop_gradient" || n == "transpose" || n == "narrow" || n == "concat" ||
         n == "expand" || n == "reverse" || n == "gather" || n == "pad";
}

bool copy_index_dtype(DType t) {
  return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::U32;
}

bool copy_claims_gather_indices(const Graph& g, const Node& n, std::string_view backend, std::string* why) {
  if (std::holds_alternative<ops::Gather>(n.op)) {
    const DType it = g.shape(n.inputs.at(1)).dtype;
    if (!copy_index_dtype(it))
      return claim_refuse(why, std::string(backend) + " gather needs integer indices, got " + dtype_name(it));
  }
  return true;
}

uint32_t index_u32(int64_t v, const std::string& what, std::string_view backend) {
  if (v < 0 || v > INT32_MAX)
    throw Error(what + ": the " + std::string(backend) + " kernels index with 32 bits; a size of " + std::to_string(v) +
                " elements (2^31 or more) is too large: split the tensor or use the CUDA/CPU backend");
  return static_cast<uint32_t>(v);
}

uint32_t index_i32_bits(int64_t v, const std::string& what, std::string_view backend) {
  if (v < INT32_MIN || v > INT32_MAX)
    throw Error(what + ": the " + std::string(backend) + " kernels index with 32 bits; an element offset of " +
                std::to_string(v) + " does not fit: split the tensor or use the CUDA/CPU backend");
  return static_cast<uint32_t>(static_cast<int32_t>(v));
}

std::vector<uint32_t> pad_table_words(const PadGeom& pg, const std::string& what, std::string_view backend) {
  std::vector<uint32_t> words{static_cast<uint32_t>(pg.out_dims.size())};
  for (int64_t d : pg.out_dims) words.push_back(index_u32(d, what, backend));
  for (int64_t s : pg.in_strides) words.push_back(index_i32_bits(s, what, backend));
  for (int64_t o : pg.source_offset) words.push_back(index_u32(o, what, backend));
  for (int64_t s : pg.source) words.push_back(index_i32_bits(s, what, backend));
  return words;
}

}  // namespace rlx::plan
