// What a GPU test does when its backend cannot open here: the CI machines carry PoCL (opencl) and
// Mesa lavapipe (vulkan), so under CI=true those missing is a failure; no CI machine has a CUDA
// GPU, so "cuda" missing is a visible skip everywhere.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include "absl/strings/string_view.h"

namespace tessera::gpu_testing {

inline void no_device(const std::string& backend, absl::string_view why) {
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true" && backend != "cuda") FAIL("no ", backend, " backend under CI: ", why);
  MESSAGE("SKIPPED: no ", backend, " backend here: ", why);
}

}  // namespace tessera::gpu_testing
