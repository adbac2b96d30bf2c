// GLSL compute shaders to SPIR-V through glslang's C interface (linked into the vulkan plugin
// only). Thread-safe; the glslang process state is set up on first use and kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::vulkan {

// The SPIR-V (1.0, for Vulkan 1.0) of a GLSL 450 compute shader, or InternalError with
// glslang's log.
absl::StatusOr<std::vector<uint32_t>> compile_glsl(const std::string& source);

}  // namespace tessera::vulkan
