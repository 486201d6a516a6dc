#include "io/web_bundle.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "plan/storage.h"
#include "rlx/error.h"
#include "rlx_web_assets.h"

namespace rlx::web {

const char* role_name(BufferRole r) {
  switch (r) {
    case BufferRole::Arena: return "arena";
    case BufferRole::Input: return "input";
    case BufferRole::Param: return "param";
    case BufferRole::Constant: return "constant";
    case BufferRole::Scratch: return "scratch";
    case BufferRole::Table: return "table";
    case BufferRole::Flag: return "flag";
  }
  return "?";
}

namespace {

using nlohmann::json;

const char* binding_name(BindingKind b) {
  switch (b) {
    case BindingKind::Read: return "read";
    case BindingKind::ReadWrite: return "read_write";
    case BindingKind::Uniform: return "uniform";
  }
  return "?";
}

void write_file(const std::filesystem::path& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("export_web: cannot write '" + path.string() + "' (check the folder's permissions)");
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  f.close();
  if (!f) throw Error("export_web: writing '" + path.string() + "' failed (disk full?)");
}

// The initial bytes of buffer `b`: a param's value converted to its storage dtype, or the
// buffer's own (constants, tables). Empty for the others.
std::vector<uint8_t> initial_bytes(const WebBuffer& b, const std::map<std::string, Tensor>& params) {
  if (b.role != BufferRole::Param) return b.init;
  auto it = params.find(b.name);
  if (it == params.end()) throw Error("export_web: internal: no value for param '" + b.name + "'");
  const Tensor& t = it->second;
  if (t.dtype() != b.dtype || t.shape() != b.dims)
    throw Error("export_web: param '" + b.name + "' is " + t.shape_info().str() + ", the program holds " +
                dtype_name(b.dtype) + dims_str(b.dims));
  if (t.dtype() == b.storage) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    return std::vector<uint8_t>(p, p + t.nbytes());
  }
  return plan::to_storage(t, b.storage, "param '" + b.name + "'");
}

// The 2-byte form `init` (f32 words) is written in, "" for none: bf16 / f16 weights always (their
// values fit exactly), f32 ones when asked for (rounded to f16).
std::string packed_form(const WebBuffer& b, bool f16_weights) {
  if ((b.role != BufferRole::Param && b.role != BufferRole::Constant) || b.storage != DType::F32) return "";
  if (b.dtype == DType::BF16) return "bf16";
  if (b.dtype == DType::F16 || (b.dtype == DType::F32 && f16_weights)) return "f16";
  return "";
}

// f32 words -> 2-byte values of `form`; an f32 weight beyond f16's range is an error.
std::vector<uint8_t> pack_halves(const std::vector<uint8_t>& words, const std::string& form, const WebBuffer& b) {
  const size_t n = words.size() / 4;
  std::vector<uint8_t> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, words.data() + 4 * i, 4);
    const uint16_t h = form == "bf16" ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
    if (form == "f16" && std::isfinite(v) && !std::isfinite(f16_bits_to_f32(h)))
      throw Error("export_web: " + std::string(role_name(b.role)) + " '" + b.name + "' element " + std::to_string(i) +
                  " = " + std::to_string(v) + " is beyond f16's range; export with f32 weights");
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

json tensor_json(const std::string& name, DType dtype, DType storage, const std::vector<int64_t>& dims, int buffer) {
  return json{{"name", name}, {"dtype", dtype_name(dtype)}, {"storage", dtype_name(storage)}, {"dims", dims},
              {"buffer", buffer}};
}

}  // namespace

WebExportSummary write_web_bundle(const WebProgram& p, const std::map<std::string, Tensor>& params, const std::string& dir,
                                  bool f16_weights) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec || !fs::is_directory(root))
    throw Error("export_web: cannot create the folder '" + dir + "'" + (ec ? ": " + ec.message() : std::string()));

  WebExportSummary sum;
  sum.target = p.target;
  json buffers = json::array(), inputs = json::array(), outputs = json::array();
  std::vector<uint8_t> weights;
  uint64_t largest = 4;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const WebBuffer& b = p.buffers[i];
    json jb{{"role", role_name(b.role)}, {"name", b.name}, {"bytes", b.bytes}};
    std::vector<uint8_t> init = initial_bytes(b, params);
    if (init.size() > b.bytes)
      throw Error("export_web: internal: '" + b.name + "' has " + std::to_string(init.size()) + " initial bytes for a " +
                  std::to_string(b.bytes) + "-byte buffer");
    if (!init.empty()) {
      // [offset, bytes] of f32 / i32 / u32 words in weights.bin (queue.writeBuffer wants 4-byte
      // offsets and sizes), or [offset, bytes, "f16" | "bf16"] of 2-byte values the page widens.
      const std::string form = packed_form(b, f16_weights);
      const size_t words = init.size();
      if (!form.empty()) init = pack_halves(init, form, b);
      weights.resize((weights.size() + 3) / 4 * 4, 0);
      jb["init"] = {weights.size(), form.empty() ? (words + 3) / 4 * 4 : init.size()};
      if (!form.empty()) jb["init"].push_back(form);
      weights.insert(weights.end(), init.begin(), init.end());
      weights.resize((weights.size() + 3) / 4 * 4, 0);
    }
    if (b.role == BufferRole::Input) inputs.push_back(tensor_json(b.name, b.dtype, b.storage, b.dims, static_cast<int>(i)));
    sum.buffer_bytes += b.bytes;
    largest = std::max(largest, b.bytes);
    buffers.push_back(std::move(jb));
  }
  json kernels = json::array();
  for (const WebKernel& k : p.kernels) {
    json kinds = json::array();
    for (BindingKind b : k.bindings) kinds.push_back(binding_name(b));
    kernels.push_back({{"name", k.name}, {"wgsl", k.wgsl}, {"bindings", kinds}});
  }
  json commands = json::array();
  size_t most_storage = 1;
  for (const WebCommand& c : p.commands) {
    switch (c.kind) {
      case WebCommand::Kind::Dispatch:
        if (c.kernel < 0 || static_cast<size_t>(c.kernel) >= p.kernels.size() ||
            c.buffers.size() + 1 != p.kernels[static_cast<size_t>(c.kernel)].bindings.size())
          throw Error("export_web: internal: dispatch '" + c.label + "' does not match its kernel's bindings");
        most_storage = std::max(most_storage, c.buffers.size());
        commands.push_back({{"op", "dispatch"}, {"label", c.label}, {"kernel", c.kernel}, {"buffers", c.buffers},
                            {"uniform", c.uniform}, {"groups", {c.groups[0], c.groups[1], c.groups[2]}}});
        ++sum.dispatches;
        break;
      case WebCommand::Kind::Copy:
        commands.push_back({{"op", "copy"}, {"dst", c.dst}, {"dst_offset", c.dst_offset}, {"src", c.src},
                            {"src_offset", c.src_offset}, {"bytes", c.bytes}});
        break;
      case WebCommand::Kind::Clear:
        commands.push_back({{"op", "clear"}, {"dst", c.dst}, {"dst_offset", c.dst_offset}, {"bytes", c.bytes}});
        break;
    }
  }
  for (const WebOutput& o : p.outputs) {
    json jo = tensor_json(o.name, o.dtype, o.storage, o.dims, o.buffer);
    jo["offset"] = o.offset;
    outputs.push_back(std::move(jo));
  }
  json errors = json::object();
  for (const auto& [code, msg] : p.error_codes) errors[std::to_string(code)] = msg;
  const json manifest{
      {"format", "rlx-web-bundle"},
      {"version", 1},
      {"target", p.target},
      // What the program needs beyond WebGPU's defaults is requested when the device is made.
      {"requires",
       {{"maxStorageBuffersPerShaderStage", most_storage},
        {"maxStorageBufferBindingSize", largest},
        {"maxBufferSize", largest}}},
      {"weights", {{"file", "weights.bin"}, {"bytes", weights.size()}}},
      {"buffers", buffers},
      {"kernels", kernels},
      {"commands", commands},
      {"inputs", inputs},
      {"outputs", outputs},
      {"flag", p.flag},
      {"errors", errors}};
  const std::string text = manifest.dump();
  write_file(root / "model.json", text.data(), text.size());
  write_file(root / "weights.bin", weights.data(), weights.size());
  const std::string js = assets::kRuntimeJs, html = assets::kDemoHtml;
  write_file(root / "rlx-web.js", js.data(), js.size());
  write_file(root / "index.html", html.data(), html.size());
  sum.files = {"model.json", "weights.bin", "rlx-web.js", "index.html"};
  sum.kernels = p.kernels.size();
  sum.weight_bytes = weights.size();
  return sum;
}

}  // namespace rlx::web
