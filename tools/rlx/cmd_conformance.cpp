// rlx conformance DIR: runs the ONNX backend node cases (DIR/test_*/model.onnx with
// test_data_set_0/{input,output}_<i>.pb) on a device. Cases run in forked worker processes (one
// per job, each replaced after 64 cases) with a time limit per case, so a crash or hang in one
// case is reported as a FAIL, takes only its worker down, and the run goes on.
// Prints one line per case and totals by op; optionally writes the Markdown report and
// enforces a floor of passing cases (for CI).
#include <CLI/CLI.hpp>
#include <onnx/onnx_pb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "cli.h"
#include "io/file_access.h"
#include "passes/legalize.h"
#include "passes/pipeline.h"
#include "rlx/onnx.h"
#include "runtime/backend.h"

namespace rlx::cli {
namespace {

namespace fs = std::filesystem;

struct ConformanceOptions {
  std::string dir;
  std::string device = "cpu";
  std::string filter;
  int jobs = 0;
  double timeout_s = 60;
  std::string doc;
  std::string floor_file;
  bool skip_missing = false;
  bool quiet = false;
  bool plan_only = false;  // import, optimize and legalize for the device; run nothing
  std::vector<std::string> knobs;  // name=value, applied to every case's CompileOptions
};

enum class Status { Pass, Fail, Unsupported };
const char* status_name(Status s) {
  switch (s) {
    case Status::Pass: return "PASS";
    case Status::Fail: return "FAIL";
    case Status::Unsupported: return "UNSUPPORTED";
  }
  return "?";
}

struct CaseResult {
  std::string name;
  Status status = Status::Fail;
  std::string detail;
  std::string op;       // the op under test (for totals)
  bool float32_only = false;
};

std::string one_line(std::string s, size_t limit = 400) {
  for (char& c : s)
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  return io::printable(s, limit);  // other control characters escaped
}

// numpy allclose (equal_nan) for floats; exact for everything else (float8 / float4: the same
// bits, any NaN matching any NaN). Returns "" when equal.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.shape() != want.shape()) return "shape " + dims_str(got.shape()) + ", expected " + dims_str(want.shape());
  if (is_narrow_float(want.dtype())) {
    const auto* a = static_cast<const uint8_t*>(got.raw());
    const auto* b = static_cast<const uint8_t*>(want.raw());
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double va = narrow_float_value(want.dtype(), a[i]), vb = narrow_float_value(want.dtype(), b[i]);
      if (a[i] != b[i] && !(std::isnan(va) && std::isnan(vb))) {
        std::ostringstream os;
        os << "element " << i << " is " << va << " (bits 0x" << std::hex << int(a[i]) << "), expected " << std::dec
           << vb << " (bits 0x" << std::hex << int(b[i]) << ")";
        return os.str();
      }
    }
    return "";
  }
  if (is_float(want.dtype())) {
    const auto a = got.to_f64(), b = want.to_f64();
    double worst = 0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
      if (both_nan) continue;
      const double err = std::fabs(a[i] - b[i]);
      const bool ok = a[i] == b[i] || err <= 1e-4 + 1e-3 * std::fabs(b[i]);
      if (!ok) {
        ++bad;
        if (!(err <= worst)) {  // NaN errors count as worst
          worst = std::isnan(err) ? INFINITY : err;
          at = i;
        }
      }
    }
    if (bad == 0) return "";
    std::ostringstream os;
    os << "max abs error " << worst << " at flat index " << at << " (got " << a[at] << ", expected " << b[at] << "); "
       << bad << " of " << a.size() << " elements off";
    return os.str();
  }
  const auto a = got.to_i64(), b = want.to_i64();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return "element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", expected " + std::to_string(b[i]);
  return "";
}

// --plan-only: whether every node of the optimized graph runs on `device`, natively or through
// the shared legalize (as `rlx check`), without the device: PASS, or an rlx::Error naming each
// node that cannot run.
std::pair<Status, std::string> plan_case(const Graph& g, Device device, const CompileOptions& base) {
  const auto backend = make_backend_for_check(device);
  const Graph opt = passes::optimize(g, *backend, base);
  const passes::ClaimFn claims = [&](const Graph& gr, const Node& n) { return backend->claims(gr, n); };
  const passes::ReasonFn why = [&](const Graph& gr, const Node& n) { return backend->unclaimed_reason(gr, n); };
  passes::legalize(opt, claims, device_name(device), why);
  return {Status::Pass, ""};
}

// Runs one case in this process (or, with plan_only, plans it). Throws rlx::Error for what rlx
// does not support.
// A case whose own files cannot be read or parsed (a missing, unreadable or corrupt model or
// input/expected-output tensor): a FAIL with the reason, never UNSUPPORTED (which means rlx
// cannot import or run what the files hold, e.g. an element type it has no storage for).
struct BrokenCase : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads `file` (a regular file) and checks that it parses as the protobuf message `Proto`.
template <class Proto> void check_case_file(const fs::path& dir, const std::string& name) {
  std::string bytes;
  try {
    bytes = io::read_regular_file((dir / name).string(), "the file");
  } catch (const std::exception& e) {
    throw BrokenCase("broken case: cannot read " + name + ": " + e.what());
  }
  Proto proto;
  if (!proto.ParseFromString(bytes))
    throw BrokenCase("broken case: " + name + " is not a valid " + proto.GetTypeName() + " (" +
                     std::to_string(bytes.size()) + " bytes)");
}

std::pair<Status, std::string> run_case(const fs::path& dir, Device device, bool plan_only, const CompileOptions& base) {
  const fs::path model = dir / "model.onnx";
  const fs::path data = dir / "test_data_set_0";
  check_case_file<onnx::ModelProto>(dir, "model.onnx");
  const OnnxModelInfo info = onnx_model_info(model.string());
  for (const auto& io : info.inputs)
    if (io.type.find('(') != std::string::npos || io.type == "map")
      return {Status::Unsupported, "input '" + io.name + "' is a " + io.type + " (only tensors are supported)"};
  for (const auto& io : info.outputs)
    if (io.type.find('(') != std::string::npos || io.type == "map")
      return {Status::Unsupported, "output '" + io.name + "' is a " + io.type + " (only tensors are supported)"};
  OnnxImportOptions opts;
  NamedTensors feeds;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    const fs::path f = data / ("input_" + std::to_string(i) + ".pb");
    check_case_file<onnx::TensorProto>(dir, "test_data_set_0/" + f.filename().string());
    Tensor t = load_onnx_tensor(f.string());
    opts.known_inputs[info.inputs[i].name] = t;
    feeds.emplace_back(info.inputs[i].name, t);
  }
  const Graph g = import_onnx(model.string(), opts);
  if (plan_only) return plan_case(g, device, base);
  CompileOptions copts = base;
  copts.num_threads = 1;
  CompiledGraph cg = Session(device).compile(g, copts);
  // Feed only the inputs the compiled graph still reads (folded ones are gone).
  const auto names = cg.input_names();
  const std::set<std::string> wanted(names.begin(), names.end());
  NamedTensors used;
  for (auto& [n, t] : feeds)
    if (wanted.count(n)) used.emplace_back(n, t);
  // The expected outputs are read before running, so a broken file is not taken for a failure of rlx.
  std::vector<Tensor> wants;
  for (size_t k = 0; k < info.outputs.size(); ++k) {
    const std::string file = "output_" + std::to_string(k) + ".pb";
    check_case_file<onnx::TensorProto>(dir, "test_data_set_0/" + file);
    wants.push_back(load_onnx_tensor((data / file).string()));
  }
  const auto outs = cg.run(used);
  if (outs.size() != info.outputs.size())
    return {Status::Fail, std::to_string(outs.size()) + " outputs, expected " + std::to_string(info.outputs.size())};
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string diff = compare(outs[k], wants[k]);
    if (!diff.empty()) return {Status::Fail, "output " + std::to_string(k) + " '" + info.outputs[k].name + "': " + diff};
  }
  return {Status::Pass, ""};
}

// The op a case tests: its top-level op types other than Constant, joined with '+'.
std::string case_op(const fs::path& dir, bool& float32_only) {
  float32_only = false;
  try {
    const OnnxModelInfo info = onnx_model_info((dir / "model.onnx").string());
    std::string op;
    for (const auto& [name, count] : info.op_histogram)
      if (name != "Constant") op += (op.empty() ? "" : "+") + name;
    if (op.empty()) op = "Constant";
    float32_only = !info.inputs.empty() || !info.outputs.empty();
    for (const auto* list : {&info.inputs, &info.outputs})
      for (const auto& io : *list) float32_only = float32_only && io.type == "float32";
    return op;
  } catch (const std::exception& e) {
    return "(unreadable model)";
  }
}

struct Running {
  pid_t pid = -1;
  int fd = -1;       // results from the worker
  int to = -1;       // case indices to the worker
  size_t index = 0;  // the case it runs
  bool busy = false;
  int cases_left = 0;
  std::chrono::steady_clock::time_point start;
  std::string out;
};

// The result line of one case: "STATUS\tdetail" (one line).
std::string case_line(const fs::path& dir, Device device, bool plan_only, const CompileOptions& base) {
  try {
    auto [st, detail] = run_case(dir, device, plan_only, base);
    return std::string(status_name(st)) + "\t" + one_line(detail);
  } catch (const BrokenCase& e) {
    return std::string("FAIL\t") + one_line(e.what());
  } catch (const Error& e) {
    return std::string("UNSUPPORTED\t") + one_line(e.what());
  } catch (const std::exception& e) {
    return std::string("FAIL\tunexpected exception: ") + one_line(e.what());
  }
}

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = write(fd, p, bytes);
    if (n <= 0) return false;
    p += n, bytes -= static_cast<size_t>(n);
  }
  return true;
}

// A worker: reads case indices (uint64) from `in`, writes each case's result line + '\n' to
// `out`, and exits after `max_cases` cases or when `in` closes. The device runtime it starts for
// the first case serves the next ones (its start-up is most of a small case's time on CPU
// drivers); a case that crashes or hangs takes only its worker down.
[[noreturn]] void worker_main(const std::vector<fs::path>& cases, Device device, bool plan_only,
                              const CompileOptions& base, int in, int out, int max_cases) {
  for (int done = 0; done < max_cases; ++done) {
    uint64_t index = 0;
    if (read(in, &index, sizeof index) != static_cast<ssize_t>(sizeof index) || index >= cases.size()) break;
    const std::string line = case_line(cases[index], device, plan_only, base) + "\n";
    if (!write_all(out, line.data(), line.size())) break;
  }
  close(out);
  _exit(0);
}

void finish(Running& r, int wstatus, bool timed_out, double timeout_s, CaseResult& res) {
  if (timed_out) {
    res.status = Status::Fail;
    res.detail = "timed out after " + std::to_string(static_cast<int>(timeout_s)) + " s (killed)";
    return;
  }
  if (WIFSIGNALED(wstatus)) {
    res.status = Status::Fail;
    res.detail = std::string("crashed: ") + strsignal(WTERMSIG(wstatus));
    return;
  }
  const auto tab = r.out.find('\t');
  if (tab == std::string::npos) {
    res.status = Status::Fail;
    res.detail = "the case's process exited without a result";
    return;
  }
  const std::string st = r.out.substr(0, tab);
  res.detail = r.out.substr(tab + 1);
  res.status = st == "PASS" ? Status::Pass : st == "UNSUPPORTED" ? Status::Unsupported : Status::Fail;
}

// A forked child running `body(write_fd)`, then exiting; returns
// the child's pid and the read end of its pipe.
template <class Body>
std::pair<pid_t, int> fork_child(Body&& body) {
  int fds[2];
  if (pipe(fds) != 0) throw Error(std::string("pipe() failed: ") + std::strerror(errno));
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork() failed: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    body(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Why `device` cannot run here ("" when it can), asked in a forked child like the cases: a
// device runtime started in this process (driver threads, e.g. lavapipe's) would not survive the
// forks that run the cases.
std::string device_unavailable(Device device, const CompileOptions& base) {
  const auto [pid, fd] = fork_child([&](int out) {
    std::string why;
    try {
      (void)make_backend(device, base);
    } catch (const std::exception& e) {
      why = e.what();
    }
    const char* p = why.data();
    for (size_t left = why.size(); left > 0;) {
      const ssize_t n = write(out, p, left);
      if (n <= 0) break;
      p += n, left -= static_cast<size_t>(n);
    }
  });
  std::string why;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) why.append(buf, static_cast<size_t>(n));
  close(fd);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (why.empty() && !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0))
    why = "the check of device '" + std::string(device_name(device)) + "' crashed";
  return why;
}

// Cases a worker runs before it is replaced (bounds what one case can leave behind for the next).
constexpr int kCasesPerWorker = 64;

std::vector<CaseResult> run_all(const std::vector<fs::path>& cases, const ConformanceOptions& o, Device device,
                                const CompileOptions& base) {
  std::vector<CaseResult> results(cases.size());
  const int jobs = o.jobs > 0 ? o.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::vector<Running> workers;
  size_t next = 0, done = 0;
  auto spawn = [&]() {
    int to[2];
    if (pipe(to) != 0) throw Error(std::string("pipe() failed: ") + std::strerror(errno));
    const auto [pid, fd] = fork_child([&](int out) {
      close(to[1]);
      for (const Running& w : workers) close(w.fd), close(w.to);  // the siblings' pipes are not ours
      worker_main(cases, device, o.plan_only, base, to[0], out, kCasesPerWorker);
    });
    close(to[0]);
    Running w;
    w.pid = pid, w.fd = fd, w.to = to[1], w.cases_left = kCasesPerWorker;
    workers.push_back(w);
  };
  auto retire = [&](size_t i, bool kill_it) {
    Running& w = workers[i];
    close(w.to);
    if (kill_it) kill(w.pid, SIGKILL);
    int wstatus = 0;
    waitpid(w.pid, &wstatus, 0);
    close(w.fd);
    workers.erase(workers.begin() + static_cast<std::ptrdiff_t>(i));
    return wstatus;
  };
  auto record = [&](size_t index, CaseResult& res) {
    res.name = cases[index].filename().string();
    res.op = case_op(cases[index], res.float32_only);
    ++done;
    if (!o.quiet) {
      std::cout << status_name(res.status) << "  " << shown(res.name);
      if (!res.detail.empty()) std::cout << ": " << res.detail;
      std::cout << "\n";
    }
  };
  std::cout.flush();
  while (done < cases.size()) {
    // Hand the next cases to idle workers, starting workers up to `jobs`.
    for (size_t i = 0; next < cases.size(); ++i) {
      if (i == workers.size()) {
        if (static_cast<int>(workers.size()) >= jobs) break;
        spawn();
      }
      Running& w = workers[i];
      if (w.busy || w.cases_left == 0) continue;
      const uint64_t index = next;
      if (!write_all(w.to, &index, sizeof index)) continue;  // it died: noticed when its pipe closes
      w.busy = true, w.index = next++, w.start = std::chrono::steady_clock::now(), w.out.clear();
      --w.cases_left;
    }
    std::vector<pollfd> pfds;
    for (const auto& w : workers) pfds.push_back({w.fd, POLLIN, 0});
    poll(pfds.data(), pfds.size(), 100);
    for (size_t i = 0; i < workers.size();) {
      Running& w = workers[i];
      bool eof = false;
      if (pfds.size() > i && (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[4096];
        const ssize_t n = read(w.fd, buf, sizeof buf);
        if (n > 0) w.out.append(buf, static_cast<size_t>(n));
        else eof = true;
      }
      // A finished case: its line is complete.
      if (w.busy) {
        if (const auto nl = w.out.find('\n'); nl != std::string::npos) {
          Running line = w;
          line.out = w.out.substr(0, nl);
          w.out.erase(0, nl + 1);
          w.busy = false;
          CaseResult& res = results[w.index];
          finish(line, 0, false, o.timeout_s, res);
          record(w.index, res);
        }
      }
      const bool timed_out =
          w.busy && !eof &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - w.start).count() > o.timeout_s;
      if (eof || timed_out || (!w.busy && w.cases_left == 0)) {
        const bool busy = w.busy;
        const size_t index = w.index;
        Running copy = w;
        pfds.erase(pfds.begin() + static_cast<std::ptrdiff_t>(i));
        const int wstatus = retire(i, timed_out || !eof);
        if (busy) {  // the case took its worker down (or hung)
          copy.out.clear();
          finish(copy, wstatus, timed_out, o.timeout_s, results[index]);
          record(index, results[index]);
        }
        continue;
      }
      ++i;
    }
  }
  for (size_t i = workers.size(); i-- > 0;) retire(i, false);
  return results;
}

// Expanded cases ("<base>_expanded", "<base>_expanded_ver18") are grouped under their base op.
std::string group_of(const CaseResult& r, const std::map<std::string, std::string>& op_by_case) {
  for (const char* suffix : {"_expanded_ver18", "_expanded"}) {
    const std::string s = suffix;
    if (r.name.size() > s.size() && r.name.compare(r.name.size() - s.size(), s.size(), s) == 0) {
      auto it = op_by_case.find(r.name.substr(0, r.name.size() - s.size()));
      if (it != op_by_case.end()) return it->second + " (expanded)";
    }
  }
  return r.op;
}

struct Totals {
  int64_t pass = 0, fail = 0, unsupported = 0;
  int64_t total() const { return pass + fail + unsupported; }
  void add(Status s) { (s == Status::Pass ? pass : s == Status::Fail ? fail : unsupported) += 1; }
};

std::string pct(int64_t a, int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0);
  return buf;
}

void write_doc(const std::string& path, const std::vector<CaseResult>& results,
               const std::map<std::string, Totals>& by_op, const Totals& all, const Totals& f32,
               const std::string& device) {
  std::ostringstream f;
  f << "# ONNX node conformance\n\n"
    << "Generated by `rlx conformance ../shared/onnx-node --device " << device << " --doc docs/onnx-conformance.md`; "
    << "do not edit by hand. The cases are the ONNX backend node tests (see `../shared/onnx-node/README.md` for "
       "their source and judging rule: floats pass with numpy `allclose(rtol=1e-3, atol=1e-4, equal_nan)`, "
       "everything else must match exactly, and dtypes and shapes must match).\n\n"
    << "Each case runs in a worker process (one per core, replaced every 64 cases) with a time limit; a crash or a "
       "timeout is a FAIL and takes only its worker down. A case whose "
       "model rlx cannot import or run is UNSUPPORTED with the reason. The importer is given the input values "
       "(`OnnxImportOptions::known_inputs`) so that inputs used as shape operands (Reshape's shape, Slice's "
       "starts, TopK's k, ...) can be folded, and the inputs' shapes fix the models' symbolic dims.\n\n"
    << "## Totals\n\n"
    << "| cases | total | pass | fail | unsupported | pass rate |\n|---|---:|---:|---:|---:|---:|\n"
    << "| all | " << all.total() << " | " << all.pass << " | " << all.fail << " | " << all.unsupported << " | "
    << pct(all.pass, all.total()) << " |\n"
    << "| float32-only (every input and output float32) | " << f32.total() << " | " << f32.pass << " | " << f32.fail
    << " | " << f32.unsupported << " | " << pct(f32.pass, f32.total()) << " |\n\n"
    << "## Left out on purpose\n\n"
    << "- Strings: `string_*`, `regex_*`, `strnormalizer_*`, StringSplit/StringConcat, LabelEncoder "
       "(rlx has no string dtype).\n"
    << "- Image decoding: `image_decoder_*` (needs JPEG/PNG/... codecs).\n"
    << "- Training: the `ai.onnx.preview.training` domain (Adagrad, Adam, Momentum) and other non-default "
       "domains (`ai.onnx.ml`, `ai.onnx.preview`).\n"
    << "- Sequences, optionals and maps as values (`sequence_*`, `optional_*`, `*_seq`, `*_opt`).\n"
    << "- Element types without rlx storage: complex (and strings, above). float8, float4, int4/uint4 and "
       "int2/uint2 are storage-only dtypes: Cast, data movement and Quantize/DequantizeLinear run on them.\n"
    << "- Random ops (`bernoulli*`, `Random*`) and training-mode Dropout: outputs depend on the generator.\n\n"
    << "## By op\n\n| op | cases | pass | fail | unsupported |\n|---|---:|---:|---:|---:|\n";
  for (const auto& [op, t] : by_op)
    f << "| " << op << " | " << t.total() << " | " << t.pass << " | " << t.fail << " | " << t.unsupported << " |\n";
  f << "\n## Cases that do not pass\n\n| case | result | reason |\n|---|---|---|\n";
  for (const auto& r : results) {
    if (r.status == Status::Pass) continue;
    std::string d = one_line(r.detail, 240);
    for (size_t p = 0; (p = d.find('|', p)) != std::string::npos; p += 2) d.replace(p, 1, "\\|");
    f << "| " << shown(r.name) << " | " << status_name(r.status) << " | " << d << " |\n";
  }
  // Every write, the flush and the close are checked (a full disk must not report success).
  io::write_file(path, {f.str()}, "--doc: the report");
}

int run_conformance(const ConformanceOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) {
    if (o.skip_missing) {
      std::cout << "rlx conformance: skipped: the case folder '" << shown(o.dir) << "' does not exist\n";
      return 77;  // ctest SKIP_RETURN_CODE
    }
    throw Error("the case folder '" + shown(o.dir) + "' does not exist");
  }
  if (o.plan_only && !o.doc.empty())
    throw UsageError("--doc writes the report of a run; with --plan-only nothing runs (drop one of them)");
  if (!o.doc.empty()) {  // fail before running every case, not after
    const fs::path doc(o.doc);
    const fs::path parent = doc.parent_path().empty() ? fs::path(".") : doc.parent_path();
    if (fs::is_directory(doc, ec)) throw Error("--doc: '" + shown(o.doc) + "' is a directory");
    if (!fs::is_directory(parent, ec))
      throw Error("--doc: the folder of '" + shown(o.doc) + "' does not exist (" + shown(parent.string()) + ")");
  }
  const Device device = device_from_name(o.device);
  CompileOptions base;  // bad knobs fail here, before any case runs
  apply_knobs(base, o.knobs);
  if (!o.plan_only) {  // a device that cannot run here fails (or skips) once, not once per case
    if (const std::string why = device_unavailable(device, base); !why.empty()) {
      if (!o.skip_missing) throw Error(why);
      std::cout << "rlx conformance: skipped: " << why << "\n";
      return 77;
    }
  }
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(o.dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("test_", 0) != 0) continue;
    if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
    cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  if (cases.empty()) throw Error("no test_* cases in '" + shown(o.dir) + "'" + (o.filter.empty() ? "" : " matching '" + shown(o.filter) + "'"));
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = run_all(cases, o, device, base);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::map<std::string, std::string> op_by_case;
  for (const auto& r : results) op_by_case[r.name] = r.op;
  std::map<std::string, Totals> by_op;
  Totals all, f32;
  for (const auto& r : results) {
    by_op[group_of(r, op_by_case)].add(r.status);
    all.add(r.status);
    if (r.float32_only) f32.add(r.status);
  }
  if (!o.quiet) {
    std::cout << "\ntotals by op (pass/fail/unsupported):\n";
    for (const auto& [op, t] : by_op)
      std::cout << "  " << op << ": " << t.pass << "/" << t.fail << "/" << t.unsupported << "\n";
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.1f s", secs);
  if (o.plan_only)
    std::cout << "\nplan only (nothing ran): pass = every node runs on " << o.device << ", natively or decomposed\n";
  std::cout << "\nall cases: " << all.pass << " pass, " << all.fail << " fail, " << all.unsupported << " unsupported of "
            << all.total() << " (" << pct(all.pass, all.total()) << ")\n"
            << "float32-only cases: " << f32.pass << " pass of " << f32.total() << " (" << pct(f32.pass, f32.total())
            << ")\n"
            << "time: " << buf << "\n";
  if (!o.doc.empty()) {
    write_doc(o.doc, results, by_op, all, f32, o.device);
    std::cout << "wrote " << shown(o.doc) << "\n";
  }
  if (!o.floor_file.empty()) {
    std::istringstream f(io::read_regular_file(o.floor_file, "--floor: the file '" + shown(o.floor_file) + "'"));
    int64_t floor = -1;
    std::string rest;
    if (!(f >> floor) || floor < 0 || (f >> rest))
      throw Error("--floor: '" + shown(o.floor_file) + "' must hold one non-negative integer");
    if (all.pass < floor) {
      std::cout << "FAILED: " << all.pass << " cases pass, below the floor of " << floor << " in " << shown(o.floor_file)
                << "\n";
      return 1;
    }
    std::cout << "floor: " << all.pass << " cases pass, floor " << floor << " (" << shown(o.floor_file) << ")";
    if (all.pass > floor) std::cout << "; raise the floor to " << all.pass;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

Command add_conformance_command(CLI::App& parent) {
  auto o = std::make_shared<ConformanceOptions>();
  CLI::App* sub = parent.add_subcommand("conformance", "Run the ONNX backend node cases of a folder and report");
  sub->add_option("dir", o->dir, "Folder of test_* cases (e.g. ../shared/onnx-node)")->required();
  sub->add_option("--device", o->device, "Device to run on")
      ->check(CLI::IsMember({"cpu", "cuda", "vulkan", "webgpu"}))
      ->capture_default_str();
  sub->add_option("--filter,-k", o->filter, "Only cases whose name contains this text");
  sub->add_option("--jobs,-j", o->jobs, "Cases run at once (0 = one per core)")->check(CLI::Range(0, 1024));
  sub->add_option("--timeout", o->timeout_s, "Seconds one case may take before it is killed (a FAIL)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  sub->add_option("--doc", o->doc, "Write the Markdown report here (docs/onnx-conformance.md)");
  sub->add_option("--floor", o->floor_file, "File with the minimum number of passing cases; fewer fail the run");
  sub->add_flag("--skip-missing", o->skip_missing, "Exit 77 (a ctest skip) when the folder does not exist or the device cannot run here");
  sub->add_flag("--plan-only", o->plan_only,
                "Only import, optimize and legalize each case for the device (no device needed, nothing runs): "
                "PASS means every node runs there, natively or decomposed");
  sub->add_flag("--quiet,-q", o->quiet, "Print only the totals");
  sub->add_option("--knob", o->knobs, kKnobHelp);
  return {sub, [o] { return run_conformance(*o); }};
}

}  // namespace rlx::cli
