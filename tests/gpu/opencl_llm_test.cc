// Both real LLMs on the OpenCL backend (the ops it lacks run on the CPU fallback, with explicit
// copies) give the same greedy continuation as the CPU backend: the first 32 tokens.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "backends/registry.h"
#include "loaders/llm.h"
#include "loaders/tokenizer.h"
#include "tests/llm/model_cases.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

std::vector<int32_t> greedy(const LlmModel& model, const std::string& backend, std::vector<int32_t> tokens, int count) {
  SessionOptions options;
  options.backend_name = backend;
  auto session = model.new_session(options);
  const int64_t vocab = model.config().vocab;
  session->write<int32_t>("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) {
    const int64_t row = static_cast<int64_t>(tokens.size()) - 1;
    const int32_t next = testing::argmax(session->read<float>("logits", Box{{row, row + 1}, {0, vocab}}));
    out.push_back(next);
    tokens.push_back(next);
    session->write<int32_t>("ids", Box{{row + 1, row + 2}}, std::vector<int32_t>{next});
  }
  return out;
}

void check_model(const ModelCase& m, const std::string& prompt) {
  if (!have(m)) return;
  setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  absl::StatusOr<std::unique_ptr<Backend>> probe = BackendRegistry().create("opencl");
  if (!probe.ok()) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL("no OpenCL backend under CI: ", probe.status().message());
    MESSAGE("SKIPPED: no OpenCL backend here: ", probe.status().message());
    return;
  }
  MESSAGE("OpenCL device: ", (*probe)->description());
  auto model = LlmModel::load(model_path(m), 128);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<int32_t> tokens = tokenizer.encode(prompt, true, false);
  const std::vector<int32_t> cpu = greedy(*model, "", tokens, 32);
  const std::vector<int32_t> gpu = greedy(*model, "opencl", tokens, 32);
  CHECK_MESSAGE(cpu == gpu, "cpu: ", tokenizer.decode(cpu), "\nopencl: ", tokenizer.decode(gpu));
}

}  // namespace

TEST_CASE("opencl: SmolLM2 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kSmol, "The capital of France is");
}

TEST_CASE("opencl: Gemma-3 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kGemma, "Once upon a time, in a small village by the sea,");
}
