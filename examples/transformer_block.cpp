// The rlx tour in one program: build a small transformer (two Llama-style decoder blocks
// and a BERT encoder layer) from IR primitives, compile it for the CPU, give it random
// weights, run it and report each output and the time per run.
//
//   ./transformer_block [--repeat N] [--threads N]
//
// Everything the graph needs goes through the public API in include/rlx: Graph (builder),
// Session::compile -> CompiledGraph, set_param, run. The builders live in src/models.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "rlx/rlx.h"

namespace {

struct Args {
  int repeat = 10;
  int threads = 0;
  int warmup = 2;
  bool optimize = true;
};

void usage(const char* prog) {
  std::printf(
      "usage: %s [--repeat N] [--threads N] [--warmup N] [--no-optimize]\n"
      "  --repeat N   timed runs (default 10)\n"
      "  --threads N  CPU worker threads, 0 = all cores (default 0)\n"
      "  --warmup N   untimed runs first (default 2)\n"
      "  --no-optimize  compile without the optimizer's passes (to compare)\n",
      prog);
}

// Parses "--flag N" / "--flag=N"; returns false (after a message) on a usage error.
bool parse_args(int argc, char** argv, Args& a, bool& help) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i], value;
    if (s == "-h" || s == "--help") {
      help = true;
      return true;
    }
    if (s == "--no-optimize") {
      a.optimize = false;
      continue;
    }
    const auto eq = s.find('=');
    if (eq != std::string::npos) {
      value = s.substr(eq + 1);
      s = s.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    int* target = s == "--repeat" ? &a.repeat : s == "--threads" ? &a.threads : s == "--warmup" ? &a.warmup : nullptr;
    if (!target) {
      std::fprintf(stderr, "error: unknown option '%s'\n", s.c_str());
      return false;
    }
    char* end = nullptr;
    const long v = value.empty() ? -1 : std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 0 || v > 1000000 || (s == "--repeat" && v == 0)) {
      std::fprintf(stderr, "error: %s expects a %s integer, got '%s'\n", s.c_str(),
                   s == "--repeat" ? "positive" : "non-negative", value.c_str());
      return false;
    }
    *target = static_cast<int>(v);
  }
  return true;
}

int run(const Args& args) {
  using namespace rlx;
  models::TransformerDemoConfig cfg;  // hidden 256, 4 heads (2 kv heads), seq 64, batch 1
  cfg.llama_layers = 2;
  cfg.bert_layers = 1;
  Graph g = models::build_transformer_block_graph(cfg);
  std::printf("model: %lld llama blocks + %lld bert layer, batch %lld, seq %lld, hidden %lld, heads %lld (kv %lld)\n",
              static_cast<long long>(cfg.llama_layers), static_cast<long long>(cfg.bert_layers),
              static_cast<long long>(cfg.batch), static_cast<long long>(cfg.seq), static_cast<long long>(cfg.hidden),
              static_cast<long long>(cfg.num_heads), static_cast<long long>(cfg.num_kv_heads));

  CompileOptions opts;
  opts.num_threads = args.threads;
  opts.optimize = args.optimize;
  CompiledGraph model = Session(Device::Cpu).compile(g, opts);

  int64_t n_weights = 0;
  const NamedTensors weights = models::random_weights(g, /*seed=*/42);
  for (const auto& [name, t] : weights) {
    model.set_param(name, t);
    n_weights += t.numel();
  }
  std::printf("graph: %zu nodes, %zu params (%lld weights)\n", g.size(), weights.size(),
              static_cast<long long>(n_weights));

  // Inputs: hidden states, positions 0..S-1, and a key-padding mask hiding the last 8 tokens.
  const int64_t b = cfg.batch, s = cfg.seq, e = cfg.hidden;
  std::vector<float> hidden(static_cast<size_t>(b * s * e));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  std::vector<int64_t> positions(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<float> mask(static_cast<size_t>(b * s), 1.0f);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t j = std::max<int64_t>(0, s - 8); j < s; ++j) mask[static_cast<size_t>(bi * s + j)] = 0.0f;
  const NamedTensors inputs = {{"hidden", Tensor::f32({b, s, e}, hidden)},
                               {"positions", Tensor::i64({s}, positions)},
                               {"mask", Tensor::f32({b, s}, mask)}};

  std::vector<Tensor> outs;
  for (int i = 0; i < args.warmup; ++i) outs = model.run(inputs);
  std::vector<double> ms;
  for (int i = 0; i < args.repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    outs = model.run(inputs);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  for (size_t k = 0; k < outs.size(); ++k) {
    const std::vector<double> v = outs[k].to_f64();
    double sum = 0, abs_sum = 0;
    for (double x : v) {
      sum += x;
      abs_sum += std::fabs(x);
    }
    const double mean_abs = v.empty() ? 0.0 : abs_sum / static_cast<double>(v.size());
    std::printf("output %-10s %-16s sum %+.6e  mean|x| %.6e\n", g.output_names()[k].c_str(),
                outs[k].shape_info().str().c_str(), sum, mean_abs);
  }
  std::sort(ms.begin(), ms.end());
  const double p50 = ms[(ms.size() - 1) / 2];
  std::printf("time per run: p50 %.3f ms, min %.3f ms over %d runs (%d warm-up), arena %zu bytes%s\n", p50,
              ms.front(), args.repeat, args.warmup, model.arena_bytes(), args.optimize ? "" : " (unoptimized)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  bool help = false;
  if (!parse_args(argc, argv, args, help)) {
    usage(argv[0]);
    return 2;
  }
  if (help) {
    usage(argv[0]);
    return 0;
  }
  try {
    return run(args);
  } catch (const rlx::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
