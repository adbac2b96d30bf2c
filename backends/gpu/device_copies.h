// What the GPU plugins share outside kernel generation: where compiled kernels are cached on
// disk, and box copies between dense host memory and a buffer region as contiguous byte runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "backends/backend.h"

namespace tessera::gpu {

// <TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else ~/.cache/tessera>/<backend>.
std::filesystem::path kernel_cache_dir(std::string_view backend);

// Checks `box` against `region` (inside its extent; the region inside a buffer of
// `buffer_bytes`) and calls copy(buffer_offset, host_offset, bytes) for each contiguous run of
// the box, in row-major order: the innermost axes the box covers whole merge into one run.
// Returns the first error (InvalidArgument naming `backend` for a bad box or region).
absl::Status for_each_box_run(std::string_view backend, const BufferRegion& region, const Box& box, int64_t buffer_bytes,
                              absl::FunctionRef<absl::Status(int64_t buffer_offset, int64_t host_offset, int64_t bytes)> copy);

}  // namespace tessera::gpu
