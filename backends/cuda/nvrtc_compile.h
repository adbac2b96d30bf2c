// CUDA C -> PTX with NVRTC (no driver, no GPU needed): what the CUDA plugin compiles its
// generated kernels with, and what the tests use to check code generation everywhere.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tessera::cuda {

// PTX for `source` (CUDA C, kernels extern "C"), for virtual architecture `arch` (e.g.
// "compute_75": the driver compiles PTX for the real GPU at load). Contraction off (--fmad=false).
// InternalError with NVRTC's log when compilation fails.
absl::StatusOr<std::string> compile_to_ptx(const std::string& source, const std::string& name,
                                           const std::string& arch = "compute_75");
// NVRTC's version, "major.minor".
std::string nvrtc_version();

}  // namespace tessera::cuda
