// The `rlx` command-line tool, exercised as a subprocess (rlx::testing::cli_path(): next to the test binary, else the build tree's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/init.h"
#include "models/transformer.h"
#include "rlx/rlx.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

struct Proc {
  int code = -1;
  std::string out, err;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("rlx_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `rlx ARGS` (ARGS is shell text; paths here have no spaces) and captures everything.
  Proc rlx(const std::string& args) const {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string cmd = std::string("'") + rlx::testing::cli_path() + "' " + args + " >'" + out + "' 2>'" + err + "'";
    const int status = std::system(cmd.c_str());
    Proc p;
    p.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    p.out = read_file(out);
    p.err = read_file(err);
    return p;
  }

  // A small demo model (fast to run in debug/sanitizer builds).
  std::string export_small(const std::string& name, const std::string& extra = "") const {
    const std::string file = path(name);
    Proc p = rlx("export-demo " + file + " --seq 8 --hidden 32 --heads 4 --kv-heads 2 " + extra);
    EXPECT_EQ(p.code, 0) << p.err;
    return file;
  }

  fs::path dir_;
};

#define EXPECT_EXIT_CODE(p, c) EXPECT_EQ((p).code, (c)) << "stdout:\n" << (p).out << "\nstderr:\n" << (p).err

TEST_F(Cli, HelpAndVersion) {
  Proc h = rlx("--help");
  EXPECT_EXIT_CODE(h, 0);
  EXPECT_THAT(h.out, AllOf(HasSubstr("inspect"), HasSubstr("run"), HasSubstr("export-demo"), HasSubstr("ONNX"),
                           HasSubstr("Vulkan"), HasSubstr("generate")));
  Proc rh = rlx("run --help");
  EXPECT_EXIT_CODE(rh, 0);
  EXPECT_THAT(rh.out, AllOf(HasSubstr("--random-inputs"), HasSubstr("--dim"), HasSubstr("--save-outputs"),
                            HasSubstr("--threads"), HasSubstr("--warmup")));
  Proc v = rlx("--version");
  EXPECT_EXIT_CODE(v, 0);
  EXPECT_THAT(v.out, HasSubstr("rlx 0.1.0"));
}

TEST_F(Cli, UsageErrorsExitTwo) {
  Proc none = rlx("");
  EXPECT_EXIT_CODE(none, 2);
  EXPECT_THAT(none.err, HasSubstr("subcommand"));
  Proc unknown = rlx("frobnicate");
  EXPECT_EXIT_CODE(unknown, 2);
  EXPECT_THAT(unknown.err, AllOf(HasSubstr("unknown command 'frobnicate'"), HasSubstr("generate")));
  EXPECT_EXIT_CODE(rlx("run"), 2);  // graph file is required
  const std::string g = export_small("g.json");
  EXPECT_EXIT_CODE(rlx("run " + g + " --bogus"), 2);
  EXPECT_EXIT_CODE(rlx("run " + g + " --repeat 0"), 2);
  EXPECT_EXIT_CODE(rlx("run " + g + " --threads -1"), 2);
  EXPECT_EXIT_CODE(rlx("run " + g + " --threads 1025"), 2);  // beyond CompileOptions::num_threads' range
  // Seeds are unsigned 64-bit values: no wrapping of -1, no saturation of larger numbers.
  for (const char* seed : {"-1", "18446744073709551616", "99999999999999999999999", "1e3"}) {
    Proc p = rlx("run " + g + " --random-inputs --seed " + seed);
    EXPECT_EXIT_CODE(p, 2);
    EXPECT_THAT(p.err, HasSubstr("0..18446744073709551615")) << seed;
  }
  EXPECT_EXIT_CODE(rlx("run " + g + " --random-inputs --seed 18446744073709551615"), 0);
  EXPECT_EXIT_CODE(rlx("run " + g + " --device tpu"), 2);
  Proc bad_input = rlx("run " + g + " --input hidden");
  EXPECT_EXIT_CODE(bad_input, 2);
  EXPECT_THAT(bad_input.err, HasSubstr("NAME=VALUE"));
  Proc bad_dim = rlx("run " + g + " --dim seq=abc");
  EXPECT_EXIT_CODE(bad_dim, 2);
  EXPECT_THAT(bad_dim.err, HasSubstr("non-negative integer"));
}

TEST_F(Cli, ExportAndInspect) {
  const std::string g = export_small("demo.json");
  EXPECT_TRUE(fs::exists(g + ".bin"));  // side file by default
  Proc p = rlx("inspect " + g);
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, AllOf(HasSubstr("op histogram"), HasSubstr("matmul"), HasSubstr("attention"),
                           HasSubstr("rms_norm"), HasSubstr("layer_norm")));
  EXPECT_THAT(p.out, AllOf(HasSubstr("hidden"), HasSubstr("f32[1,8,32]"), HasSubstr("positions"), HasSubstr("i64[8]"),
                           HasSubstr("llama_out"), HasSubstr("bert_out")));
  EXPECT_THAT(p.out, AllOf(HasSubstr("params: 31 tensors"), HasSubstr("weights carried: 31 of 31")));
  // Histogram: most frequent first; 31 params is the largest count.
  const auto hist = p.out.substr(p.out.find("op histogram"));
  EXPECT_LT(hist.find("param"), hist.find("matmul"));
  EXPECT_THAT(hist, HasSubstr("    31\n"));

  Proc t = rlx("inspect " + g + " --print-graph");
  EXPECT_EXIT_CODE(t, 0);
  EXPECT_THAT(t.out, HasSubstr("outputs: llama_out="));
}

TEST_F(Cli, InspectSymbolicAndMissingWeights) {
  models::TransformerDemoConfig cfg;
  cfg.symbolic_seq = true;
  cfg.hidden = 32;
  cfg.llama_layers = 1;
  cfg.bert_layers = 0;
  Graph g = models::build_transformer_block_graph(cfg);
  save_graph_json(g, path("sym.json"));
  Proc p = rlx("inspect " + path("sym.json"));
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, AllOf(HasSubstr("f32[1,seq,32]"), HasSubstr("symbolic dims: seq"),
                           HasSubstr("weights carried: 0 of 10"), HasSubstr("params without weights")));
}

TEST_F(Cli, RunExportedDemo) {
  const std::string g = export_small("demo.json");
  Proc p = rlx("run " + g + " --random-inputs --repeat 3 --warmup 1 --threads 1");
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, AllOf(HasSubstr("llama_out: f32[1,8,32] min="), HasSubstr("bert_out: f32[1,8,32] min="),
                           HasSubstr("mean="), HasSubstr("p50"), HasSubstr("p90"), HasSubstr("min "),
                           HasSubstr("over 3 runs")));
  EXPECT_THAT(p.out, HasSubstr("hidden: f32[1,8,32] (random)"));
  EXPECT_THAT(p.out, Not(HasSubstr("filled with random values")));  // weights come from the file
  // Same seed -> same outputs; another seed -> different inputs and outputs.
  Proc again = rlx("run " + g + " --random-inputs --repeat 1");
  Proc other = rlx("run " + g + " --random-inputs --repeat 1 --seed 5");
  auto outputs_of = [](const std::string& s) { return s.substr(s.find("outputs:"), s.find("latency") - s.find("outputs:")); };
  EXPECT_EQ(outputs_of(p.out), outputs_of(again.out));
  EXPECT_NE(outputs_of(p.out), outputs_of(other.out));

  // Inline weights work the same way.
  const std::string inl = export_small("inline.json", "--inline");
  EXPECT_FALSE(fs::exists(inl + ".bin"));
  Proc q = rlx("run " + inl + " --random-inputs --repeat 1");
  EXPECT_EXIT_CODE(q, 0);
  EXPECT_EQ(outputs_of(p.out), outputs_of(q.out));
}

TEST_F(Cli, KnobsListAndKnobOption) {
  Proc list = rlx("knobs");
  EXPECT_EXIT_CODE(list, 0);
  EXPECT_THAT(list.out, AllOf(HasSubstr("fuse_attn_threshold  RLX_FUSE_ATTN_THRESHOLD  int"), HasSubstr("default 64"),
                              HasSubstr("gemv_lpr  RLX_GEMV_LPR  int [1, 32], default auto"),
                              HasSubstr("process settings"), HasSubstr("RLX_CUDA_DEVICE")));
  Proc md = rlx("knobs --markdown");
  EXPECT_EXIT_CODE(md, 0);
  EXPECT_EQ(md.out, knob_table_markdown());

  // --knob reaches the compile: the report of pass_report, a disabled pass skipped.
  const std::string g = export_small("k.json");
  Proc on = rlx("run " + g + " --random-inputs --repeat 1 --knob pass_report=1 --knob disable_passes=cse");
  EXPECT_EXIT_CODE(on, 0);
  EXPECT_THAT(on.err, AllOf(HasSubstr("rlx pass report"), HasSubstr("skipped (disabled)")));
  Proc bad = rlx("run " + g + " --random-inputs --repeat 1 --knob gemv_lpr=99");
  EXPECT_EXIT_CODE(bad, 1);
  EXPECT_THAT(bad.err, AllOf(HasSubstr("knob gemv_lpr='99'"), HasSubstr("[1, 32]")));
  Proc unknown = rlx("run " + g + " --random-inputs --repeat 1 --knob gemv_lrp=8");
  EXPECT_EXIT_CODE(unknown, 1);
  EXPECT_THAT(unknown.err, AllOf(HasSubstr("unknown knob 'gemv_lrp'"), HasSubstr("gemv_lpr")));
  Proc syntax = rlx("run " + g + " --random-inputs --repeat 1 --knob gemv_lpr");
  EXPECT_EXIT_CODE(syntax, 2);
  EXPECT_THAT(syntax.err, HasSubstr("NAME=VALUE"));
  fs::create_directories(path("cases"));
  Proc conf = rlx("conformance " + path("cases") + " --knob nope=1");  // before looking for cases
  EXPECT_EXIT_CODE(conf, 1);
  EXPECT_THAT(conf.err, HasSubstr("unknown knob 'nope'"));
}

TEST_F(Cli, RunWithInputFilesAndSaveOutputs) {
  const std::string g = export_small("demo.json");
  std::vector<int64_t> pos = {0, 1, 2, 3, 4, 5, 6, 7};
  save_npy(models::init_tensor(DType::F64, {1, 8, 32}, models::InitKind::Normal, 1.0, 3), path("hidden.npy"));
  save_npy(Tensor::i64({8}, pos), path("pos.npy"));
  save_npy(models::init_tensor(DType::F32, {1, 8}, models::InitKind::Ones, 1.0, 0), path("mask.npy"));
  const std::string feeds = " --input hidden=" + path("hidden.npy") + " -i positions=" + path("pos.npy") +
                            " --input mask=" + path("mask.npy");
  Proc p = rlx("run " + g + feeds + " --repeat 2 --save-outputs " + path("outs"));
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.err, HasSubstr("converted from f64 to f32"));  // numpy's default dtype is accepted
  EXPECT_THAT(p.out, HasSubstr("hidden: f32[1,8,32] (" + path("hidden.npy") + ")"));
  ASSERT_TRUE(fs::exists(path("outs/llama_out.npy")));
  ASSERT_TRUE(fs::exists(path("outs/bert_out.npy")));

  // The saved outputs equal an in-process run of the same graph file and inputs.
  Graph graph = load_graph_json(g);
  CompiledGraph cg = Session().compile(graph);
  auto outs = cg.run({{"hidden", load_npy(path("hidden.npy")).cast(DType::F32)},
                      {"positions", load_npy(path("pos.npy"))},
                      {"mask", load_npy(path("mask.npy"))}});
  Tensor saved = load_npy(path("outs/llama_out.npy"));
  EXPECT_EQ(saved.shape(), (std::vector<int64_t>{1, 8, 32}));
  EXPECT_EQ(saved.to_f64(), outs[0].to_f64());
  EXPECT_EQ(load_npy(path("outs/bert_out.npy")).to_f64(), outs[1].to_f64());

  // Some inputs from files, the rest random.
  Proc mixed = rlx("run " + g + " --input positions=" + path("pos.npy") + " --random-inputs --repeat 1");
  EXPECT_EXIT_CODE(mixed, 0);
  EXPECT_THAT(mixed.out, AllOf(HasSubstr("positions: i64[8] (" + path("pos.npy")), HasSubstr("mask: f32[1,8] (random)")));
}

TEST_F(Cli, RunErrors) {
  const std::string g = export_small("demo.json");
  Proc missing = rlx("run " + g);
  EXPECT_EXIT_CODE(missing, 1);
  EXPECT_THAT(missing.err, AllOf(HasSubstr("missing inputs"), HasSubstr("'hidden'"), HasSubstr("--random-inputs")));

  save_npy(Tensor::i64({8}, std::vector<int64_t>(8, 0)), path("pos.npy"));
  Proc unknown = rlx("run " + g + " --input bogus=" + path("pos.npy"));
  EXPECT_EXIT_CODE(unknown, 1);
  EXPECT_THAT(unknown.err, AllOf(HasSubstr("no input named 'bogus'"), HasSubstr("'positions'")));

  Proc bad_npy = rlx("run " + g + " --input positions=" + path("nope.npy") + " --random-inputs");
  EXPECT_EXIT_CODE(bad_npy, 1);
  EXPECT_THAT(bad_npy.err, HasSubstr("nope.npy"));

  save_npy(Tensor::i64({5}, std::vector<int64_t>(5, 0)), path("short.npy"));
  Proc wrong_shape = rlx("run " + g + " --input positions=" + path("short.npy") + " --random-inputs");
  EXPECT_EXIT_CODE(wrong_shape, 1);
  EXPECT_THAT(wrong_shape.err, HasSubstr("positions"));

  Proc nofile = rlx("run " + path("absent.json") + " --random-inputs");
  EXPECT_EXIT_CODE(nofile, 1);
  EXPECT_THAT(nofile.err, AllOf(HasSubstr("absent.json"), HasSubstr("No such file or directory")));
  {
    std::ofstream(path("garbage.json")) << "{\"format\": \"rlx-graph\", \"nodes\": [";
  }
  Proc garbage = rlx("inspect " + path("garbage.json"));
  EXPECT_EXIT_CODE(garbage, 1);
  EXPECT_THAT(garbage.err, HasSubstr("cannot load graph file"));

  Proc cuda = rlx("run " + g + " --random-inputs --device cuda");
  EXPECT_EXIT_CODE(cuda, 1);
  EXPECT_THAT(cuda.err, HasSubstr("not available"));

  Proc bad_sym = rlx("run " + g + " --random-inputs --dim batch=2");
  EXPECT_EXIT_CODE(bad_sym, 1);
  EXPECT_THAT(bad_sym.err, HasSubstr("no symbolic dim 'batch'"));
}

TEST_F(Cli, RunMissingParams) {
  models::TransformerDemoConfig cfg;
  cfg.seq = 4;
  cfg.hidden = 16;
  cfg.num_heads = 2;
  cfg.num_kv_heads = 1;
  cfg.llama_layers = 1;
  cfg.bert_layers = 0;
  save_graph_json(models::build_transformer_block_graph(cfg), path("noweights.json"));
  std::vector<int64_t> pos = {0, 1, 2, 3};
  save_npy(Tensor::i64({4}, pos), path("pos.npy"));
  save_npy(models::init_tensor(DType::F32, {1, 4, 16}, models::InitKind::Normal, 1.0, 1), path("h.npy"));
  Proc q = rlx("run " + path("noweights.json") + " -i positions=" + path("pos.npy") + " -i hidden=" + path("h.npy"));
  EXPECT_EXIT_CODE(q, 1);
  EXPECT_THAT(q.err, AllOf(HasSubstr("10 params have no weights"), HasSubstr("'llama.0.attn_norm.weight'"),
                           HasSubstr("--random-inputs")));
  Proc r = rlx("run " + path("noweights.json") + " --random-inputs --repeat 1");
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_THAT(r.out, AllOf(HasSubstr("10 filled with random values"), HasSubstr("llama_out: f32[1,4,16]")));
}

TEST_F(Cli, RunSymbolicDims) {
  const std::string g = export_small("sym.json", "--symbolic-seq");
  // Unbound, --random-inputs picks a sequence-like dim's size (128) and says so.
  Proc no_dim = rlx("run " + g + " --random-inputs --repeat 1");
  EXPECT_EXIT_CODE(no_dim, 0);
  EXPECT_THAT(no_dim.err, HasSubstr("--random-inputs picked 'seq=128'"));
  EXPECT_THAT(no_dim.out, HasSubstr("llama_out: f32[1,128,32]"));
  Proc with_dim = rlx("run " + g + " --random-inputs --dim seq=6 --repeat 1");
  EXPECT_EXIT_CODE(with_dim, 0);
  EXPECT_THAT(with_dim.out, AllOf(HasSubstr("llama_out: f32[1,6,32]"), HasSubstr("bert_out: f32[1,6,32]")));
  // The dim can also come from an input file; a conflicting --dim is reported.
  save_npy(Tensor::i64({5}, std::vector<int64_t>{0, 1, 2, 3, 4}), path("pos.npy"));
  Proc from_file = rlx("run " + g + " --random-inputs -i positions=" + path("pos.npy") + " --repeat 1");
  EXPECT_EXIT_CODE(from_file, 0);
  EXPECT_THAT(from_file.out, HasSubstr("hidden: f32[1,5,32] (random)"));
  Proc conflict = rlx("run " + g + " --random-inputs --dim seq=6 -i positions=" + path("pos.npy"));
  EXPECT_EXIT_CODE(conflict, 1);
  EXPECT_THAT(conflict.err, HasSubstr("symbolic dim 'seq' is 5"));
}

TEST_F(Cli, RunProfilePrintsDeviceTimePerOpKind) {
  const std::string g = export_small("profile.json");
  Proc cpu = rlx("run " + g + " --random-inputs -n 2 --profile");
  EXPECT_EXIT_CODE(cpu, 0);
  EXPECT_THAT(cpu.out, AllOf(HasSubstr("CPU time per op kind, all 3 runs"), HasSubstr("matmul"), HasSubstr(" steps\n"),
                             HasSubstr("slowest steps (ms per run"), HasSubstr(" GMAC/s  ")));
  Proc top = rlx("run " + g + " --random-inputs -n 1 --profile --profile-top 1");
  EXPECT_EXIT_CODE(top, 0);
  EXPECT_THAT(top.out, HasSubstr("more op kinds (--profile-top shows more)"));
  Proc steps = rlx("run " + g + " --random-inputs -n 1 --profile --profile-steps 1");
  EXPECT_EXIT_CODE(steps, 0);
  EXPECT_THAT(steps.out, HasSubstr("more steps (--profile-steps shows more)"));
#ifdef RLX_HAVE_VULKAN
  Proc vk = rlx("run " + g + " --random-inputs -n 2 --profile --device vulkan");
  if (vk.code != 0 && vk.err.find("no Vulkan device") != std::string::npos) GTEST_SKIP() << vk.err;
  EXPECT_EXIT_CODE(vk, 0);
  EXPECT_THAT(vk.out, AllOf(HasSubstr("device time per op kind"), HasSubstr("matmul"), HasSubstr("dispatches")));
#endif
}

// A Vulkan device name that matches nothing is an error listing the devices (run through `env`
// so that only the child process sees the variable).
TEST_F(Cli, UnknownVulkanDeviceListsTheDevices) {
#ifndef RLX_HAVE_VULKAN
  GTEST_SKIP() << "this build has no Vulkan backend";
#else
  const std::string g = export_small("vkdev.json");
  Proc any = rlx("run " + g + " --random-inputs -n 1 --device vulkan");
  if (any.code != 0) GTEST_SKIP() << "no Vulkan device here: " << any.err;
  const std::string cmd = std::string("env RLX_VULKAN_DEVICE=no-such-gpu-zz '") + rlx::testing::cli_path() + "' run " + g +
                          " --random-inputs -n 1 --device vulkan >'" + path("vk.out") + "' 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_NE(status, 0);
  std::ifstream f(path("vk.out"));
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_THAT(out, AllOf(HasSubstr("RLX_VULKAN_DEVICE='no-such-gpu-zz' matches no device"), HasSubstr("0: ")));
#endif
}

TEST_F(Cli, CheckReportsDispatchPerOpKind) {
  const std::string g = export_small("check.json");
  Proc p = rlx("check " + g + " --device cpu --pass-report");
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, AllOf(HasSubstr("native"), HasSubstr("decomposed"), HasSubstr("unsupported"),
                           HasSubstr("fused_swiglu"), HasSubstr("fuse_matmul_bias_act"),
                           HasSubstr("ok: every node runs on cpu")));
  Proc raw = rlx("check " + g + " --no-optimize");
  EXPECT_EXIT_CODE(raw, 0);
  EXPECT_THAT(raw.out, AllOf(HasSubstr("(unoptimized)"), Not(HasSubstr("fused_swiglu"))));
  EXPECT_EXIT_CODE(rlx("check " + g + " --device tpu"), 2);
  Proc vk = rlx("check " + g + " --device vulkan");
#ifdef RLX_HAVE_VULKAN
  EXPECT_EXIT_CODE(vk, 0);  // claims of the device Vulkan would use (or of a full-featured one)
  EXPECT_THAT(vk.out, AllOf(HasSubstr("device: vulkan"), HasSubstr("native")));
#else
  EXPECT_EXIT_CODE(vk, 1);
  EXPECT_THAT(vk.err, HasSubstr("not available in this build"));
#endif
  Proc wg = rlx("check " + g + " --device webgpu");
#ifdef RLX_HAVE_WEBGPU
  // The claims of the WebGPU adapter (or of a full-featured one); exit 1 while some op has no kernel.
  EXPECT_THAT(wg.out, HasSubstr("device: webgpu"));
  EXPECT_TRUE(wg.code == 0 || wg.code == 1) << wg.err;
#else
  EXPECT_EXIT_CODE(wg, 1);
  EXPECT_THAT(wg.err, HasSubstr("not available in this build"));
#endif
  EXPECT_EXIT_CODE(rlx("check " + path("missing.json")), 1);
}

TEST_F(Cli, ExportErrors) {
  Proc p = rlx("export-demo " + path("x.json") + " --hidden 30 --heads 4");
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.err, HasSubstr("head dim"));
  Proc q = rlx("export-demo " + path("no/such/dir/x.json") + " --seq 4 --hidden 16 --heads 2 --kv-heads 1");
  EXPECT_EXIT_CODE(q, 1);
  EXPECT_THAT(q.err, HasSubstr("cannot write"));
  EXPECT_EXIT_CODE(rlx("export-demo"), 2);
}

// ---- hardening (issue 26) --------------------------------------------------------------

// y = x + x for one input of `dtype` and shape [3].
void save_doubler(const std::string& file, DType dtype) {
  Graph g;
  const Value x = g.input("x", Shape::of({3}, dtype));
  g.add_output(g.add(x, x), "y");
  save_graph_json(g, file);
}

// --input values that do not fit the input's dtype are rejected (not wrapped or turned into
// inf), naming the input, the element and its value; values that fit are converted.
TEST_F(Cli, InputConversionsNeverLoseData) {
  save_doubler(path("i32.json"), DType::I32);
  save_doubler(path("f32.json"), DType::F32);
  save_doubler(path("u8.json"), DType::U8);
  save_npy(Tensor::i64({3}, std::vector<int64_t>{1, (int64_t{1} << 40) + 1, 2}), path("big.npy"));
  Proc wrap = rlx("run " + path("i32.json") + " -i x=" + path("big.npy") + " --repeat 1");
  EXPECT_EXIT_CODE(wrap, 1);
  EXPECT_THAT(wrap.err, AllOf(HasSubstr("--input x"), HasSubstr("element 1 is 1099511627777"),
                              HasSubstr("outside the range of i32")));
  save_npy(Tensor::i64({3}, std::vector<int64_t>{0, 255, -1}), path("neg.npy"));
  Proc neg = rlx("run " + path("u8.json") + " -i x=" + path("neg.npy") + " --repeat 1");
  EXPECT_EXIT_CODE(neg, 1);
  EXPECT_THAT(neg.err, AllOf(HasSubstr("element 2 is -1"), HasSubstr("u8")));
  save_npy(Tensor::f64({3}, std::vector<double>{1, 1e300, 2}), path("huge.npy"));
  Proc inf = rlx("run " + path("f32.json") + " -i x=" + path("huge.npy") + " --repeat 1");
  EXPECT_EXIT_CODE(inf, 1);
  EXPECT_THAT(inf.err, AllOf(HasSubstr("--input x"), HasSubstr("element 1 is 1.0000000000000001e+300"),
                             HasSubstr("overflows f32")));
  // A float file for an integer input is not silently truncated either.
  Proc kind = rlx("run " + path("i32.json") + " -i x=" + path("huge.npy") + " --repeat 1");
  EXPECT_EXIT_CODE(kind, 1);
  EXPECT_THAT(kind.err, AllOf(HasSubstr("holds f64 values but the input is i32")));
  // Values that fit are converted (with a note), and inf / NaN stay what they are.
  save_npy(Tensor::i64({3}, std::vector<int64_t>{-5, 7, 2147483647}), path("fits.npy"));
  Proc ok = rlx("run " + path("i32.json") + " -i x=" + path("fits.npy") + " --repeat 1 --save-outputs " + path("o"));
  EXPECT_EXIT_CODE(ok, 0);
  EXPECT_THAT(ok.err, HasSubstr("converted from i64 to i32"));
  EXPECT_EQ(load_npy(path("o/y.npy")).to_i64(), (std::vector<int64_t>{-10, 14, -2}));  // i32 arithmetic wraps
  save_npy(Tensor::f64({3}, std::vector<double>{1.5, INFINITY, NAN}), path("special.npy"));
  EXPECT_EXIT_CODE(rlx("run " + path("f32.json") + " -i x=" + path("special.npy") + " --repeat 1"), 0);
}

// A directory, FIFO or missing file as --input says what it is (no "bad magic string", no hang).
TEST_F(Cli, InputFilesMustBeRegularFiles) {
  save_doubler(path("f32.json"), DType::F32);
  Proc dir = rlx("run " + path("f32.json") + " -i x=" + dir_.string());
  EXPECT_EXIT_CODE(dir, 1);
  EXPECT_THAT(dir.err, AllOf(HasSubstr("--input x"), HasSubstr("is a directory"), Not(HasSubstr("magic"))));
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  Proc fifo = rlx("run " + path("f32.json") + " -i x=" + path("fifo.npy"));
  EXPECT_EXIT_CODE(fifo, 1);
  EXPECT_THAT(fifo.err, HasSubstr("is a FIFO"));
  Proc missing = rlx("run " + path("f32.json") + " -i x=" + path("none.npy"));
  EXPECT_EXIT_CODE(missing, 1);
  EXPECT_THAT(missing.err, HasSubstr("No such file or directory"));
  // The graph file itself.
  Proc graph_dir = rlx("inspect " + dir_.string());
  EXPECT_EXIT_CODE(graph_dir, 1);
  EXPECT_THAT(graph_dir.err, HasSubstr("is a directory"));
  Proc graph_fifo = rlx("run " + path("fifo.npy") + " --random-inputs");
  EXPECT_EXIT_CODE(graph_fifo, 1);
  EXPECT_THAT(graph_fifo.err, HasSubstr("is a FIFO"));
}

// --save-outputs never writes two outputs into one file: "a_2", "a", "a" get three files, the
// mapping is printed, and names with '/', '..' or control characters stay inside the folder.
TEST_F(Cli, SaveOutputsNeverOverwritesAndSanitizesNames) {
  Graph g;
  const Value x = g.input("x", Shape::of({2}));
  g.set_outputs({g.add(x, x), g.mul(x, x), g.sub(x, x), g.relu(x), g.exp(x), g.tanh(x)},
                {"a_2", "a", "a", "../escape", "dir/name", "bell\x07"});
  save_graph_json(g, path("multi.json"));
  save_npy(Tensor::f32({2}, std::vector<float>{1, 3}), path("x.npy"));
  Proc p = rlx("run " + path("multi.json") + " -i x=" + path("x.npy") + " --repeat 1 --save-outputs " + path("outs"));
  EXPECT_EXIT_CODE(p, 0);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(path("outs"))) {
    ++files;
    EXPECT_TRUE(e.is_regular_file()) << e.path();
  }
  EXPECT_EQ(files, 6u);
  EXPECT_EQ(load_npy(path("outs/a_2.npy")).to_f64(), (std::vector<double>{2, 6}));
  EXPECT_EQ(load_npy(path("outs/a.npy")).to_f64(), (std::vector<double>{1, 9}));
  EXPECT_EQ(load_npy(path("outs/a_3.npy")).to_f64(), (std::vector<double>{0, 0}));
  EXPECT_FALSE(fs::exists(path("escape.npy")));
  EXPECT_FALSE(fs::exists(path("outs/dir")));
  EXPECT_THAT(p.out, AllOf(HasSubstr("saved output 1 'a' -> " + path("outs/a.npy")),
                           HasSubstr("saved output 2 'a' -> " + path("outs/a_3.npy")),
                           HasSubstr("'../escape' -> " + path("outs/.._escape.npy")),
                           HasSubstr("'dir/name' -> " + path("outs/dir_name.npy")),
                           HasSubstr("'bell\\x07' -> " + path("outs/bell_.npy")), Not(HasSubstr("\x07"))));
  // A second run replaces the files and says so.
  Proc again = rlx("run " + path("multi.json") + " -i x=" + path("x.npy") + " --repeat 1 --save-outputs " + path("outs"));
  EXPECT_EXIT_CODE(again, 0);
  EXPECT_THAT(again.out, HasSubstr("(replaced the file that was there)"));
  // A folder that cannot be created fails before compiling or running anything.
  { std::ofstream(path("plainfile")) << "x"; }
  Proc bad = rlx("run " + path("multi.json") + " -i x=" + path("x.npy") + " --repeat 1 --save-outputs " + path("plainfile/o"));
  EXPECT_EXIT_CODE(bad, 1);
  EXPECT_THAT(bad.err, HasSubstr("--save-outputs: cannot create directory"));
  EXPECT_THAT(bad.out, Not(HasSubstr("latency")));
}

// Control characters in names (inputs, outputs) are escaped in what the CLI prints.
TEST_F(Cli, ControlCharactersInNamesAreEscaped) {
  Graph g;
  const Value x = g.input("in\x1b[2J", Shape::of({2}));
  g.add_output(g.relu(x), "out\r\n");
  save_graph_json(g, path("esc.json"));
  Proc p = rlx("inspect " + path("esc.json") + " --print-graph");
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, AllOf(HasSubstr("in\\x1b[2J"), HasSubstr("out\\r\\n"), Not(HasSubstr("\x1b")),
                           Not(HasSubstr("\r"))));
  Proc r = rlx("run " + path("esc.json") + " --random-inputs --repeat 1");
  EXPECT_EXIT_CODE(r, 0);
  EXPECT_THAT(r.out + r.err, AllOf(HasSubstr("in\\x1b[2J"), Not(HasSubstr("\x1b")), Not(HasSubstr("\r"))));
}

// Every subcommand that takes --dim rejects a name that is not a symbolic dim of the graph,
// naming it and listing the graph's dims; valid names still work.
TEST_F(Cli, UnknownDimsAreRejectedEverywhere) {
  const std::string g = export_small("sym.json", "--symbolic-seq");
  Proc check = rlx("check " + g + " --dim nope=3");
  EXPECT_EXIT_CODE(check, 1);
  EXPECT_THAT(check.err, AllOf(HasSubstr("no symbolic dim 'nope'"), HasSubstr("'seq'")));
  Proc run = rlx("run " + g + " --random-inputs --dim nope=3");
  EXPECT_EXIT_CODE(run, 1);
  EXPECT_THAT(run.err, AllOf(HasSubstr("no symbolic dim 'nope'"), HasSubstr("'seq'")));
  EXPECT_EXIT_CODE(rlx("check " + g + " --dim seq=4"), 0);
  EXPECT_EXIT_CODE(rlx("check " + g + " --dim seq=4 --dim seq=5"), 2);
  EXPECT_EXIT_CODE(rlx("check " + g + " --dim seq=1e11"), 2);
  const std::string fixed = export_small("fixed.json");
  Proc none = rlx("check " + fixed + " --dim seq=4");
  EXPECT_EXIT_CODE(none, 1);
  EXPECT_THAT(none.err, HasSubstr("its symbolic dims: (none)"));
}

// A huge --dim is an error naming the input, its shape and the limit (not "out of memory").
TEST_F(Cli, HugeDimsNameTheTensorAndTheSize) {
  const std::string g = export_small("sym.json", "--symbolic-seq");
  Proc p = rlx("run " + g + " --random-inputs --dim seq=100000000000 --repeat 1");
  EXPECT_EXIT_CODE(p, 1);
  EXPECT_THAT(p.err, AllOf(HasSubstr("input '"), HasSubstr("100000000000"), HasSubstr("limit")));
  EXPECT_THAT(p.err, Not(HasSubstr("vector::")));
  Proc check = rlx("check " + g + " --dim seq=1000000000000");
  EXPECT_EXIT_CODE(check, 1);
  EXPECT_THAT(check.err, AllOf(HasSubstr("binding --dim seq=1000000000000"), HasSubstr("limit")));
  Proc digits = rlx("run " + g + " --random-inputs --dim seq=100000000000000000000");
  EXPECT_EXIT_CODE(digits, 2);
  EXPECT_THAT(digits.err, HasSubstr("is too large"));
}

// Writes are checked: export-demo to a full device fails with the OS reason; a failed
// export leaves no stray .bin or temporary file.
TEST_F(Cli, ExportFailuresLeaveNoFilesBehind) {
  const std::string small = " --seq 4 --hidden 16 --heads 2 --kv-heads 1 --llama-layers 1 --bert-layers 0";
  Proc full = rlx("export-demo /dev/full --inline" + small);
  EXPECT_EXIT_CODE(full, 1);
  EXPECT_THAT(full.err, AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device")));
  Proc full_side = rlx("export-demo /dev/full" + small);
  EXPECT_EXIT_CODE(full_side, 1);
  EXPECT_FALSE(fs::exists("/dev/full.bin"));
  fs::create_directory(path("taken.json"));
  Proc taken = rlx("export-demo " + path("taken.json") + small);
  EXPECT_EXIT_CODE(taken, 1);
  EXPECT_THAT(taken.err, HasSubstr("is a directory"));
  EXPECT_FALSE(fs::exists(path("taken.json.bin")));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// inspect totals go through checked arithmetic (an overflow would need millions of tensors at
// the size cap, so this only checks that the checked path counts empty tensors as 0).
TEST_F(Cli, InspectTotalsOfEmptyTensors) {
  std::string header = "{";
  for (int i = 0; i < 3; ++i)
    header += std::string(i ? "," : "") + "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  header += "}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  { std::ofstream(path("z.safetensors"), std::ios::binary) << bytes + header; }
  Proc p = rlx("inspect " + path("z.safetensors"));
  EXPECT_EXIT_CODE(p, 0);
  EXPECT_THAT(p.out, HasSubstr("parameters: 0 elements"));
}

}  // namespace
}  // namespace rlx
