// The C++ side of bench/python_overhead.py: the time of one CompiledGraph::run of a tiny graph
// (y = relu(x + 1), x f32[1,8], CPU, one thread), called from C++ with a prepared input list.
// The Python script runs the same graph through the rlx module and reports the difference.
//   python_overhead [CALLS_PER_ROUND] [ROUNDS]   -> a table, then "cpp_run_us <median>"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rlx/rlx.h"

int main(int argc, char** argv) {
  using namespace rlx;
  const int calls = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20000;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
  Graph g;
  const Value x = g.input("x", Shape::of({1, 8}));
  g.add_output(g.relu(g.add(x, g.scalar(1.0))), "y");
  CompileOptions options;
  options.num_threads = 1;
  CompiledGraph model = Session(Device::Cpu).compile(g, options);
  std::vector<float> xv(8, 0.5f);
  const NamedTensors inputs{{"x", Tensor::borrow(DType::F32, {1, 8}, xv.data())}};
  float sink = 0;
  for (int i = 0; i < 1000; ++i) sink += model.run(inputs)[0].data<float>()[0];  // warm-up
  std::vector<double> per_call_us;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) sink += model.run(inputs)[0].data<float>()[0];
    const auto t1 = std::chrono::steady_clock::now();
    per_call_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(per_call_us.begin(), per_call_us.end());
  const double median = per_call_us[per_call_us.size() / 2];
  std::printf("%-34s %10s %10s\n", "C++ CompiledGraph::run", "median us", "min us");
  std::printf("%-34s %10.3f %10.3f\n", "relu(x + 1), f32[1,8], 1 thread", median, per_call_us.front());
  std::printf("cpp_run_us %.4f\n", median);
  return sink > 0 ? 0 : 1;  // relu(0.5 + 1) = 1.5 each run: a zero sum means wrong results
}
