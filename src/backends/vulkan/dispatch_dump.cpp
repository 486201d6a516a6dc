#include "backends/vulkan/dispatch_dump.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlx/error.h"

namespace rlx::vulkan {

void dump_dispatch(const std::string& dir, const Kernel& k, const std::vector<Operand>& bindings,
                   const std::vector<uint32_t>& push, const uint32_t groups[3]) {
  static std::atomic<uint32_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("RLX_VULKAN_DUMP: cannot create the folder '" + dir + "': " + ec.message());
  char stem[32];
  std::snprintf(stem, sizeof stem, "%04u_", counter++);
  const std::filesystem::path base = std::filesystem::path(dir) / (stem + k.name);
  nlohmann::json j;
  j["kernel"] = k.name;
  j["bindings"] = nlohmann::json::array();
  for (const Operand& o : bindings)
    j["bindings"].push_back({{"range", o.range}, {"skip", o.skip}, {"bytes", o.bytes}, {"write", o.write}});
  j["push"] = push;
  j["groups"] = {groups[0], groups[1], groups[2]};
  std::ofstream src(base.string() + ".comp"), meta(base.string() + ".json");
  src << k.source;
  meta << j.dump(1) << "\n";
  if (!src || !meta) throw Error("RLX_VULKAN_DUMP: cannot write '" + base.string() + ".comp/.json' (disk full or no permission?)");
}

}  // namespace rlx::vulkan
