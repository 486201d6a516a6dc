#include "codegen/elementwise.h"

#include <algorithm>

#include "rlx/error.h"
#include "rlx/shape.h"

namespace rlx::codegen {
namespace {

DType arg_dtype(int32_t a, const std::vector<DType>& in, const std::vector<DType>& steps) {
  if (a >= 0) return in.at(static_cast<size_t>(a));
  return steps.at(static_cast<size_t>(-a - 1));
}

bool int_checked(BinaryKind k, DType t) {
  return is_int(t) && (k == BinaryKind::Div || k == BinaryKind::Mod || k == BinaryKind::FMod || k == BinaryKind::Pow);
}

}  // namespace

std::vector<RegionStep> matmul_epilogue_chain(bool bias, std::optional<ActKind> act, bool residual) {
  std::vector<RegionStep> chain;
  int32_t x = 0;
  auto last = [&] { return -static_cast<int32_t>(chain.size()); };
  if (bias) {
    chain.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {x, 1}});
    x = last();
  }
  if (act) {
    chain.push_back({RegionStepKind::Activation, static_cast<int32_t>(*act), DType::F32, {x}});
    x = last();
  }
  if (residual)
    chain.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {x, bias ? 2 : 1}});
  return chain;
}

std::vector<RegionStep> single_step_chain(const Op& op) {
  RegionStep s;
  if (auto* b = std::get_if<ops::Binary>(&op)) s = {RegionStepKind::Binary, static_cast<int32_t>(b->kind), DType::F32, {0, 1}};
  else if (auto* c = std::get_if<ops::Compare>(&op)) s = {RegionStepKind::Compare, static_cast<int32_t>(c->kind), DType::F32, {0, 1}};
  else if (auto* a = std::get_if<ops::Activation>(&op)) s = {RegionStepKind::Activation, static_cast<int32_t>(a->kind), DType::F32, {0}};
  else if (auto* k = std::get_if<ops::Cast>(&op)) s = {RegionStepKind::Cast, 0, k->to, {0}};
  else if (std::holds_alternative<ops::Where>(op)) s = {RegionStepKind::Where, 0, DType::F32, {0, 1, 2}};
  else if (auto* r = std::get_if<ops::ElementwiseRegion>(&op)) return r->steps;
  else throw Error(std::string("elementwise codegen: '") + op_name(op) + "' is not an elementwise op");
  return {s};
}

std::vector<DType> chain_step_dtypes(const std::vector<RegionStep>& steps, const std::vector<DType>& in) {
  std::vector<DType> out;
  auto dtype = [&](int32_t a) -> DType {
    if (a >= 0) {
      if (static_cast<size_t>(a) >= in.size()) throw Error("elementwise codegen: a region step reads a missing input");
      return in[static_cast<size_t>(a)];
    }
    if (static_cast<size_t>(-static_cast<int64_t>(a) - 1) >= out.size())
      throw Error("elementwise codegen: a region step reads a later step");
    return out[static_cast<size_t>(-a - 1)];
  };
  for (const auto& st : steps) {
    const size_t want = st.kind == RegionStepKind::Where ? 3 : (st.kind == RegionStepKind::Binary || st.kind == RegionStepKind::Compare) ? 2 : 1;
    if (st.args.size() != want) throw Error("elementwise codegen: a region step has the wrong number of operands");
    for (int32_t a : st.args) (void)dtype(a);
    switch (st.kind) {
      case RegionStepKind::Binary:
      case RegionStepKind::Activation: out.push_back(dtype(st.args[0])); break;
      case RegionStepKind::Compare: out.push_back(DType::Bool); break;
      case RegionStepKind::Cast: out.push_back(st.to); break;
      case RegionStepKind::Where: out.push_back(dtype(st.args[1])); break;
    }
  }
  return out;
}

bool chain_supported(const Language& lang, const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                     std::string* why) {
  try {
    const auto dts = chain_step_dtypes(steps, in_dtypes);
    auto check_held = [&](DType t) {
      if (!lang.storage_dtype(t)) throw Error(lang.storage_gap(t));
    };
    for (DType t : in_dtypes) check_held(t);
    for (DType t : dts) check_held(t);
    ElementwisePlan p;
    p.steps = steps;
    p.in_dtypes = in_dtypes;
    p.step_dtypes = dts;
    p.out_dtype = dts.empty() ? DType::F32 : dts.back();
    std::vector<std::string> names;
    for (size_t k = 0; k < in_dtypes.size(); ++k) names.push_back("x" + std::to_string(k));
    Helpers h;
    chain_code(lang, p, names, [](const std::string& t, const std::string& n) { return t + " " + n; }, h);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

ElementwisePlan plan_elementwise(const std::vector<RegionStep>& steps, const std::vector<DType>& in_dtypes,
                                 DType out_dtype, const plan::ElementwiseGeom& geom, int max_vec) {
  ElementwisePlan p;
  p.steps = steps;
  p.in_dtypes = in_dtypes;
  p.step_dtypes = chain_step_dtypes(steps, in_dtypes);
  if (p.step_dtypes.empty() || p.step_dtypes.back() != out_dtype)
    throw Error("elementwise codegen: the chain's result dtype is not the output's");
  if (geom.in_strides.size() != in_dtypes.size())
    throw Error("elementwise codegen: the geometry has " + std::to_string(geom.in_strides.size()) + " inputs, the chain " +
                std::to_string(in_dtypes.size()));
  p.out_dtype = out_dtype;
  p.out_dims = geom.out_dims;
  p.in_strides = geom.in_strides;
  p.numel = geom.numel;
  const auto contig = contiguous_strides(geom.out_dims);
  for (const auto& s : geom.in_strides) {
    if (s == contig) p.access.push_back(InputAccess::Contiguous);
    else if (std::all_of(s.begin(), s.end(), [](int64_t v) { return v == 0; })) p.access.push_back(InputAccess::Scalar);
    else {
      p.access.push_back(InputAccess::Strided);
      p.dense = false;
    }
  }
  size_t widest = dtype_size(out_dtype);
  for (DType t : in_dtypes) widest = std::max(widest, dtype_size(t));
  if (p.dense) {
    p.vec = std::min<int>(std::max(max_vec, 1), static_cast<int>(16 / widest));
    while (p.vec > 1 && p.numel % p.vec != 0) p.vec /= 2;
    p.vec = std::max(p.vec, 1);
  }
  p.items = p.numel / p.vec;
  const int64_t limit = int64_t(1) << 31;
  p.wide_index = p.numel >= limit;
  for (size_t k = 0; k < p.in_strides.size(); ++k)
    for (size_t d = 0; d < p.out_dims.size(); ++d)
      if (p.in_strides[k][d] * p.out_dims[d] >= limit) p.wide_index = true;
  for (const auto& st : steps)
    if (st.kind == RegionStepKind::Binary &&
        int_checked(static_cast<BinaryKind>(st.op), arg_dtype(st.args[0], in_dtypes, p.step_dtypes)))
      p.error_flag = true;
  return p;
}

ChainCode chain_code(const Language& lang, const ElementwisePlan& plan, const std::vector<std::string>& inputs,
                     DeclFn decl, Helpers& helpers) {
  ChainCode c;
  auto ref = [&](int32_t a) { return a >= 0 ? inputs.at(static_cast<size_t>(a)) : "v" + std::to_string(-a - 1); };
  auto ref_dtype = [&](int32_t a) { return arg_dtype(a, plan.in_dtypes, plan.step_dtypes); };
  for (DType t : plan.in_dtypes) lang.dtype_helpers(t, helpers);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const RegionStep& st = plan.steps[s];
    const DType result = plan.step_dtypes[s];
    lang.dtype_helpers(result, helpers);
    std::string e;
    switch (st.kind) {
      case RegionStepKind::Binary:
        e = lang.binary(static_cast<BinaryKind>(st.op), ref_dtype(st.args[0]), ref(st.args[0]), ref(st.args[1]), helpers,
                        nullptr);
        break;
      case RegionStepKind::Compare:
        e = lang.compare(static_cast<CompareKind>(st.op), ref_dtype(st.args[0]), ref(st.args[0]), ref(st.args[1]));
        break;
      case RegionStepKind::Activation: {
        const auto k = static_cast<ActKind>(st.op);
        const DType t = ref_dtype(st.args[0]);
        if (is_float(t))
          for (MathFn f : activation_math_fns(k))
            if (!lang.has_math(f, t == DType::F64 ? DType::F64 : DType::F32))
              throw Error(std::string(lang.name()) + " elementwise: activation " + enum_name(k) + " needs " +
                          math_fn_name(f) + ", which " + lang.name() + " has not for " + dtype_name(t));
        e = lang.activation(k, t, ref(st.args[0]), helpers);
        break;
      }
      case RegionStepKind::Cast: e = lang.cast(st.to, ref_dtype(st.args[0]), ref(st.args[0])); break;
      case RegionStepKind::Where: e = lang.where(ref(st.args[0]), ref(st.args[1]), ref(st.args[2])); break;
    }
    c.lines.push_back(decl(lang.compute_type(result), "v" + std::to_string(s)) + " = " + lang.round(result, e) + ";");
  }
  c.result = "v" + std::to_string(plan.steps.size() - 1);
  return c;
}

}  // namespace rlx::codegen
