// libFuzzer target: GGUF parsing, metadata access, reading every tensor (dequantizing the block
// types), and a writer round trip: a file that parses is written again with GgufWriter (when
// the writer accepts its names) and must parse back to the same metadata and tensor bytes.
// rlx::Error is the expected outcome for bad input; any other exception, crash or sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fuzz_run.h"
#include "rlx/gguf.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  rlx::fuzz::install_fuzz_limits();
  return 0;
}

namespace {

// Every accessor of a value; type mismatches are rlx::Errors and are swallowed here.
void touch(const rlx::GgufValue& v) {
  (void)v.to_string();
  try {
    (void)v.as_f64();
  } catch (const rlx::Error&) {
  }
  if (!v.is_array()) return;
  for (uint64_t i = 0; i < v.size() && i < 64; ++i) touch(v.at(i));
  try {
    (void)v.as_i64s();
  } catch (const rlx::Error&) {
  }
  try {
    (void)v.as_strings();
  } catch (const rlx::Error&) {
  }
}

void round_trip(const rlx::GgufFile& f) {
  if (f.alignment() > 4096) return;  // legal, but the rewrite would be mostly padding
  rlx::GgufWriter w(f.version());
  try {
    for (const auto& [k, v] : f.metadata()) w.add(k, v);
    for (const auto& t : f.tensors()) w.add_raw(t.name, t.type, t.ne, f.raw(t.name));
  } catch (const rlx::Error&) {
    return;  // names the writer refuses (over 64 bytes)
  }
  const std::string bytes = w.bytes();
  const auto back = [&] {
    try {
      return rlx::GgufFile::from_bytes(bytes.data(), bytes.size(), "rewritten");
    } catch (const rlx::Error& e) {
      throw std::logic_error(std::string("the writer's file does not parse: ") + e.what());
    }
  }();
  if (back.metadata().size() != f.metadata().size() || back.tensors().size() != f.tensors().size())
    throw std::logic_error("the rewritten file has other counts");
  // The writer puts general.alignment first; every other key keeps its place.
  for (const auto& [k, v] : f.metadata()) {
    const rlx::GgufValue* got = back.find(k);
    if (!got || !(*got == v)) throw std::logic_error("metadata key '" + k + "' changed in the round trip");
  }
  if (back.alignment() != f.alignment()) throw std::logic_error("the alignment changed in the round trip");
  for (const auto& t : f.tensors()) {
    const auto a = f.raw(t.name), b = back.raw(t.name);
    if (a.size() != b.size() || (a.size() && std::memcmp(a.data(), b.data(), a.size()) != 0) ||
        back.tensor_info(t.name).ne != t.ne || back.tensor_info(t.name).type != t.type)
      throw std::logic_error("tensor '" + t.name + "' changed in the round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return rlx::fuzz::guarded("fuzz_gguf", [&] {
    const auto f = rlx::GgufFile::from_bytes(data, size);
    for (const auto& [k, v] : f.metadata()) touch(v);
    for (const auto& t : f.tensors()) {
      (void)f.raw(t.name).size();
      const rlx::GgmlTypeInfo& info = rlx::ggml_type_info(t.type);
      if (info.dequantize) (void)f.tensor_f32(t.name).summary();
      else if (t.type == rlx::GgmlType::I8 || t.type == rlx::GgmlType::I16 || t.type == rlx::GgmlType::I32 ||
               t.type == rlx::GgmlType::I64)
        (void)f.tensor(t.name).summary();
    }
    round_trip(f);
  });
}
