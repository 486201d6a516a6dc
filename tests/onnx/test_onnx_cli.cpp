// `rlx conformance`, `rlx inspect` and `rlx run` on ONNX / safetensors files, run as a
// subprocess on a small case folder written here (a passing, a failing and an unsupported case).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "onnx/onnx_builder.h"
#include "rlx/safetensors.h"
#include "rlx/serialize.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::OnnxBuilder;

struct Proc {
  int code = -1;
  std::string out;
};

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("rlx_onnx_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Proc rlx(const std::string& args) const {
    const std::string out = (dir_ / "out.txt").string();
    const std::string cmd = std::string("'") + rlx::testing::cli_path() + "' " + args + " >'" + out + "' 2>&1";
    const int status = std::system(cmd.c_str());
    Proc p;
    p.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    p.out = ss.str();
    return p;
  }
  static void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }
  // One case: model y = op(x) with x = [1, -2, 3] and the given expected output.
  void make_case(const std::string& name, const std::string& op, const std::vector<float>& expected) {
    const fs::path c = dir_ / "cases" / name;
    fs::create_directories(c / "test_data_set_0");
    OnnxBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {3}).output("y");
    b.node(op, {"x"}, {"y"});
    write(c / "model.onnx", b.bytes());
    write(c / "test_data_set_0" / "input_0.pb",
          testing::to_proto(Tensor::f32({3}, std::vector<float>{1, -2, 3})).SerializeAsString());
    write(c / "test_data_set_0" / "output_0.pb", testing::to_proto(Tensor::f32({3}, expected)).SerializeAsString());
  }
  fs::path dir_;
};

TEST_F(OnnxCli, ConformanceReportsEachCaseAndEnforcesTheFloor) {
  make_case("test_neg", "Neg", {-1, 2, -3});
  make_case("test_abs_wrong", "Abs", {1, 2, 4});
  make_case("test_unknown", "NoSuchOp", {0, 0, 0});
  const std::string doc = (dir_ / "report.md").string();
  const Proc p = rlx("conformance " + (dir_ / "cases").string() + " -j 2 --doc " + doc);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("PASS  test_neg"));
  EXPECT_THAT(p.out, HasSubstr("FAIL  test_abs_wrong: output 0 'y': max abs error 1"));
  EXPECT_THAT(p.out, HasSubstr("UNSUPPORTED  test_unknown"));
  EXPECT_THAT(p.out, HasSubstr("'NoSuchOp'"));
  EXPECT_THAT(p.out, HasSubstr("all cases: 1 pass, 1 fail, 1 unsupported of 3"));
  std::ifstream f(doc);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_THAT(ss.str(), HasSubstr("| all | 3 | 1 | 1 | 1 |"));

  write(dir_ / "floor.txt", "2\n");
  const Proc below = rlx("conformance " + (dir_ / "cases").string() + " -q --floor " + (dir_ / "floor.txt").string());
  EXPECT_EQ(below.code, 1);
  EXPECT_THAT(below.out, HasSubstr("below the floor of 2"));
}

// --plan-only imports, optimizes and legalizes each case for the device and runs nothing: a
// wrong expected output does not matter, an op rlx cannot import still does.
TEST_F(OnnxCli, ConformancePlanOnlyRunsNothing) {
  make_case("test_neg", "Neg", {-1, 2, -3});
  make_case("test_abs_wrong", "Abs", {1, 2, 4});
  make_case("test_unknown", "NoSuchOp", {0, 0, 0});
  const Proc p = rlx("conformance " + (dir_ / "cases").string() + " --plan-only -j 2");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("PASS  test_abs_wrong"));
  EXPECT_THAT(p.out, HasSubstr("UNSUPPORTED  test_unknown"));
  EXPECT_THAT(p.out, HasSubstr("plan only (nothing ran)"));
  EXPECT_THAT(p.out, HasSubstr("all cases: 2 pass, 0 fail, 1 unsupported of 3"));
  const Proc doc = rlx("conformance " + (dir_ / "cases").string() + " --plan-only --doc " + (dir_ / "r.md").string());
  EXPECT_EQ(doc.code, 2) << doc.out;
  EXPECT_THAT(doc.out, HasSubstr("with --plan-only nothing runs"));
}

TEST_F(OnnxCli, ConformanceSkipsAMissingFolderWhenAsked) {
  const Proc p = rlx("conformance " + (dir_ / "absent").string() + " --skip-missing");
  EXPECT_EQ(p.code, 77);
  EXPECT_THAT(p.out, HasSubstr("skipped"));
  EXPECT_EQ(rlx("conformance " + (dir_ / "absent").string()).code, 1);
}

TEST_F(OnnxCli, InspectAndRunAnOnnxModel) {
  OnnxBuilder b(17);
  b.input("x", onnx::TensorProto::FLOAT, {-1, 4}, {"batch"}).output("y");
  b.initializer("w", Tensor::f32({4, 2}, std::vector<float>{1, 0, 0, 1, 1, 0, 0, 1}));
  b.node("MatMul", {"x", "w"}, {"y"});
  const std::string model = (dir_ / "m.onnx").string();
  write(model, b.bytes());
  const Proc info = rlx("inspect " + model);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_THAT(info.out, HasSubstr("opsets: ai.onnx=17"));
  EXPECT_THAT(info.out, HasSubstr("x:float32[batch,4]"));
  EXPECT_THAT(info.out, HasSubstr("MatMul=1"));
  const Proc run = rlx("run " + model + " --random-inputs --dim batch=3 --repeat 3");
  EXPECT_EQ(run.code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("y: f32[3,2]"));
  EXPECT_THAT(run.out, HasSubstr("p50"));
  const Proc bad = rlx("run " + model + " --random-inputs --dim seq=3");
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.out, HasSubstr("'seq', which is not a symbolic dim"));
}

TEST_F(OnnxCli, InspectASafetensorsFile) {
  const std::string path = (dir_ / "w.safetensors").string();
  save_safetensors(path, {{"emb", Tensor::f32({2, 3}, std::vector<float>(6, 1.0f))}}, {{"format", "pt"}});
  const Proc p = rlx("inspect " + path);
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("emb"));
  EXPECT_THAT(p.out, HasSubstr("f32[2,3]"));
  EXPECT_THAT(p.out, HasSubstr("format: pt"));
  write(dir_ / "bad.safetensors", "short");
  const Proc bad = rlx("inspect " + (dir_ / "bad.safetensors").string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.out, HasSubstr("too short"));
}

// ---- hardening (issue 26) --------------------------------------------------------------

// The report is written with every write, flush and close checked: a full disk is an error
// (exit 1, the OS reason), never "wrote ...".
TEST_F(OnnxCli, ConformanceDocWriteFailuresAreErrors) {
  make_case("test_neg", "Neg", {-1, 2, -3});
  const Proc full = rlx("conformance " + (dir_ / "cases").string() + " -q --doc /dev/full");
  EXPECT_EQ(full.code, 1) << full.out;
  EXPECT_THAT(full.out, ::testing::AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device")));
  EXPECT_THAT(full.out, ::testing::Not(HasSubstr("wrote /dev/full")));
  const Proc nodir = rlx("conformance " + (dir_ / "cases").string() + " -q --doc " + (dir_ / "no/dir/r.md").string());
  EXPECT_EQ(nodir.code, 1) << nodir.out;
  EXPECT_THAT(nodir.out, HasSubstr("does not exist"));
  EXPECT_THAT(nodir.out, ::testing::Not(HasSubstr("all cases:")));  // found before running the cases
  const Proc isdir = rlx("conformance " + (dir_ / "cases").string() + " -q --doc " + dir_.string());
  EXPECT_EQ(isdir.code, 1) << isdir.out;
  EXPECT_THAT(isdir.out, HasSubstr("is a directory"));
  // --floor: a missing or malformed file is an error with the reason.
  const Proc nofloor = rlx("conformance " + (dir_ / "cases").string() + " -q --floor " + (dir_ / "none.txt").string());
  EXPECT_EQ(nofloor.code, 1);
  EXPECT_THAT(nofloor.out, HasSubstr("No such file or directory"));
  write(dir_ / "floor.txt", "1 banana\n");
  const Proc badfloor = rlx("conformance " + (dir_ / "cases").string() + " -q --floor " + (dir_ / "floor.txt").string());
  EXPECT_EQ(badfloor.code, 1);
  EXPECT_THAT(badfloor.out, HasSubstr("must hold one non-negative integer"));
}

// A case whose own files cannot be read (a corrupt model, a missing input, a corrupt
// expected output) is a FAIL with the reason, not UNSUPPORTED.
TEST_F(OnnxCli, BrokenCasesAreFailures) {
  make_case("test_neg", "Neg", {-1, 2, -3});
  make_case("test_bad_model", "Neg", {-1, 2, -3});
  write(dir_ / "cases" / "test_bad_model" / "model.onnx", "this is not a protobuf");
  make_case("test_no_input", "Neg", {-1, 2, -3});
  fs::remove(dir_ / "cases" / "test_no_input" / "test_data_set_0" / "input_0.pb");
  make_case("test_bad_output", "Neg", {-1, 2, -3});
  write(dir_ / "cases" / "test_bad_output" / "test_data_set_0" / "output_0.pb", "\xff\xff\xff");
  make_case("test_unknown", "NoSuchOp", {0, 0, 0});
  // An element type rlx has no storage for is UNSUPPORTED (the files are fine).
  make_case("test_complex64", "Neg", {-1, 2, -3});
  onnx::TensorProto c64;
  c64.set_data_type(onnx::TensorProto::COMPLEX64);
  c64.add_dims(1);
  c64.add_float_data(7);
  c64.add_float_data(0);
  write(dir_ / "cases" / "test_complex64" / "test_data_set_0" / "input_0.pb", c64.SerializeAsString());
  const Proc p = rlx("conformance " + (dir_ / "cases").string() + " -j 2");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("FAIL  test_bad_model: broken case: model.onnx is not a valid onnx.ModelProto"));
  EXPECT_THAT(p.out, HasSubstr("FAIL  test_no_input: broken case: cannot read test_data_set_0/input_0.pb"));
  EXPECT_THAT(p.out, HasSubstr("FAIL  test_bad_output: broken case: test_data_set_0/output_0.pb is not a valid onnx.TensorProto"));
  EXPECT_THAT(p.out, HasSubstr("UNSUPPORTED  test_unknown"));
  EXPECT_THAT(p.out, HasSubstr("UNSUPPORTED  test_complex64"));
  EXPECT_THAT(p.out, HasSubstr("all cases: 1 pass, 3 fail, 2 unsupported of 6"));
}

// `check` applies --dim at ONNX import like `run`: an unknown name is rejected.
TEST_F(OnnxCli, CheckRejectsUnknownDimsOfAnOnnxModel) {
  OnnxBuilder b(17);
  b.input("x", onnx::TensorProto::FLOAT, {-1, 4}, {"batch"}).output("y");
  b.node("Relu", {"x"}, {"y"});
  const std::string model = (dir_ / "m.onnx").string();
  write(model, b.bytes());
  const Proc bad = rlx("check " + model + " --dim nope=3");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_THAT(bad.out, ::testing::AllOf(HasSubstr("'nope'"), HasSubstr("'batch'")));
  const Proc ok = rlx("check " + model + " --dim batch=3");
  EXPECT_EQ(ok.code, 0) << ok.out;
  // A missing model gives the OS reason.
  const Proc missing = rlx("inspect " + (dir_ / "absent.onnx").string());
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.out, HasSubstr("No such file or directory"));
}

// A model whose import needs concrete dims (a strided Conv on symbolic spatial dims): `run`
// takes them from the input files (one import per shape), `inspect` and `check` fall back to
// the ModelProto's summary and say which node needs a dim and how to give it.
TEST_F(OnnxCli, RunInspectAndCheckWithoutDims) {
  OnnxBuilder b(17);
  b.input("x", onnx::TensorProto::FLOAT, {-1, 1, -1, -1}, {"n", "", "h", "w"}).output("y");
  b.initializer("k", Tensor::f32({1, 1, 3, 3}, std::vector<float>(9, 1.0f)));
  auto& conv = b.node("Conv", {"x", "k"}, {"y"}, "conv0");
  testing::set_attr(conv, "strides", std::vector<int64_t>{2, 2});
  const std::string model = (dir_ / "conv.onnx").string();
  write(model, b.bytes());
  const std::string x1 = (dir_ / "x1.npy").string(), x2 = (dir_ / "x2.npy").string();
  save_npy(Tensor::f32({1, 1, 7, 7}, std::vector<float>(49, 1.0f)), x1);
  save_npy(Tensor::f32({2, 1, 9, 5}, std::vector<float>(90, 2.0f)), x2);

  const Proc r1 = rlx("run " + model + " --input x=" + x1 + " --repeat 1");
  EXPECT_EQ(r1.code, 0) << r1.out;
  EXPECT_THAT(r1.out, HasSubstr("importing for input shapes x=[1,1,7,7]"));
  EXPECT_THAT(r1.out, HasSubstr("y: f32[1,1,3,3] min=9 max=9"));
  const Proc r2 = rlx("run " + model + " --input x=" + x2 + " --repeat 1");
  EXPECT_EQ(r2.code, 0) << r2.out;
  EXPECT_THAT(r2.out, HasSubstr("y: f32[2,1,4,2] min=18 max=18"));
  // --dim still works and must agree with the files.
  const Proc fixed = rlx("run " + model + " --input x=" + x1 + " --dim h=7 --repeat 1");
  EXPECT_EQ(fixed.code, 0) << fixed.out;
  const Proc clash = rlx("run " + model + " --input x=" + x1 + " --dim h=8 --repeat 1");
  EXPECT_EQ(clash.code, 1) << clash.out;
  EXPECT_THAT(clash.out, AllOf(HasSubstr("input 'x': expected f32[n,1,8,w], given f32[1,1,7,7]"), HasSubstr("--dim h=8")));
  // --random-inputs picks a size for each symbolic dim nothing binds, by its name (w: an image
  // side, 224), and says so.
  const Proc random = rlx("run " + model + " --random-inputs --dim n=1 --dim h=5 --repeat 1");
  EXPECT_EQ(random.code, 0) << random.out;
  EXPECT_THAT(random.out, AllOf(HasSubstr("--random-inputs picked 'w=224'"), HasSubstr("--dim NAME=N"),
                                HasSubstr("y: f32[1,1,2,111]")));
  const Proc all = rlx("run " + model + " --random-inputs --repeat 1");
  EXPECT_EQ(all.code, 0) << all.out;
  EXPECT_THAT(all.out, AllOf(HasSubstr("'n=1', 'h=224', 'w=224'"), HasSubstr("y: f32[1,1,111,111]")));
  const Proc full = rlx("run " + model + " --random-inputs --dim n=1 --dim h=5 --dim w=5 --repeat 1");
  EXPECT_EQ(full.code, 0) << full.out;
  EXPECT_THAT(full.out, HasSubstr("y: f32[1,1,2,2]"));

  const Proc info = rlx("inspect " + model);
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_THAT(info.out, AllOf(HasSubstr("x: float32[n,1,h,w]"), HasSubstr("y: float32[?]"), HasSubstr("Conv  1"),
                              HasSubstr("needs a concrete dim: ONNX node 'conv0' (Conv, opset 17)"),
                              HasSubstr("--dim h=V")));
  const Proc bound = rlx("inspect " + model + " --dim n=1 --dim h=7 --dim w=7");
  EXPECT_EQ(bound.code, 0) << bound.out;
  EXPECT_THAT(bound.out, HasSubstr("f32[1,1,3,3]"));
  const Proc check = rlx("check " + model);
  EXPECT_EQ(check.code, 1) << check.out;
  EXPECT_THAT(check.out, AllOf(HasSubstr("ONNX node 'conv0'"), HasSubstr("'rlx check " + model + " --dim h=V"),
                               HasSubstr("not checked")));
  const Proc checked = rlx("check " + model + " --dim n=1 --dim h=7 --dim w=7");
  EXPECT_EQ(checked.code, 0) << checked.out;
  EXPECT_THAT(checked.out, HasSubstr("ok: every node runs on cpu"));
}

// Two input files that give one symbolic dim two sizes: both inputs and axes are named.
TEST_F(OnnxCli, RunRejectsInputsThatDisagreeOnADim) {
  OnnxBuilder b(17);
  b.input("a", onnx::TensorProto::FLOAT, {-1, 3}, {"seq"}).input("m", onnx::TensorProto::FLOAT, {-1, 3}, {"seq"});
  b.output("y");
  b.node("Add", {"a", "m"}, {"y"});
  const std::string model = (dir_ / "add.onnx").string();
  write(model, b.bytes());
  save_npy(Tensor::f32({2, 3}, std::vector<float>(6, 1.0f)), (dir_ / "a.npy").string());
  save_npy(Tensor::f32({4, 3}, std::vector<float>(12, 1.0f)), (dir_ / "m.npy").string());
  const Proc p = rlx("run " + model + " --input a=" + (dir_ / "a.npy").string() + " --input m=" + (dir_ / "m.npy").string());
  EXPECT_EQ(p.code, 1) << p.out;
  EXPECT_THAT(p.out, HasSubstr("symbolic dim 'seq' is 2 in input 'a' (axis 0) but 4 in input 'm' (axis 0)"));
}

}  // namespace
}  // namespace rlx
