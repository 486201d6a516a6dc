// Kernel timeline without Nsight Systems: a CUPTI injection library (loaded by the CUDA driver
// through CUDA_INJECTION64_PATH) that records the start and end of every kernel, graph nodes
// included, and writes one line per kernel to $TRACE_OUT (default /tmp/trace.csv):
//   start_ns,end_ns,name,grid_x,block_x,registers,correlation_id
// KREC names the newest CUpti_ActivityKernelN record of the installed CUPTI (scripts/cuda-trace.sh
// finds it). Concurrent-kernel records do not serialize kernels, so programmatic dependent
// launches still overlap; each record adds about a microsecond, so compare traced runs with
// traced runs.
#include <cupti.h>
#include <cstdio>
#include <cstdlib>
static FILE* out;
static void CUPTIAPI req(uint8_t** buf, size_t* size, size_t* maxrec) {
  *size = 16 << 20;
  *buf = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *maxrec = 0;
}
static void CUPTIAPI done(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const KREC* k = reinterpret_cast<const KREC*>(r);
      std::fprintf(out, "%llu,%llu,%s,%u,%u,%d,%u\n", (unsigned long long)k->start, (unsigned long long)k->end,
                   k->name, k->gridX, k->blockX, (int)k->registersPerThread, k->correlationId);
    }
  }
  std::free(buf);
}
static void fin() {
  cuptiActivityFlushAll(1);
  if (out) std::fclose(out);
  out = nullptr;
}
extern "C" int InitializeInjection(void) {
  const char* p = std::getenv("TRACE_OUT");
  out = std::fopen(p ? p : "/tmp/trace.csv", "w");
  cuptiActivityRegisterCallbacks(req, done);
  CUptiResult e = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::fprintf(stderr, "trace: enable rc=%d\n", (int)e);
  std::atexit(fin);
  return 1;
}
