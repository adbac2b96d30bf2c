// Real models against reference outputs of Hugging Face transformers (tests/llm/golden, made by
// scripts/reference_logits.py), plus the incremental behaviour of decode and prompt edits.
// The models are fetched by scripts/fetch_models.sh; without them these tests say so and pass
// (and fail under CI: tests/llm/model_cases.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/op_def.h"
#include "loaders/llm.h"
#include "tests/llm/model_cases.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
using namespace tessera::testing;
using json = nlohmann::json;

namespace {

json golden(const ModelCase& m) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/tests/llm/golden/" + m.golden);
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<float> logits_row(GraphSession& s, int64_t row, int64_t vocab) {
  return s.read<float>("logits", Box{{row, row + 1}, {0, vocab}});
}

// Tolerance on logits. With f32 activations (TESSERA_LINEAR=f32) our weights are dequantised to
// the same f32 values as transformers'; what differs is only floating-point evaluation order
// (f32 accumulation in blocked dot products here, BLAS there) through 18-30 residual layers,
// which moves logits of magnitude ~10-30 by a few 1e-3 in practice. 0.02 absolute + 0.2%
// relative leaves margin while still catching any real modelling error (a wrong norm, RoPE pair
// or scale moves logits by > 0.5).
// The opt-in int8 path (TESSERA_LINEAR=int8) rounds every linear's activations to int8 blocks
// (kernels/cpu/linear_q8.h), as llama.cpp does; through 18-30 layers that moves top logits by
// up to ~1.1 (measured: 0.71 SmolLM2, 1.14 Gemma-3; before the panel kernels the AVX-512 path
// measured 0.62 on Gemma-3 and the portable path 1.14, the value every path now gives), so it
// gets a looser bound (kInt8Logits: 1.5 absolute + 3% relative). Top-2 gaps of the goldens
// go down to 0.04, so a free-running greedy continuation may leave the reference's at a near
// tie and never come back; the int8 path is instead checked teacher-forced: fed the reference
// continuation, its argmax must be the reference's next token at >= 33 of 40 positions
// (measured: 35-40), and its top token must be among the reference's top 3 at every recorded
// position. (The integer path gives the same bits on every instruction set.)
struct LogitTolerance {
  double absolute, relative;
  int min_matched;      // of 40 continuation tokens
  bool teacher_forced;  // false: free-running greedy, the reference's top token required
};
constexpr LogitTolerance kPreciseLogits{0.02, 0.002, 32, false};
constexpr LogitTolerance kInt8Logits{1.5, 0.03, 33, true};
// An f16 K/V cache (LlmOptions::kv_dtype) rounds keys and values to 11 significant bits, as
// llama.cpp's default cache does; with f32 activations that moves top logits by little more
// than evaluation order does (measured: 0.0083 SmolLM2, 0.0068 Gemma-3), but any rounding can
// flip a near tie, so it is checked teacher-forced (measured 40 of 40 everywhere) with 0.05 +
// 0.5%. With int8 activations as well, the int8 bound applies (measured 0.68 and 0.86).
constexpr LogitTolerance kF16KvLogits{0.05, 0.005, 35, true};

void check_against_golden(const ModelCase& m, const LogitTolerance& tol, LlmOptions options = {}) {
  double worst = 0;
  json ref = golden(m);
  int64_t longest = 0;
  for (const json& p : ref["prompts"]) longest = std::max<int64_t>(longest, static_cast<int64_t>(p["ids"].size()));
  auto model = LlmModel::load(model_path(m), longest + 48, options);
  const int64_t vocab = model->config().vocab;
  for (const json& p : ref["prompts"]) {
    CAPTURE(p["name"].get<std::string>());
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    auto s = model->new_session();
    s->write("ids", Box{{0, static_cast<int64_t>(ids.size())}}, ids);
    // Top-10 logits at the recorded positions.
    for (const json& at : p["top10"]) {
      const int64_t pos = at["pos"].get<int64_t>();
      CAPTURE(pos);
      std::vector<float> row = logits_row(*s, pos, vocab);
      const int32_t top = argmax(row);
      if (tol.teacher_forced)
        CHECK((top == at["top"][0][0].get<int32_t>() || top == at["top"][1][0].get<int32_t>() ||
               top == at["top"][2][0].get<int32_t>()));
      else
        CHECK(top == at["top"][0][0].get<int32_t>());
      for (const json& pair : at["top"]) {
        const double got = row[pair[0].get<size_t>()], want = pair[1].get<double>();
        worst = std::max(worst, std::abs(got - want));
        CHECK(std::abs(got - want) <= tol.absolute + tol.relative * std::abs(want));
      }
    }
    const std::vector<int32_t> want = p["greedy"]["token_ids"].get<std::vector<int32_t>>();
    int64_t t = static_cast<int64_t>(ids.size());
    if (tol.teacher_forced) {
      const int64_t n = std::min<int64_t>(40, static_cast<int64_t>(want.size()));
      s->write("ids", Box{{t, t + n - 1}}, std::vector<int32_t>(want.begin(), want.begin() + n - 1));
      const std::vector<float> rows = s->read<float>("logits", Box{{t - 1, t + n - 1}, {0, vocab}});
      int matched = 0;
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> one(rows.begin() + i * vocab, rows.begin() + (i + 1) * vocab);
        matched += argmax(one) == want[static_cast<size_t>(i)];
      }
      CHECK(matched >= tol.min_matched);
      MESSAGE(std::string(m.golden), " ", p["name"].get<std::string>(), ": ", matched, " of ", n, " teacher-forced tokens agree");
      continue;
    }
    // Greedy continuation: at least 32 tokens must match.
    std::vector<float> row = logits_row(*s, t - 1, vocab);
    int matched = 0;
    for (size_t i = 0; i < want.size() && i < 40; ++i, ++t) {
      const int32_t next = argmax(row);
      if (next != want[i]) break;
      ++matched;
      s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
      row = logits_row(*s, t, vocab);
    }
    CHECK(matched >= tol.min_matched);
  }
  MESSAGE(std::string(m.golden), ": largest top-10 logit difference ", worst);
}

int64_t row_elements(const Node& n) { return n.shape.empty() ? 1 : n.volume() / n.shape[0]; }

}  // namespace

TEST_CASE("llm: SmolLM2 logits and greedy continuation match transformers (f32 activations)") {
  const ScopedEnv precise("TESSERA_LINEAR", "f32");
  if (have(kSmol)) check_against_golden(kSmol, kPreciseLogits);
}

TEST_CASE("llm: Gemma-3 logits and greedy continuation match transformers (f32 activations)") {
  const ScopedEnv precise("TESSERA_LINEAR", "f32");
  if (have(kGemma)) check_against_golden(kGemma, kPreciseLogits);
}

// 24-bit activations (TESSERA_LINEAR=int24: three int8 digits per activation through the integer
// kernels, the default) keep each activation to 2^-23 of its block's largest magnitude: the f32
// path's bound, free-running greedy included (measured: top-10 logits within 6.0e-5 SmolLM2,
// 2.6e-5 Gemma-3, as the f32 path's 6.4e-5 and 2.4e-5).
TEST_CASE("llm: SmolLM2 with 24-bit activations matches transformers within the f32 bound") {
  const ScopedEnv int24("TESSERA_LINEAR", "int24");
  if (have(kSmol)) check_against_golden(kSmol, kPreciseLogits);
}

TEST_CASE("llm: Gemma-3 with 24-bit activations matches transformers within the f32 bound") {
  const ScopedEnv int24("TESSERA_LINEAR", "int24");
  if (have(kGemma)) check_against_golden(kGemma, kPreciseLogits);
}

TEST_CASE("llm: SmolLM2 with int8 activations stays within the int8 bound of transformers") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  if (have(kSmol)) check_against_golden(kSmol, kInt8Logits);
}

TEST_CASE("llm: Gemma-3 with int8 activations stays within the int8 bound of transformers") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  if (have(kGemma)) check_against_golden(kGemma, kInt8Logits);
}

TEST_CASE("llm: SmolLM2 with int8 activations and an f16 K/V cache stays within the int8 bound") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  if (have(kSmol)) check_against_golden(kSmol, kInt8Logits, LlmOptions{.kv_dtype = DType::F16});
}

TEST_CASE("llm: Gemma-3 with int8 activations and an f16 K/V cache stays within the int8 bound") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  if (have(kGemma)) check_against_golden(kGemma, kInt8Logits, LlmOptions{.kv_dtype = DType::F16});
}

TEST_CASE("llm: f16 K/V cache with f32 activations stays close to transformers") {
  const ScopedEnv precise("TESSERA_LINEAR", "f32");
  for (const ModelCase& m : {kSmol, kGemma})
    if (have(m)) check_against_golden(m, kF16KvLogits, LlmOptions{.kv_dtype = DType::F16});
}

// A q8_0 K/V cache (LlmOptions::kv_dtype) quantises keys and values to 8 bits per element and
// each query row the same way for the scores: teacher-forced, with a bound between the f16
// cache's and the int8 activations' (measured with f32 activations: largest top-10 logit
// difference 0.36 SmolLM2, 0.27 Gemma-3, 38-40 of 40 tokens; with int8 activations 0.61).
constexpr LogitTolerance kQ8KvLogits{0.5, 0.02, 35, true};

TEST_CASE("llm: q8_0 K/V cache with f32 activations stays close to transformers") {
  const ScopedEnv precise("TESSERA_LINEAR", "f32");
  for (const ModelCase& m : {kSmol, kGemma})
    if (have(m)) check_against_golden(m, kQ8KvLogits, LlmOptions{.kv_dtype = DType::Q8_0});
}

TEST_CASE("llm: SmolLM2 with int8 activations and a q8_0 K/V cache stays within the int8 bound") {
  const ScopedEnv int8("TESSERA_LINEAR", "int8");
  if (have(kSmol)) check_against_golden(kSmol, kInt8Logits, LlmOptions{.kv_dtype = DType::Q8_0});
}

TEST_CASE("llm: a K/V cache dtype other than f32, f16 or q8_0 raises Error") {
  if (!have(kSmol)) return;
  CHECK_THROWS_AS(LlmModel::load(model_path(kSmol), 16, LlmOptions{.kv_dtype = DType::BF16}), Error);
  CHECK_THROWS_AS(LlmModel::load(model_path(kSmol), 16, LlmOptions{.kv_dtype = DType::I32}), Error);
}

TEST_CASE("llm: decode computes one row of every non-attention node, bitwise equal to a fresh prefix") {
  // Every linear path: f32 activations, and int8 and int24 with the weights the cpu backend
  // packs once; the int8 path also with an f16 K/V cache.
  struct Config {
    const char* linear;
    DType kv;
  };
  for (const Config& config :
       {Config{"f32", DType::F32}, Config{"int8", DType::F32}, Config{"int24", DType::F32}, Config{"int8", DType::F16},
        Config{"int8", DType::Q8_0}})
  for (const ModelCase& m : {kSmol, kGemma}) {
    if (!have(m)) continue;
    const ScopedEnv linear_mode("TESSERA_LINEAR", config.linear);
    CAPTURE(config.linear);
    CAPTURE(dtype_name(config.kv));
    CAPTURE(m.file);
    auto model = LlmModel::load(model_path(m), 64, LlmOptions{.kv_dtype = config.kv});
    for (const Tensor& k : model->keys()) CHECK(k.dtype() == config.kv);
    const Graph& g = model->graph();
    const int64_t vocab = model->config().vocab;
    std::vector<int32_t> ids = golden(m)["prompts"][0]["ids"].get<std::vector<int32_t>>();
    ids.resize(std::min<size_t>(ids.size(), 12));
    auto s = model->new_session();
    s->write("ids", Box{{0, static_cast<int64_t>(ids.size())}}, ids);
    std::vector<float> row = logits_row(*s, static_cast<int64_t>(ids.size()) - 1, vocab);
    for (int step = 0; step < 3; ++step) {
      const int64_t t = static_cast<int64_t>(ids.size());
      ids.push_back(argmax(row));
      s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{ids.back()});
      row = logits_row(*s, t, vocab);
      // Decode steps share one plan: the first step compiles it, later ones hit the cache.
      CHECK(s->stats().plan_cache_hit == (step > 0));
      for (NodeId id = 0; id < g.size(); ++id) {
        const Node& n = g.node(id);
        CAPTURE(op_display_name(n));
        CHECK(s->stats().elements_per_node[static_cast<size_t>(id)] <= row_elements(n));
      }
      auto fresh = model->new_session();
      fresh->write("ids", Box{{0, t + 1}}, ids);
      std::vector<float> want = logits_row(*fresh, t, vocab);
      REQUIRE(std::memcmp(want.data(), row.data(), row.size() * sizeof(float)) == 0);
    }
    CHECK(s->stats().plans.size == 2);  // the prompt's plan and the decode plan
  }
}

TEST_CASE("llm: editing the last 10% of a 500-token prompt recomputes about 10% of the rows") {
  if (!have(kSmol)) return;
  auto model = LlmModel::load(model_path(kSmol), 512);
  const Graph& g = model->graph();
  const int64_t vocab = model->config().vocab;
  std::vector<int32_t> ids;
  json ref = golden(kSmol);
  while (ids.size() < 500)
    for (const json& p : ref["prompts"])
      for (int32_t id : p["ids"].get<std::vector<int32_t>>()) ids.push_back(id);
  ids.resize(500);
  auto s = model->new_session();
  s->write("ids", Box{{0, 500}}, ids);
  logits_row(*s, 499, vocab);
  int64_t full = 0;
  for (int64_t e : s->stats().elements_per_node) full += e;
  for (size_t i = 450; i < 500; ++i) ids[i] = ids[i - 450];  // edit the last 50 tokens
  s->write("ids", Box{{450, 500}}, std::vector<int32_t>(ids.begin() + 450, ids.end()));
  std::vector<float> row = logits_row(*s, 499, vocab);
  int64_t edit = 0;
  for (NodeId id = 0; id < g.size(); ++id) {
    const int64_t e = s->stats().elements_per_node[static_cast<size_t>(id)];
    edit += e;
    CHECK(e <= 50 * row_elements(g.node(id)));  // no node recomputes rows before the edit
  }
  MESSAGE("edit recomputed ", edit, " elements vs ", full, " for the whole prompt");
  CHECK(static_cast<double>(edit) < 0.12 * static_cast<double>(full));
  auto fresh = model->new_session();
  fresh->write("ids", Box{{0, 500}}, ids);
  std::vector<float> want = logits_row(*fresh, 499, vocab);
  REQUIRE(std::memcmp(want.data(), row.data(), row.size() * sizeof(float)) == 0);
}

TEST_CASE("llm: bad model files raise Error") {
  const std::string dir = std::filesystem::temp_directory_path() / "tessera_llm_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/not_a_model.gguf";
  std::ofstream(path) << "GGUF but not really";
  CHECK_THROWS_WITH_AS(LlmModel::load(path, 16), doctest::Contains("[gguf]"), Error);
  CHECK_THROWS_WITH_AS(LlmModel::load(dir + "/missing.gguf", 16), doctest::Contains("[gguf]"), Error);
  if (have(kSmol)) CHECK_THROWS_WITH_AS(LlmModel::load(model_path(kSmol), 0), doctest::Contains("[llm]"), Error);
}
