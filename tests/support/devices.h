#pragma once
// The devices the shared parity cases (tests/parity) run on, each against the CPU oracle. A
// backend joins by adding one entry to the table in devices.cpp, or from its own test file:
//
//   TestDevice d;
//   d.name = "vulkan", d.device = Device::Vulkan, d.unavailable = vulkan_unavailable_reason;
//   d.dtypes = {DType::F32, DType::F16, DType::I32, DType::U8, DType::Bool};  // no f64 here
//   ... register_test_device(d) from a static initializer.
//
// A case whose graph needs a dtype or a precision policy the device lacks is skipped with the
// reason printed, never silently.
#include <functional>
#include <string>
#include <vector>

#include "support/parity.h"

namespace rlx::testing {

struct TestDevice {
  std::string name;  // "cuda"; test names carry it with '-' written '_'
  Device device = Device::Cpu;
  // "" when the device can run here, else why not (no toolkit in this build, no driver, ...).
  std::function<std::string()> unavailable;
  // The storage dtypes it runs (a graph with another dtype anywhere is skipped); empty = all.
  std::vector<DType> dtypes;
  // The precision policies it honours; a case asking for another one is skipped.
  std::vector<Precision> precisions = {Precision::Fp32};
  // Default tolerance per output dtype (a case's own override wins); empty = parity_tolerance.
  std::function<Tolerance(DType)> tolerance;
  // True when the device is a CPU emulating a GPU (lavapipe): timing prints are skipped there.
  std::function<bool()> cpu_adapter;
  // A graph with an op the device's backend neither runs nor can have decomposed is skipped
  // with the backend's reason (for a backend whose op coverage is still growing), not failed.
  bool skip_unclaimed = false;
  // Parts of error messages the device gives by design when a case's values exceed what it holds
  // (WebGPU: i64 held in 32-bit words): such a case is skipped with the message, not failed.
  std::vector<std::string> documented_limits;
  // Compile options of the device side (the case sets `precision`).
  CompileOptions options;
  // The case families it runs (empty: all); the others are skipped with the reason.
  std::vector<std::string> families;
  std::string families_reason;
};

// Every registered device, the built-in table first.
const std::vector<TestDevice>& test_devices();
// Adds a device (before the tests are listed, i.e. from a static initializer); returns true.
bool register_test_device(TestDevice d);

// Why `d` cannot run a graph with these dtypes at `precision` ("" when it can).
std::string unsupported_reason(const TestDevice& d, const std::vector<DType>& dtypes, Precision precision);

}  // namespace rlx::testing
