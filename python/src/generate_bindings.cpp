// rlx.Generator: text generation with a Llama GGUF model (rlx/generate.h) from Python. The GIL is
// released while the model runs and taken back for each streamed token's callback; an exception
// raised by the callback (KeyboardInterrupt included) stops generation and propagates.
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
  d["prompt_tokens_per_second"] = r.prompt_tokens_per_second();
  d["decode_tokens_per_second"] = r.decode_tokens_per_second();
  return d;
}

}  // namespace

void register_generate(py::module_& m) {
  py::class_<Generator>(m, "Generator",
                          "A Llama-family GGUF model ready to generate text (KV cache on the device, no "
                          "recompile per token).")
      .def(py::init([](const std::string& path, const std::string& device, int64_t max_ctx, int threads,
                       int64_t prefill_chunk, const std::string& activations) {
             GeneratorOptions o;
             o.device = device_from_name(device);
             o.max_ctx = max_ctx;
             o.num_threads = threads;
             o.prefill_chunk = prefill_chunk;
             o.activations = dtype_from_name(activations);
             py::gil_scoped_release release;
             // The generator copies the weights and the tokenizer: the file is unmapped once it is built.
             return std::make_unique<Generator>(GgufFile(path), o);
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("max_ctx") = 0, py::arg("threads") = 0,
           py::arg("prefill_chunk") = 64, py::arg("activations") = "f32",
           "Loads `path` (a GGUF file), builds the decoder and compiles it for `device`. max_ctx: cache rows "
           "(0: the model's context length, at most 4096). activations: the dtype the model computes in and "
           "keeps its KV cache in, 'f32', 'bf16' or 'f16' (16-bit: faster on GPUs; logits stay f32).")
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
            GenerateOptions o;
            o.max_new_tokens = max_new_tokens;
            o.sampling.temperature = temperature;
            o.sampling.top_k = top_k;
            o.sampling.top_p = top_p;
            o.sampling.repetition_penalty = repetition_penalty;
            o.sampling.seed = seed;
            o.stop_tokens = stop_tokens;
            // The callback runs with the GIL; a Python exception in it stops the run and is rethrown.
            std::optional<py::error_already_set> raised;
            Generator::TokenCallback cb;
            if (!on_token.is_none())
              cb = [&](int32_t id, const std::string& piece) {
                py::gil_scoped_acquire gil;
                try {
                  const py::object keep = on_token(id, text_of(piece));
                  return keep.is_none() || keep.cast<bool>();
                } catch (py::error_already_set& e) {
                  raised.emplace(std::move(e));
                  return false;
                }
              };
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
          "dict: prompt_ids, ids, text, stop_reason, prefill/decode seconds and tokens per second.");
}

}  // namespace rlx::python
