// Both real LLMs on the OpenCL, Vulkan and CUDA backends (the ops they lack run on the CPU fallback,
// with explicit copies; linear never does) give the same greedy continuation as the CPU
// backend: 32 tokens. The real conv nets run wholly on the device and match the CPU backend
// within tolerance.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_join.h"
#include "backends/registry.h"
#include <cmath>

#include "loaders/llm.h"
#include "loaders/rdn.h"
#include "loaders/taesd.h"
#include "loaders/tokenizer.h"
#include "tests/gpu/no_device.h"
#include "tests/llm/model_cases.h"
#include "tests/models/model_files.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

std::vector<int32_t> greedy(const LlmModel& model, const std::string& backend, std::vector<int32_t> tokens, int count) {
  SessionOptions options;
  options.backend_name = backend;
  options.profile = !backend.empty();  // a step per backend call on the device; the same tokens
  auto session = model.new_session(options);
  const int64_t vocab = model.config().vocab;
  session->write<int32_t>("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) {
    const int64_t row = static_cast<int64_t>(tokens.size()) - 1;
    const int32_t next = testing::argmax(session->read<float>("logits", Box{{row, row + 1}, {0, vocab}}));
    if (i == 0 && !backend.empty()) {
      // Every linear runs on the device (quantised weights decoded there): the steps left on the
      // fallback are the other ops the device lacks, listed for the log.
      const std::vector<std::string> fallback = session->fallback_ops();
      MESSAGE(backend, " fallback ops: ", absl::StrJoin(fallback, ", "), "; fallback steps of the prompt read: ",
              session->stats().fallback_steps, " of ", session->stats().steps);
      for (const std::string& op : fallback) CHECK_MESSAGE(op.rfind("linear ", 0) != 0, op, " ran on the fallback");
    }
    out.push_back(next);
    tokens.push_back(next);
    session->write<int32_t>("ids", Box{{row + 1, row + 2}}, std::vector<int32_t>{next});
  }
  if (!backend.empty()) {  // every linear ran on the device, each step timed
    int64_t linears = 0;
    for (const auto& [name, op] : session->stats().profile)
      if (name.rfind("linear ", 0) == 0) linears += op.steps;
    CHECK(linears >= count * model.config().layers);
  }
  return out;
}

void check_model(const ModelCase& m, const std::string& prompt, const std::string& backend) {
  if (!have(m)) return;
  setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  absl::StatusOr<std::unique_ptr<Backend>> probe = BackendRegistry().create(backend);
  if (!probe.ok()) {
    gpu_testing::no_device(backend, probe.status().message());
    return;
  }
  MESSAGE("device: ", (*probe)->description());
  auto model = LlmModel::load(model_path(m), 128);
  const Tokenizer tokenizer = Tokenizer::from_gguf(model->file());
  const std::vector<int32_t> tokens = tokenizer.encode(prompt, true, false);
  const std::vector<int32_t> cpu = greedy(*model, "", tokens, 32);
  const std::vector<int32_t> gpu = greedy(*model, backend, tokens, 32);
  CHECK_MESSAGE(cpu == gpu, "cpu: ", tokenizer.decode(cpu), "\n", backend, ": ", tokenizer.decode(gpu));
}

}  // namespace

TEST_CASE("opencl: SmolLM2 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kSmol, "The capital of France is", "opencl");
}

TEST_CASE("opencl: Gemma-3 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kGemma, "Once upon a time, in a small village by the sea,", "opencl");
}

TEST_CASE("vulkan: SmolLM2 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kSmol, "The capital of France is", "vulkan");
}

TEST_CASE("vulkan: Gemma-3 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kGemma, "Once upon a time, in a small village by the sea,", "vulkan");
}

TEST_CASE("cuda: SmolLM2 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kSmol, "The capital of France is", "cuda");
}

TEST_CASE("cuda: Gemma-3 greedy continuation equals the CPU backend's (32 tokens)") {
  check_model(kGemma, "Once upon a time, in a small village by the sea,", "cuda");
}

namespace {

// The real conv nets (RDN x2 upscaler, taesana and taef2 encoders) on a GPU backend match the CPU backend.
void check_conv_nets(const std::string& backend) {
  if (!have_conv_model("upscaler/rdn_x2.safetensors") || !have_conv_model("taesd/taesana_encoder.safetensors") ||
      !have_conv_model("taesd/taef2_encoder.safetensors"))
    return;
  setenv("TESSERA_BACKEND_PATH", TESSERA_PLUGIN_DIR, 1);
  if (absl::StatusOr<std::unique_ptr<Backend>> probe = BackendRegistry().create(backend); !probe.ok()) {
    gpu_testing::no_device(backend, probe.status().message());
    return;
  }
  const Shape image{1, 3, 24, 32};
  std::vector<float> pixels(static_cast<size_t>(Box::full(image).volume()));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 37) % 256);
  std::vector<std::unique_ptr<Graph>> nets;
  nets.push_back(rdn_x2(conv_model_path("upscaler/rdn_x2.safetensors"), image));
  nets.push_back(taesana_encoder(conv_model_path("taesd/taesana_encoder.safetensors"), image));
  nets.push_back(taef2_encoder(conv_model_path("taesd/taef2_encoder.safetensors"), image));  // with group_norm
  for (const auto& net : nets) {
    const auto& [name, out] = net->outputs().front();
    const Shape& shape = net->node(out).shape;
    SessionOptions gpu_options;
    gpu_options.backend_name = backend;
    GraphSession cpu(*net), gpu(*net, gpu_options);
    for (GraphSession* s : {&cpu, &gpu}) s->write<float>("image", Box::full(image), pixels);
    const std::vector<float> want = cpu.read<float>(name, Box::full(shape)), got = gpu.read<float>(name, Box::full(shape));
    // conv2d, group_norm, concat and upsample have device kernels now: nothing falls back.
    MESSAGE(name, " on ", backend, ": ", gpu.stats().steps, " steps, ", gpu.stats().fallback_steps, " on the fallback, ",
            gpu.stats().copies, " copies");
    CHECK(gpu.stats().fallback_steps == 0);
    double scale = 0;
    for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < want.size(); ++i)
      REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= 1e-5 * (scale + 1), name, " element ", i, ": ", got[i], " vs ", want[i]);
  }
}

}  // namespace

TEST_CASE("opencl: the real conv nets match the CPU backend") { check_conv_nets("opencl"); }
TEST_CASE("vulkan: the real conv nets match the CPU backend") { check_conv_nets("vulkan"); }
TEST_CASE("cuda: the real conv nets match the CPU backend") { check_conv_nets("cuda"); }
