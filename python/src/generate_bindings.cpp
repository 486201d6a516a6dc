// rlx.Generator: text generation with a Llama GGUF model (rlx/generate.h) from Python. The GIL is
// released while the model runs and taken back for each streamed token's callback; an exception
// raised by the callback (KeyboardInterrupt included) stops generation and propagates.
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bindings.h"
#include "rlx/generate.h"
#include "rlx/gguf.h"

namespace rlx::python {
namespace {

// Text from the model as str: invalid UTF-8 (a random model's bytes, a piece that splits a
// character) becomes U+FFFD.
py::object text_of(const std::string& s) { return py::bytes(s).attr("decode")("utf-8", "replace"); }

py::dict result_dict(const Generator& g, const GenerateResult& r) {
  py::dict d;
  d["prompt_ids"] = r.prompt;
  d["ids"] = r.tokens;
  d["text"] = g.has_tokenizer() ? text_of(g.tokenizer().decode(r.tokens)) : py::str("");
  d["stop_reason"] = r.stop_reason;
  d["prefill_seconds"] = r.prefill_seconds;
  d["decode_seconds"] = r.decode_seconds;
  d["decode_steps"] = r.decode_steps;
  d["host_picks"] = r.host_picks;
  d["prompt_tokens_per_second"] = r.prompt_tokens_per_second();
  d["decode_tokens_per_second"] = r.decode_tokens_per_second();
  return d;
}

GenerateOptions options_of(int64_t max_new_tokens, double temperature, int64_t top_k, double top_p,
                           double repetition_penalty, uint64_t seed, const std::vector<int32_t>& stop_tokens) {
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.repetition_penalty = repetition_penalty;
  o.sampling.seed = seed;
  o.stop_tokens = stop_tokens;
  return o;
}

// Calls a Python callback with (leading..., id, piece as str) under the GIL (taken before any
// Python object is made); a Python exception in it is kept in `raised` (rethrown once the run is
// over) and stops generation.
template <class... A>
bool call_back(const py::object& f, std::optional<py::error_already_set>& raised, const std::string& piece, A... a) {
  py::gil_scoped_acquire gil;
  try {
    const py::object keep = f(a..., text_of(piece));
    return keep.is_none() || keep.cast<bool>();
  } catch (py::error_already_set& e) {
    raised.emplace(std::move(e));
    return false;
  }
}

}  // namespace

void register_generate(py::module_& m) {
  py::class_<Generator>(m, "Generator",
                          "A Llama-family GGUF model ready to generate text (KV cache on the device, no "
                          "recompile per token).")
      .def(py::init([](const std::string& path, const std::string& device, int64_t max_ctx, int threads,
                       int64_t prefill_chunk, const std::string& activations, int64_t batch, int64_t sample_candidates) {
             GeneratorOptions o;
             o.device = device_from_name(device);
             o.max_ctx = max_ctx;
             o.num_threads = threads;
             o.prefill_chunk = prefill_chunk;
             o.activations = dtype_from_name(activations);
             o.batch = batch;
             o.sample_candidates = sample_candidates;
             py::gil_scoped_release release;
             // The generator copies the weights and the tokenizer: the file is unmapped once it is built.
             return std::make_unique<Generator>(GgufFile(path), o);
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("max_ctx") = 0, py::arg("threads") = 0,
           py::arg("prefill_chunk") = 64, py::arg("activations") = "f32", py::arg("batch") = 1,
           py::arg("sample_candidates") = 128,
           "Loads `path` (a GGUF file), builds the decoder and compiles it for `device`. max_ctx: cache rows "
           "(0: the model's context length, at most 4096). activations: the dtype the model computes in and "
           "keeps its KV cache in, 'f32', 'bf16' or 'f16' (16-bit: faster on GPUs; logits stay f32). batch: "
           "sequences decoded together by generate_batch (1: generate). sample_candidates: the top logits "
           "the device returns for sampling (0: the whole row comes back).")
      .def_property_readonly("batch", [](const Generator& g) { return g.batch(); })
      .def_property_readonly("max_ctx", [](const Generator& g) { return g.max_ctx(); })
      .def_property_readonly("vocab_size", [](const Generator& g) { return g.vocab_size(); })
      .def_property_readonly("position", [](const Generator& g) { return g.position(); },
                             "Tokens in the cache.")
      .def_property_readonly("compile_count", [](const Generator& g) { return g.compile_count(); },
                             "Variants compiled so far (does not grow with the number of tokens).")
      .def_property_readonly("has_tokenizer", [](const Generator& g) { return g.has_tokenizer(); })
      .def(
          "encode",
          [](const Generator& g, const std::string& text, std::optional<bool> add_bos) {
            EncodeOptions o;
            o.add_bos = add_bos;
            return g.tokenizer().encode(text, o);
          },
          py::arg("text"), py::kw_only(), py::arg("add_bos") = py::none(), "Token ids of `text`.")
      .def(
          "decode", [](const Generator& g, const std::vector<int32_t>& ids) { return text_of(g.tokenizer().decode(ids)); },
          py::arg("ids"), "The text of `ids` (invalid UTF-8 replaced by U+FFFD).")
      .def(
          "generate",
          [](Generator& g, const py::object& prompt, int64_t max_new_tokens, double temperature, int64_t top_k,
             double top_p, double repetition_penalty, uint64_t seed, const std::vector<int32_t>& stop_tokens,
             const py::object& on_token) {
            const GenerateOptions o =
                options_of(max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed, stop_tokens);
            std::optional<py::error_already_set> raised;
            Generator::TokenCallback cb;
            if (!on_token.is_none())
              cb = [&](int32_t id, const std::string& piece) { return call_back(on_token, raised, piece, id); };
            GenerateResult r;
            if (py::isinstance<py::str>(prompt)) {
              const std::string text = prompt.cast<std::string>();
              py::gil_scoped_release release;
              r = g.generate(text, o, cb);
            } else {
              const auto ids = prompt.cast<std::vector<int32_t>>();
              py::gil_scoped_release release;
              r = g.generate(ids, o, cb);
            }
            if (raised) throw std::move(*raised);
            return result_dict(g, r);
          },
          py::arg("prompt"), py::kw_only(), py::arg("max_new_tokens") = 128, py::arg("temperature") = 0.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("repetition_penalty") = 1.0, py::arg("seed") = 0,
          py::arg("stop_tokens") = std::vector<int32_t>{}, py::arg("on_token") = py::none(),
          "Starts a new sequence with `prompt` (text, or a list of token ids) and generates up to max_new_tokens "
          "(temperature 0: greedy). on_token(id, piece) is called per token; returning False stops. Returns a "
          "dict: prompt_ids, ids, text, stop_reason, prefill/decode seconds and tokens per second.")
      .def(
          "generate_batch",
          [](Generator& g, const py::list& prompts, int64_t max_new_tokens, double temperature, int64_t top_k,
             double top_p, double repetition_penalty, uint64_t seed, const std::vector<int32_t>& stop_tokens,
             const py::object& on_token) {
            const GenerateOptions o =
                options_of(max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed, stop_tokens);
            std::vector<std::vector<int32_t>> ids;
            for (const py::handle p : prompts) {
              if (py::isinstance<py::str>(p)) {
                const std::string text = p.cast<std::string>();
                ids.push_back(g.tokenizer().encode(text, o.encode));
              } else {
                ids.push_back(p.cast<std::vector<int32_t>>());
              }
            }
            std::optional<py::error_already_set> raised;
            Generator::BatchTokenCallback cb;
            if (!on_token.is_none())
              cb = [&](size_t b, int32_t id, const std::string& piece) {
                return call_back(on_token, raised, piece, b, id);
              };
            std::vector<GenerateResult> r;
            {
              py::gil_scoped_release release;
              r = g.generate_batch(std::span<const std::vector<int32_t>>(ids), o, cb);
            }
            if (raised) throw std::move(*raised);
            py::list out;
            for (const GenerateResult& x : r) out.append(result_dict(g, x));
            return out;
          },
          py::arg("prompts"), py::kw_only(), py::arg("max_new_tokens") = 128, py::arg("temperature") = 0.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("repetition_penalty") = 1.0, py::arg("seed") = 0,
          py::arg("stop_tokens") = std::vector<int32_t>{}, py::arg("on_token") = py::none(),
          "Decodes up to `batch` prompts (texts or lists of ids) together, one token per unfinished sequence a "
          "step; sequence b samples with seed + b. on_token(sequence, id, piece) is called per token; returning "
          "False stops that sequence. Returns one dict per prompt, as generate() does.");
}

}  // namespace rlx::python
