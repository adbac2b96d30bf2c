// The real models of the LLM tests (fetched by scripts/fetch_models.sh into models/). Without a
// model a test says so and passes, except under CI (CI=true), where a missing model fails.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::testing {

struct ModelCase {
  const char* file;
  const char* golden;
};
inline constexpr ModelCase kSmol{"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct-q4_1_reference.json"};
inline constexpr ModelCase kGemma{"gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m_reference.json"};

inline std::string model_path(const ModelCase& m) { return std::string(TESSERA_SOURCE_DIR) + "/models/" + m.file; }

inline bool have(const ModelCase& m) {
  if (std::filesystem::exists(model_path(m))) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::strcmp(ci, "true") == 0) {
    FAIL_CHECK("model missing under CI: ", model_path(m), " (scripts/fetch_models.sh should have fetched it)");
    return false;
  }
  MESSAGE("skipping: ", model_path(m), " missing (run scripts/fetch_models.sh)");
  return false;
}

// The greedy pick: the first index of the largest logit.
inline int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace tessera::testing
