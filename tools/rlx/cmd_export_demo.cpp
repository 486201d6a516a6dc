// rlx export-demo: writes the demo transformer (Llama blocks + a BERT layer) with random
// weights, so that `rlx inspect` / `rlx run` have a real model file to work on.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <new>

#include "cli.h"
#include "rlx/limits.h"
#include "models/transformer.h"

namespace rlx::cli {
namespace {

struct ExportOptions;
int export_demo(const ExportOptions& o);

struct ExportOptions {
  std::string path;
  bool inline_data = false;
  uint64_t seed = 0;
  models::TransformerDemoConfig cfg;
};

int run_export(const ExportOptions& o) {
  try {
    return export_demo(o);
  } catch (const std::bad_alloc&) {
    const auto& c = o.cfg;
    throw Error("out of memory building the demo model's weights (--hidden " + std::to_string(c.hidden) +
                ", --intermediate " + std::to_string(c.llama_intermediate) + ", --ffn " + std::to_string(c.bert_ffn) +
                ", " + std::to_string(c.llama_layers) + " Llama and " + std::to_string(c.bert_layers) +
                " BERT layers); use smaller sizes. Nothing was written.");
  }
}

int export_demo(const ExportOptions& o) {
  Graph g = models::build_transformer_block_graph(o.cfg);
  int64_t bytes = 0;
  const auto weights = models::random_weights(g, o.seed);
  for (const auto& [name, t] : weights) {
    bytes = checked_add(bytes, static_cast<int64_t>(t.nbytes()), "the demo model's weight bytes");
    g.set_weight(name, t);
  }
  JsonOptions jo;
  jo.inline_data = o.inline_data;
  // Written under temporary names and renamed when complete: a failure leaves no file behind.
  save_graph_json(g, o.path, jo);
  std::cout << "wrote " << shown(o.path);
  if (!o.inline_data) std::cout << " (weights in " << shown(o.path + ".bin") << ")";
  std::cout << ": " << g.size() << " nodes, " << weights.size() << " params, " << format_bytes(bytes) << " of weights\n";
  std::cout << "try: rlx inspect " << shown(o.path) << "\n     rlx run " << shown(o.path) << " --random-inputs"
            << (o.cfg.symbolic_seq ? " --dim seq=" + std::to_string(o.cfg.seq) : std::string()) << "\n";
  return 0;
}

}  // namespace

Command add_export_demo_command(CLI::App& parent) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* sub = parent.add_subcommand(
      "export-demo", "Write a demo transformer graph (Llama blocks + a BERT layer) with random weights");
  sub->add_option("out", o->path, "Output graph JSON file")->required();
  sub->add_flag("--inline", o->inline_data, "Embed the weights in the JSON (base64) instead of a side file OUT.bin");
  sub->add_option("--seed", o->seed, "Seed of the random weights")->check(unsigned_64_validator())->capture_default_str();
  auto& c = o->cfg;
  const CLI::Range positive(int64_t{1}, int64_t{1} << 20), non_negative(int64_t{0}, int64_t{1} << 20),
      layers(int64_t{0}, int64_t{1024});
  sub->add_option("--batch", c.batch, "Batch size")->check(positive)->capture_default_str();
  sub->add_option("--seq", c.seq, "Sequence length")->check(positive)->capture_default_str();
  sub->add_flag("--symbolic-seq", c.symbolic_seq, "Declare the sequence length as the symbolic dim 'seq'");
  sub->add_option("--hidden", c.hidden, "Hidden size")->check(positive)->capture_default_str();
  sub->add_option("--heads", c.num_heads, "Attention heads")->check(positive)->capture_default_str();
  sub->add_option("--kv-heads", c.num_kv_heads, "Key/value heads of the Llama blocks")
      ->check(positive)
      ->capture_default_str();
  sub->add_option("--intermediate", c.llama_intermediate, "SwiGLU width of the Llama blocks (0 = about 8/3 * hidden)")
      ->check(non_negative)
      ->capture_default_str();
  sub->add_option("--ffn", c.bert_ffn, "FFN width of the BERT layers (0 = 4 * hidden)")
      ->check(non_negative)
      ->capture_default_str();
  sub->add_option("--llama-layers", c.llama_layers, "Llama blocks")->check(layers)->capture_default_str();
  sub->add_option("--bert-layers", c.bert_layers, "BERT layers")->check(layers)->capture_default_str();
  return {sub, [o] { return run_export(*o); }};
}

}  // namespace rlx::cli
