#include "backends/vulkan/spirv_coopmat.h"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "rlx/error.h"

namespace rlx::vulkan {
namespace {

// Opcodes, capabilities and enumerants (SPIR-V unified spec; SPV_KHR_cooperative_matrix,
// SPV_NV_cooperative_matrix, SPV_KHR_bfloat16).
enum : uint32_t {
  kOpUndef = 1, kOpExtension = 10, kOpCapability = 17, kOpTypeInt = 21, kOpTypeFloat = 22,
  kOpConstantTrue = 41, kOpConstantFalse = 42, kOpConstant = 43, kOpConstantComposite = 44, kOpConstantNull = 46,
  kOpTypeArray = 28, kOpTypeRuntimeArray = 29, kOpTypeStruct = 30, kOpTypePointer = 32,
  kOpFunctionParameter = 55, kOpFunctionCall = 57, kOpVariable = 59, kOpLoad = 61, kOpAccessChain = 65,
  kOpInBoundsAccessChain = 66, kOpCompositeConstruct = 80,
  kOpCompositeExtract = 81, kOpCompositeInsert = 82, kOpCopyObject = 83, kOpFConvert = 115, kOpSelect = 169,
  kOpPhi = 245,
  kOpTypeCoopKHR = 4456, kOpCoopLoadKHR = 4457, kOpCoopStoreKHR = 4458, kOpCoopMulAddKHR = 4459,
  kOpCoopLengthKHR = 4460,
  kOpTypeCoopNV = 5358, kOpCoopLoadNV = 5359, kOpCoopStoreNV = 5360, kOpCoopMulAddNV = 5361, kOpCoopLengthNV = 5362,
  kCapCoopNV = 5357, kCapCoopKHR = 6022, kCapBf16Type = 5116, kCapBf16Coop = 5118,
  kBFloat16Encoding = 0,
};
enum Role : uint32_t { kUseA = 0, kUseB = 1, kUseAcc = 2, kNone = 3 };
constexpr uint32_t kRowMajor = 0, kColumnMajor = 1;

using Inst = std::vector<uint32_t>;

uint32_t opcode(const Inst& i) { return i[0] & 0xffffu; }
Inst make(uint32_t op, std::vector<uint32_t> operands) {
  operands.insert(operands.begin(), (static_cast<uint32_t>(operands.size() + 1) << 16) | op);
  return operands;
}
std::vector<uint32_t> string_words(const std::string& s) {
  std::vector<uint32_t> w((s.size() + 4) / 4, 0u);
  std::memcpy(w.data(), s.data(), s.size());
  return w;
}
std::string string_of(const Inst& i) {
  std::string s;
  for (size_t k = 1; k < i.size(); ++k)
    for (int b = 0; b < 4; ++b) {
      const char c = static_cast<char>((i[k] >> (8 * b)) & 0xffu);
      if (c == '\0') return s;
      s += c;
    }
  return s;
}

// Instructions whose words 1 and 2 are (result type, result id) and that can produce a matrix.
bool typed_result(uint32_t op) {
  switch (op) {
    case kOpUndef: case kOpConstantComposite: case kOpConstantNull: case kOpFunctionParameter: case kOpFunctionCall:
    case kOpLoad: case kOpCompositeConstruct: case kOpCompositeExtract: case kOpCompositeInsert: case kOpCopyObject:
    case kOpFConvert: case kOpSelect: case kOpPhi: case kOpCoopLoadNV: case kOpCoopMulAddNV: case kOpVariable:
    case kOpAccessChain: case kOpInBoundsAccessChain:
      return true;
    default:
      return op >= 126 && op <= 143;  // OpSNegate .. OpMatrixTimesScalar: arithmetic on matrices
  }
}
// Of those, the ones that may yield a bf16 A / B matrix (moving bits, or converting from f32).
bool keeps_bits(uint32_t op) {
  return op == kOpUndef || op == kOpFunctionParameter || op == kOpFunctionCall || op == kOpLoad || op == kOpCopyObject ||
         op == kOpSelect || op == kOpPhi || op == kOpCoopLoadNV || op == kOpFConvert;
}

}  // namespace

KhrRewrite khr_rewrite_of(const std::string& source) {
  if (source.rfind(kKhrBf16Directive, 0) == 0) return KhrRewrite::Bf16;
  if (source.rfind(kKhrDirective, 0) == 0) return KhrRewrite::F16;
  return KhrRewrite::None;
}

std::vector<uint32_t> coopmat_nv_to_khr(const std::vector<uint32_t>& words, const std::string& name, bool bf16_operands) {
  auto fail = [&](const std::string& why) -> Error {
    return Error("Vulkan: kernel '" + name + "': internal: its SPIR-V cannot take KHR" +
                 (bf16_operands ? " bf16" : "") + " cooperative matrices: " + why);
  };
  if (words.size() < 5 || words[0] != 0x07230203u) throw fail("not a SPIR-V module");
  std::vector<Inst> insts;
  for (size_t p = 5; p < words.size();) {
    const uint32_t wc = words[p] >> 16;
    if (wc == 0 || p + wc > words.size()) throw fail("a truncated instruction at word " + std::to_string(p));
    insts.emplace_back(words.begin() + static_cast<std::ptrdiff_t>(p), words.begin() + static_cast<std::ptrdiff_t>(p + wc));
    p += wc;
  }
  uint32_t bound = words[3];

  std::unordered_map<uint32_t, uint32_t> type_of;   // value id -> type id
  std::unordered_map<uint32_t, Role> role;          // NV matrix type id -> its use
  std::unordered_map<uint32_t, uint32_t> comp_of;   // NV matrix type id -> component type id
  std::unordered_map<uint32_t, uint32_t> float_width;
  std::unordered_map<uint32_t, bool> bools;
  std::unordered_map<uint32_t, uint32_t> pointee, element, constants;
  std::unordered_map<uint32_t, std::vector<uint32_t>> members;
  uint32_t uint_type = 0;
  for (const Inst& i : insts) {
    const uint32_t op = opcode(i);
    if (op == kOpTypePointer && i.size() == 4) pointee[i[1]] = i[3];
    if ((op == kOpTypeArray || op == kOpTypeRuntimeArray) && i.size() >= 3) element[i[1]] = i[2];
    if (op == kOpTypeStruct) members[i[1]] = Inst(i.begin() + 2, i.end());
    if (op == kOpConstant && i.size() == 4) constants[i[2]] = i[3];
    if (op == kOpTypeInt && i.size() >= 4 && i[2] == 32 && i[3] == 0) uint_type = i[1];
    if (op == kOpTypeFloat && i.size() >= 3) float_width[i[1]] = i[2];
    if (op == kOpConstantTrue || op == kOpConstantFalse) bools[i[2]] = op == kOpConstantTrue;
    if (op == kOpTypeCoopNV && i.size() == 6) role[i[1]] = kNone, comp_of[i[1]] = i[2];
    if (typed_result(op) && i.size() >= 3) type_of[i[2]] = i[1];
  }
  if (role.empty()) throw fail("it declares no NV cooperative matrix");
  if (uint_type == 0) throw fail("it declares no 32-bit unsigned integer type");
  auto assign = [&](uint32_t type, Role r, const char* what) {
    auto it = role.find(type);
    if (it == role.end()) throw fail(std::string("the ") + what + " of a matrix product is not a cooperative matrix");
    if (it->second != kNone && it->second != r)
      throw fail("one matrix type is both the A / B / accumulator of products (give each role its own GLSL type)");
    it->second = r;
  };
  auto value_type = [&](uint32_t id, const char* what) {
    auto it = type_of.find(id);
    if (it == type_of.end()) throw fail(std::string("the ") + what + " of a matrix product comes from an unexpected instruction");
    return it->second;
  };
  // Whether `type` is an A / B matrix type. Values from instructions outside typed_result (vector
  // shuffles, extended instructions, ...) are never matrices: their type reads as 0.
  auto operand = [&](uint32_t type) {
    auto it = role.find(type);
    return it != role.end() && it->second != kUseAcc;
  };
  auto type_or_0 = [&](uint32_t id) {
    auto it = type_of.find(id);
    return it == type_of.end() ? 0u : it->second;
  };
  for (const Inst& i : insts)
    if (opcode(i) == kOpCoopMulAddNV) {
      if (i.size() != 6) throw fail("a matrix product with operands");
      assign(i[1], kUseAcc, "result");
      assign(value_type(i[3], "A operand"), kUseA, "A operand");
      assign(value_type(i[4], "B operand"), kUseB, "B operand");
      assign(value_type(i[5], "accumulator"), kUseAcc, "accumulator");
    }
  for (auto& [type, r] : role) {
    if (r == kNone) throw fail("a cooperative matrix type takes part in no product");
    if (bf16_operands && r != kUseAcc && float_width[comp_of[type]] != 16)
      throw fail("an A / B matrix of a component other than f16");
  }
  // Only bit moves and conversions from f32 may yield a bf16 matrix; nothing may read its components.
  for (const Inst& i : insts) {
    if (!bf16_operands) break;
    const uint32_t op = opcode(i);
    if (!typed_result(op) || i.size() < 3) continue;
    auto r = role.find(i[1]);
    if (r != role.end() && r->second != kUseAcc) {
      if (!keeps_bits(op)) throw fail("an A / B matrix is computed (opcode " + std::to_string(op) + "), not loaded");
      if (op == kOpFConvert && float_width[comp_of[value_type(i[3], "conversion source")]] != 32)
        throw fail("an A / B matrix converted from a matrix that is not f32");
    }
    if ((op == kOpCompositeExtract || op == kOpCompositeInsert) && i.size() >= 4 && operand(type_or_0(i[3])))
      throw fail("a component of an A / B matrix is accessed");
    if ((op == kOpAccessChain || op == kOpInBoundsAccessChain) && i.size() >= 4) {
      // Walk the base's pointee down the indices: stepping into an A / B matrix reads a component.
      uint32_t t = pointee[type_or_0(i[3])];
      for (size_t k = 4; k < i.size() && t != 0; ++k) {
        if (operand(t)) throw fail("a component of an A / B matrix is accessed");
        if (auto e = element.find(t); e != element.end()) {
          t = e->second;
        } else if (auto m = members.find(t); m != members.end()) {
          auto c = constants.find(i[k]);
          t = c != constants.end() && c->second < m->second.size() ? m->second[c->second] : 0;
        } else {
          t = 0;  // a scalar, vector or accumulator component: nothing below it matters
        }
      }
    }
  }

  const uint32_t use_const[3] = {bound, bound + 1, bound + 2};
  const uint32_t bf16 = bound + 3;
  bound += bf16_operands ? 4 : 3;
  std::vector<uint32_t> out(words.begin(), words.begin() + 5);
  auto emit = [&](const Inst& i) { out.insert(out.end(), i.begin(), i.end()); };
  bool cap_done = false, ext_done = false;
  auto layout = [&](uint32_t flag) {
    auto it = bools.find(flag);
    if (it == bools.end()) throw fail("a matrix load / store whose column-major flag is not a constant");
    return use_const[it->second ? kColumnMajor : kRowMajor];
  };
  for (const Inst& i : insts) {
    const uint32_t op = opcode(i);
    if (op == kOpCapability && i.size() == 2 && i[1] == kCapCoopNV) {
      emit(make(kOpCapability, {kCapCoopKHR}));
      if (bf16_operands) {
        emit(make(kOpCapability, {kCapBf16Type}));
        emit(make(kOpCapability, {kCapBf16Coop}));
      }
      cap_done = true;
    } else if (op == kOpExtension && string_of(i) == "SPV_NV_cooperative_matrix") {
      emit(make(kOpExtension, string_words("SPV_KHR_cooperative_matrix")));
      if (bf16_operands) emit(make(kOpExtension, string_words("SPV_KHR_bfloat16")));
      ext_done = true;
    } else if (op == kOpTypeInt && i[1] == uint_type) {
      emit(i);
      for (uint32_t u = 0; u < 3; ++u) emit(make(kOpConstant, {uint_type, use_const[u], u}));
      if (bf16_operands) emit(make(kOpTypeFloat, {bf16, 16, kBFloat16Encoding}));
    } else if (op == kOpTypeCoopNV && i.size() == 6) {
      const Role r = role.at(i[1]);
      const uint32_t comp = bf16_operands && r != kUseAcc ? bf16 : i[2];
      emit(make(kOpTypeCoopKHR, {i[1], comp, i[3], i[4], i[5], use_const[r]}));
    } else if (op == kOpCoopLoadNV && i.size() >= 6) {  // type id ptr stride colmajor [mem...]
      Inst k{i[1], i[2], i[3], layout(i[5]), i[4]};
      k.insert(k.end(), i.begin() + 6, i.end());
      emit(make(kOpCoopLoadKHR, k));
    } else if (op == kOpCoopStoreNV && i.size() >= 5) {  // ptr object stride colmajor [mem...]
      Inst k{i[1], i[2], layout(i[4]), i[3]};
      k.insert(k.end(), i.begin() + 5, i.end());
      emit(make(kOpCoopStoreKHR, k));
    } else if (op == kOpCoopMulAddNV) {
      emit(make(kOpCoopMulAddKHR, Inst(i.begin() + 1, i.end())));
    } else if (op == kOpCoopLengthNV) {
      emit(make(kOpCoopLengthKHR, Inst(i.begin() + 1, i.end())));
    } else {
      emit(i);
    }
  }
  if (!cap_done || !ext_done) throw fail("no CooperativeMatrixNV capability / SPV_NV_cooperative_matrix extension");
  out[3] = bound;
  return out;
}

}  // namespace rlx::vulkan
