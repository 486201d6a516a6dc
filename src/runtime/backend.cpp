#include "runtime/backend.h"

#include "io/web_bundle.h"

namespace rlx {

std::unique_ptr<web::WebProgram> Variant::web_program() const {
  throw Error("export_web: only graphs compiled for WebGPU record a web program; compile with Device::WebGpu");
}

std::unique_ptr<Backend> make_backend(Device d, const CompileOptions& options) {
  switch (d) {
    case Device::Cpu: return make_cpu_backend(options);
    case Device::Cuda:
#ifdef RLX_HAVE_CUDA
      return make_cuda_backend(options);
#else
      throw Error("device 'cuda' is not available in this build (configure with the CUDA toolkit installed, "
                  "-DRLX_CUDA=ON); compile for Device::Cpu");
#endif
    case Device::Vulkan:
#ifdef RLX_HAVE_VULKAN
      return make_vulkan_backend(options);
#else
      break;
#endif
    case Device::WebGpu:
#ifdef RLX_HAVE_WEBGPU
      return make_webgpu_backend(options);
#else
      break;
#endif
  }
  throw Error(std::string("device '") + device_name(d) +
              "' is not available in this build (backends built: cpu" +
#ifdef RLX_HAVE_CUDA
              ", cuda" +
#endif
#ifdef RLX_HAVE_VULKAN
              ", vulkan" +
#endif
#ifdef RLX_HAVE_WEBGPU
              ", webgpu" +
#endif
              std::string("); compile for Device::Cpu"));
}

std::unique_ptr<Backend> make_backend_for_check(Device d) {
#ifdef RLX_HAVE_CUDA
  if (d == Device::Cuda) return make_cuda_backend_for_check();
#endif
#ifdef RLX_HAVE_VULKAN
  if (d == Device::Vulkan) return make_vulkan_backend_for_check();
#endif
#ifdef RLX_HAVE_WEBGPU
  if (d == Device::WebGpu) return make_webgpu_backend_for_check();
#endif
  return make_backend(d, CompileOptions{});
}

}  // namespace rlx
