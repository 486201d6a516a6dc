// rlx quantize: a safetensors or GGUF file (or a Hugging Face Llama checkpoint directory, converted
// by models/llama_hf.h into the GGUF Llama layout first) to a GGUF file whose weight matrices are stored in a
// ggml block format (the reference quantizers of src/quant/ggml_blocks.cpp), with the error each
// tensor took: relative RMS and largest absolute difference between the dequantized result and
// the input values.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli.h"
#include "io/file_access.h"
#include "models/llama_hf.h"
#include "rlx/gguf.h"
#include "rlx/safetensors.h"

namespace rlx::cli {
namespace {

struct QuantizeOptions {
  std::string in, out, scheme;
  int min_rank = 2;
};

struct Row {
  std::string name, from, to, shape;
  double rel_rms = 0, max_abs = 0;
  bool quantized = false;
};

// Quantizes `values` (row-major `shape`) into the writer and measures the error.
void quantize_into(GgufWriter& w, const std::string& name, const std::vector<float>& values,
                   const std::vector<int64_t>& shape, GgmlType to, Row& row) {
  std::vector<uint8_t> q;
  try {
    q = ggml_quantize(to, values);
  } catch (const Error& e) {
    throw Error("tensor '" + shown(name) + "': " + e.what());
  }
  const std::vector<float> back = ggml_dequantize(to, q);
  double se = 0, sx = 0, worst = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = static_cast<double>(back[i]) - values[i];
    se += d * d;
    sx += static_cast<double>(values[i]) * values[i];
    worst = std::max(worst, std::fabs(d));
  }
  row.rel_rms = sx > 0 ? std::sqrt(se / sx) : std::sqrt(se);
  row.max_abs = worst;
  row.quantized = true;
  std::vector<int64_t> ne(shape.rbegin(), shape.rend());
  w.add_raw(name, to, std::move(ne), std::string(q.begin(), q.end()));
}

bool wants_quantization(const std::vector<int64_t>& shape, GgmlType to, int min_rank) {
  return static_cast<int>(shape.size()) >= min_rank && !shape.empty() &&
         shape.back() % ggml_type_info(to).block_elements == 0;
}

int run_quantize(const QuantizeOptions& o) {
  const GgmlType to = ggml_type_from_name(o.scheme);
  const GgmlTypeInfo& info = ggml_type_info(to);
  if (!info.quantize) throw UsageError("--scheme " + o.scheme + ": rlx cannot write " + info.name);
  if (o.min_rank < 1) throw UsageError("--min-rank must be at least 1");
  const bool hf_dir = models::is_hf_checkpoint_dir(o.in);
  if (!hf_dir) { const io::RegularFile probe(o.in, "input file '" + shown(o.in) + "'"); }
  const bool in_gguf = hf_dir || (o.in.size() >= 5 && o.in.compare(o.in.size() - 5, 5, ".gguf") == 0);
  GgufWriter w;
  std::vector<Row> rows;
  int64_t in_bytes = 0;
  // Kept alive until the file is written (add_raw of raw() borrows the input's mapping).
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<SafetensorsFile> st;
  bool has_qv = false;
  if (in_gguf) {
    gguf = std::make_unique<GgufFile>(hf_dir ? models::load_hf_llama(o.in) : GgufFile(o.in));
    for (const auto& [k, v] : gguf->metadata()) {
      if (k == "general.alignment") w.set_alignment(gguf->alignment());
      else w.add(k, v);
      has_qv = has_qv || k == "general.quantization_version";
    }
    for (const auto& t : gguf->tensors()) {
      Row row{t.name, ggml_type_name(t.type), ggml_type_name(t.type), dims_str(t.shape())};
      in_bytes += static_cast<int64_t>(t.nbytes);
      const GgmlTypeInfo& from = ggml_type_info(t.type);
      const bool is_float_type = t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16 ||
                                 t.type == GgmlType::F64 || from.block_elements > 1;
      if (t.type != to && is_float_type && from.dequantize && wants_quantization(t.shape(), to, o.min_rank)) {
        row.to = info.name;
        quantize_into(w, t.name, gguf->tensor_f32(t.name).to_f32(), t.shape(), to, row);
      } else {
        w.add_raw(t.name, t.type, t.ne, gguf->raw(t.name));
      }
      rows.push_back(row);
    }
  } else {
    st = std::make_unique<SafetensorsFile>(o.in);
    for (const auto& e : st->entries()) {
      Row row{e.name, dtype_name(e.dtype), dtype_name(e.dtype), dims_str(e.shape)};
      in_bytes += static_cast<int64_t>(e.end - e.begin);
      const auto type = ggml_type_of(e.dtype);
      if (!type)
        throw Error("tensor '" + shown(e.name) + "' is " + dtype_name(e.dtype) +
                    ", which GGUF does not store (f32, f16, bf16, f64, i8..i64)");
      if (is_float(e.dtype) && wants_quantization(e.shape, to, o.min_rank)) {
        row.to = info.name;
        quantize_into(w, e.name, st->tensor(e.name).to_f32(), e.shape, to, row);
      } else {
        std::vector<int64_t> ne(e.shape.rbegin(), e.shape.rend());
        if (ne.empty()) ne = {1};
        w.add_raw(e.name, *type, std::move(ne), st->raw(e.name));
      }
      rows.push_back(row);
    }
    for (const auto& [k, v] : st->metadata())
      if (k != "general.alignment") w.add(k, GgufValue::string(v));
    has_qv = st->metadata().count("general.quantization_version") > 0;
  }
  const bool any = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.quantized; });
  if (any && info.block_elements > 1 && !has_qv) w.add("general.quantization_version", GgufValue::u32(2));
  w.save(o.out);

  std::ostream& os = std::cout;
  size_t wn = 6, ws = 5;
  for (const auto& r : rows) wn = std::max(wn, shown(r.name).size()), ws = std::max(ws, r.shape.size());
  os << "quantize: " << shown(o.in) << " -> " << shown(o.out) << " (" << info.name << ")\n";
  os << std::left << std::setw(static_cast<int>(wn + 2)) << "tensor" << std::setw(7) << "from" << std::setw(7) << "to"
     << std::setw(static_cast<int>(ws + 2)) << "shape" << std::setw(11) << "rel rms" << "max abs\n";
  int64_t quantized = 0;
  for (const auto& r : rows) {
    os << std::left << std::setw(static_cast<int>(wn + 2)) << shown(r.name) << std::setw(7) << r.from << std::setw(7)
       << r.to << std::setw(static_cast<int>(ws + 2)) << r.shape;
    if (r.quantized) {
      ++quantized;
      std::ostringstream a, b;
      a << std::setprecision(4) << r.rel_rms;
      b << std::setprecision(4) << r.max_abs;
      os << std::setw(11) << a.str() << b.str();
    } else {
      os << "(kept)";
    }
    os << "\n";
  }
  const GgufFile out(o.out);  // reads back what was written (and gives its size)
  os << "written: " << out.tensors().size() << " tensors (" << quantized << " quantized), "
     << format_bytes(in_bytes) << " of tensor data -> "
     << format_bytes(static_cast<int64_t>(out.file_size() - out.data_offset())) << "\n";
  return 0;
}

}  // namespace

Command add_quantize_command(CLI::App& parent) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub = parent.add_subcommand(
      "quantize",
      "Write a .safetensors or .gguf file as GGUF with its weight matrices in a ggml block format, and report the "
      "error per tensor");
  sub->add_option("input", o->in,
                  ".safetensors or .gguf file, or a Hugging Face Llama checkpoint directory (written in the GGUF Llama "
                  "layout that rlx generate runs)")
      ->required();
  sub->add_option("output", o->out, "the GGUF file to write")->required();
  sub->add_option("--scheme", o->scheme, "q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, f16, bf16 or f32")->required();
  sub->add_option("--min-rank", o->min_rank,
                  "quantize float tensors of at least this rank whose last dim is a multiple of the block (default 2)");
  return {sub, [o] { return run_quantize(*o); }};
}

}  // namespace rlx::cli
