// safetensors <-> GGUF conversion (see include/rlx/gguf.h).
#include <cstdio>

#include "io/file_access.h"
#include "rlx/gguf.h"
#include "rlx/safetensors.h"

namespace rlx {
namespace {

// A scalar's text for safetensors string metadata; nullopt for arrays.
std::optional<std::string> scalar_text(const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::Array: return std::nullopt;
    case GgufValueType::String: return v.as_string();
    case GgufValueType::Bool: return std::string(v.as_bool() ? "true" : "false");
    case GgufValueType::F32:
    case GgufValueType::F64: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", v.as_f64());
      return std::string(buf);
    }
    case GgufValueType::I8:
    case GgufValueType::I16:
    case GgufValueType::I32:
    case GgufValueType::I64: return std::to_string(v.as_i64());
    default: return std::to_string(v.as_u64());
  }
}

}  // namespace

void safetensors_to_gguf(const std::string& in_path, const std::string& out_path, const GgufConvertOptions& options) {
  translate_errors("safetensors_to_gguf", [&] {
    const SafetensorsFile st(in_path);
    GgufWriter w;
    if (!options.architecture.empty()) w.add("general.architecture", GgufValue::string(options.architecture));
    bool quantized = false;
    for (const auto& e : st.entries()) {
      const std::string what = "safetensors_to_gguf: tensor '" + io::printable(e.name) + "' of '" + io::printable(in_path) + "'";
      const auto type = ggml_type_of(e.dtype);
      if (!type)
        throw Error(what + " is " + dtype_name(e.dtype) + ", which GGUF does not store (f32, f16, bf16, f64, i8..i64)");
      const bool quantize = options.quantize && is_float(e.dtype) && e.shape.size() >= 2 &&
                            e.shape.back() % ggml_type_info(*options.quantize).block_elements == 0;
      if (quantize) {
        try {
          w.add_tensor(e.name, st.tensor(e.name), *options.quantize);
        } catch (const Error& err) {
          throw Error(what + ": " + err.what());
        }
        quantized = quantized || ggml_type_info(*options.quantize).block_elements > 1;
      } else {
        std::vector<int64_t> ne(e.shape.rbegin(), e.shape.rend());
        if (ne.empty()) ne = {1};
        w.add_raw(e.name, *type, std::move(ne), st.raw(e.name));  // borrowed from the mapping
      }
    }
    if (quantized) w.add("general.quantization_version", GgufValue::u32(2));
    for (const auto& [k, v] : st.metadata())
      if (k != "general.architecture" && k != "general.alignment" && k != "general.quantization_version")
        w.add(k, GgufValue::string(v));
    w.save(out_path);
  });
}

void gguf_to_safetensors(const std::string& in_path, const std::string& out_path) {
  translate_errors("gguf_to_safetensors", [&] {
    const GgufFile g(in_path);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& t : g.tensors()) {
      tensors.emplace_back(t.name, dtype_of_ggml(t.type) ? g.tensor(t.name) : g.tensor_f32(t.name));
    }
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : g.metadata())
      if (auto text = scalar_text(v)) meta[k] = *text;
    save_safetensors(out_path, tensors, meta);
  });
}

}  // namespace rlx
