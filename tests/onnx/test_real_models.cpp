// Real exported models (tests/models/onnx, written by bench/models/export_models.py on the GPU
// machine): small random-weight BERT, GPT-2, Llama, ViT, Whisper encoder, ResNet, MobileNetV3
// and LSTM models, each as PyTorch's TorchScript and dynamo exporters write them, with dynamic
// batch / sequence / image dims. Each case has data sets of different sizes whose expected
// outputs are ONNX Runtime's. A model runs the way a user runs it: rlx::OnnxModel takes the dims
// from the given tensors (no --dim, no known input values), every set through the same
// OnnxModel, on every device that can run here; outputs within 1e-4 of ORT's, relative to the
// output's largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "rlx/onnx.h"
#include "support/devices.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() { return fs::path(RLX_SOURCE_DIR) / "tests" / "models" / "onnx"; }

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(models_dir(), ec))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<fs::path> data_sets(const fs::path& dir) {
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  return sets;
}

// max |got - want| / max |want| over the tensor (0 when both are all zeros).
double relative_error(const Tensor& got, const Tensor& want) {
  const auto a = testing::to_doubles(got), b = testing::to_doubles(want);
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::isnan(a[i]) ? INFINITY : std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

struct RealModelParam {
  std::string model;
  const testing::TestDevice* device = nullptr;  // nullptr: the CPU
};

std::vector<RealModelParam> all_params() {
  std::vector<RealModelParam> out;
  for (const auto& m : case_names()) {
    out.push_back({m, nullptr});
    for (const auto& d : testing::test_devices())
      if (d.name != "cpu-unoptimized") out.push_back({m, &d});
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<RealModelParam>& info) {
  std::string n = info.param.model.substr(5) + "_" + (info.param.device ? info.param.device->name : "cpu");
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

class RealModels : public ::testing::TestWithParam<RealModelParam> {};

TEST_P(RealModels, MatchOnnxRuntime) {
  const RealModelParam& p = GetParam();
  OnnxModelOptions o;
  double tolerance = 1e-4;
  if (p.device) {
    const std::string why = p.device->unavailable ? p.device->unavailable() : "";
    if (!why.empty()) GTEST_SKIP() << p.device->name << ": " << why;
    o.device = p.device->device;
    o.compile = p.device->options;
  }
  o.compile.num_threads = 1;
  const fs::path dir = models_dir() / p.model;
  OnnxModel model((dir / "model.onnx").string(), o);
  const auto sets = data_sets(dir);
  ASSERT_GE(sets.size(), 2u) << "each case has data sets of two sizes";
  for (const auto& set : sets) {
    SCOPED_TRACE(set.filename().string());
    NamedTensors in;
    for (size_t i = 0; i < model.inputs().size(); ++i)
      in.emplace_back(model.inputs()[i].name, load_onnx_tensor((set / ("input_" + std::to_string(i) + ".pb")).string()));
    const auto outs = model.run(in);
    const auto names = model.output_names();
    ASSERT_EQ(outs.size(), names.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      const Tensor want = load_onnx_tensor((set / ("output_" + std::to_string(k) + ".pb")).string());
      ASSERT_EQ(outs[k].dtype(), want.dtype()) << names[k];
      ASSERT_EQ(outs[k].shape(), want.shape()) << names[k];
      EXPECT_LE(relative_error(outs[k], want), tolerance) << names[k];
    }
  }
  // Each size was imported once: the dims came from the tensors, not from a fixed binding.
  EXPECT_EQ(model.stats().imports, static_cast<int64_t>(sets.size()));
}

INSTANTIATE_TEST_SUITE_P(Onnx, RealModels, ::testing::ValuesIn(all_params()), param_name);

// The set itself: every model family there in both exporters' forms (the dynamo exporter fixes
// the LSTM's dims, so that one is TorchScript's only), so a lost file fails here, not silently.
TEST(RealModelSet, EveryExportIsThere) {
  const auto names = case_names();
  for (const char* m : {"bert", "gpt2", "llama", "vit", "whisper_encoder", "resnet", "mobilenet_v3", "lstm"})
    for (const char* e : {"torchscript", "dynamo"}) {
      if (std::string(m) == "lstm" && std::string(e) == "dynamo") continue;
      const std::string c = std::string("test_") + m + "_" + e;
      EXPECT_NE(std::find(names.begin(), names.end(), c), names.end()) << c << " is missing from " << models_dir();
    }
}

// `rlx run MODEL --random-inputs` just works on every export: a picked sequence length past the
// model's position table is halved until it runs (said), integer inputs hold valid ids.
TEST(RealModelSet, RandomInputsRunEveryExport) {
  for (const std::string& name : case_names()) {
    SCOPED_TRACE(name);
    const std::string cmd = "'" + rlx::testing::cli_path() + "' run '" + (models_dir() / name / "model.onnx").string() +
                            "' --random-inputs --threads 1 --repeat 1 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
      EXPECT_EQ(::pclose(p), 0) << out;
    }
    EXPECT_NE(out.find("latency"), std::string::npos) << out;
    if (name.rfind("test_bert", 0) == 0) {
      EXPECT_NE(out.find("trying 'batch=1', 'seq=64'"), std::string::npos) << out;
    }
  }
}

}  // namespace
}  // namespace rlx
