#include "planner/passes.h"

#include <cstdlib>
#include <string>

namespace tessera {

std::span<const PassInfo> planner_passes() {
  static constexpr PassInfo kPasses[] = {
      {"verify", PassStage::Session, "topological order, inputs in range, shapes and dtypes re-inferred"},
      {"fuse_patterns", PassStage::Session, "user-written composites (their decompositions) -> composite ops"},
      {"fold", PassStage::Session, "constant-only subgraphs computed once, at session creation"},
      {"cse", PassStage::Session, "the graph rebuilt hash-consed: equal folded values, then equal nodes, merge"},
      {"fuse_elementwise", PassStage::Session, "chains of elementwise ops -> one fused_elementwise step"},
      {"conv_tiles", PassStage::Session, "convs every input edit dirties whole -> 4x4 Winograd tiles (wider rules, same dirt)"},
      {"region_analysis", PassStage::Read, "need \\ valid per node for the read: the steps"},
      {"plan_lookup", PassStage::Read, "steps' pattern (nodes, box counts, bucketed extents) -> cached plan"},
      {"kernel_choice", PassStage::Compile, "one kernel per step for the backend, chosen once per plan"},
      {"memory_plan", PassStage::Compile, "transient buffers: liveness, in-place reuse, arena offsets"},
  };
  return kPasses;
}

bool dump_enabled(std::string_view what) {
  static const std::string dump = [] {
    const char* value = std::getenv("TESSERA_DUMP");
    return std::string(value == nullptr ? "" : value);
  }();
  size_t pos = 0;
  while (pos <= dump.size()) {
    size_t end = dump.find(',', pos);
    if (end == std::string::npos) end = dump.size();
    if (std::string_view(dump).substr(pos, end - pos) == what) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace tessera
