// Cached plans: one plan per read pattern (bucketed extents, offsets as run-time parameters),
// reused across decode steps and prefill chunks, prepared ahead of time or loaded from disk;
// reads with nothing to compute never plan.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/session.h"
#include "examples/tiny_transformer.h"
#include "tests/support/fresh.h"

using namespace tessera;
using namespace tessera::examples;
using namespace tessera::testing;

namespace {

// The cache configuration of LLM sessions: K and V pinned, everything else transient.
std::unique_ptr<GraphSession> llm_session(const Graph& g, const TinyModel& m) {
  auto s = std::make_unique<GraphSession>(g);
  for (NodeId id = 0; id < g.size(); ++id) s->set_keep(id, Keep::Never);
  for (const Tensor& t : m.keys) s->set_keep(t.id, Keep::Always);
  for (const Tensor& t : m.values) s->set_keep(t.id, Keep::Always);
  return s;
}

std::vector<int32_t> tokens_of(int64_t n, int32_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(vocab));
  return t;
}

ReadPattern decode_pattern(int64_t t, int64_t vocab) {
  return ReadPattern{{{"ids", Box{{t, t + 1}}}}, "logits", Box{{t, t + 1}, {0, vocab}}};
}

}  // namespace

TEST_CASE("planner: decode steps at t and t + 1 run the same cached plan, bitwise equal to fresh") {
  TinyConfig config;
  config.capacity = 64;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  auto s = llm_session(g, m);
  std::vector<int32_t> tokens = tokens_of(8, static_cast<int32_t>(config.vocab));
  s->write("ids", Box{{0, 8}}, tokens);
  s->read<float>("logits", Box{{7, 8}, {0, config.vocab}});
  CHECK_FALSE(s->stats().plan_cache_hit);
  const int64_t plans_after_prefill = s->stats().plans.size;
  for (int64_t t = 8; t < 24; ++t) {
    CAPTURE(t);
    tokens.push_back(static_cast<int32_t>(t % config.vocab));
    s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{tokens.back()});
    std::vector<float> row = s->read<float>("logits", Box{{t, t + 1}, {0, config.vocab}});
    CHECK(s->stats().plan_cache_hit == (t > 8));
    CHECK(row == fresh_logits(g, tokens, t, config.vocab));
  }
  // One plan for the prefill, one for every decode step.
  CHECK(s->stats().plans.size == plans_after_prefill + 1);
  CHECK(s->stats().plans.hits == 15);
  CHECK(s->stats().arena_bytes > 0);
}

TEST_CASE("planner: prefill chunks whose extents share a bucket share a plan") {
  TinyConfig config;
  config.capacity = 256;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  auto s = llm_session(g, m);
  std::vector<int32_t> tokens = tokens_of(220, static_cast<int32_t>(config.vocab));
  s->write("ids", Box{{0, 100}}, std::vector<int32_t>(tokens.begin(), tokens.begin() + 100));
  s->read<float>("logits", Box{{99, 100}, {0, config.vocab}});
  CHECK_FALSE(s->stats().plan_cache_hit);
  // 120 rows round up to the same bucket (128) as 100 rows; the offset is a run-time parameter.
  s->write("ids", Box{{100, 220}}, std::vector<int32_t>(tokens.begin() + 100, tokens.end()));
  std::vector<float> row = s->read<float>("logits", Box{{219, 220}, {0, config.vocab}});
  CHECK(s->stats().plan_cache_hit);
  CHECK(row == fresh_logits(g, tokens, 219, config.vocab));
}

TEST_CASE("planner: a read with nothing to compute does no planning") {
  TinyConfig config;
  config.capacity = 32;
  Graph g;
  build_tiny_transformer(g, config);
  GraphSession s(g);
  s.write("ids", Box{{0, 4}}, tokens_of(4, 64));
  std::vector<float> first = s.read<float>("logits", Box{{0, 4}, {0, config.vocab}});
  const int64_t compiled = s.stats().plans.compiled;
  const int64_t without_work = s.stats().reads_without_work;
  std::vector<float> again = s.read<float>("logits", Box{{1, 3}, {0, config.vocab}});
  CHECK(s.stats().elements_computed == 0);
  CHECK(s.stats().reads_without_work == without_work + 1);
  CHECK(s.stats().plans.compiled == compiled);
  CHECK(s.last_plan().empty());
  CHECK(std::equal(again.begin(), again.end(), first.begin() + config.vocab));
}

TEST_CASE("planner: compile_ahead prepares the decode plan before the first decode step") {
  TinyConfig config;
  config.capacity = 64;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  auto s = llm_session(g, m);
  const ReadPattern patterns[] = {decode_pattern(5, config.vocab)};
  CHECK(s->compile_ahead(patterns) == 1);
  CHECK(s->compile_ahead(patterns) == 0);  // already there
  std::vector<int32_t> tokens = tokens_of(10, 64);
  s->write("ids", Box{{0, 9}}, std::vector<int32_t>(tokens.begin(), tokens.begin() + 9));
  s->read<float>("logits", Box{{8, 9}, {0, config.vocab}});
  CHECK_FALSE(s->stats().plan_cache_hit);
  s->write("ids", Box{{9, 10}}, std::vector<int32_t>{tokens[9]});
  std::vector<float> row = s->read<float>("logits", Box{{9, 10}, {0, config.vocab}});
  CHECK(s->stats().plan_cache_hit);
  CHECK(row == fresh_logits(g, tokens, 9, config.vocab));
  CHECK_THROWS_AS(s->compile_ahead(std::vector<ReadPattern>{{{{"nope", Box{{0, 1}}}}, "logits", Box{{0, 1}, {0, 1}}}}),
                  Error);
}

TEST_CASE("planner: the plan cache survives a round trip to disk and rejects bad files") {
  TinyConfig config;
  config.capacity = 64;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  const std::string path = (std::filesystem::temp_directory_path() / "tessera_plan_cache_test.bin").string();
  {
    auto s = llm_session(g, m);
    const ReadPattern patterns[] = {decode_pattern(5, config.vocab)};
    s->compile_ahead(patterns);
    s->save_plans(path);
  }
  auto s = llm_session(g, m);
  CHECK(s->load_plans(path));
  CHECK(s->stats().plans.loaded == 1);
  std::vector<int32_t> tokens = tokens_of(6, 64);
  s->write("ids", Box{{0, 5}}, std::vector<int32_t>(tokens.begin(), tokens.begin() + 5));
  s->read<float>("logits", Box{{4, 5}, {0, config.vocab}});
  s->write("ids", Box{{5, 6}}, std::vector<int32_t>{tokens[5]});
  CHECK(s->read<float>("logits", Box{{5, 6}, {0, config.vocab}}) == fresh_logits(g, tokens, 5, config.vocab));
  CHECK(s->stats().plan_cache_hit);

  // Corrupt, truncated, missing, or made for another graph: ignored (with a warning), never used.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto write_file = [&](const std::string& content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
  };
  std::string corrupt = bytes;
  corrupt[corrupt.size() / 2] = static_cast<char>(corrupt[corrupt.size() / 2] ^ 0x40);
  write_file(corrupt);
  CHECK_FALSE(s->load_plans(path));
  write_file(bytes.substr(0, bytes.size() - 13));
  CHECK_FALSE(s->load_plans(path));
  write_file(bytes);
  TinyConfig other_config = config;
  other_config.seed = 8;
  Graph other;
  TinyModel om = build_tiny_transformer(other, other_config);
  auto t = llm_session(other, om);
  CHECK_FALSE(t->load_plans(path));
  CHECK(t->stats().plans.loaded == 0);
  std::filesystem::remove(path);
  CHECK_FALSE(s->load_plans(path));
  // Still usable.
  CHECK(s->read<float>("logits", Box{{5, 6}, {0, config.vocab}}) == fresh_logits(g, tokens, 5, config.vocab));
}

TEST_CASE("planner: a graph that grew after the session was created is an error, not a crash") {
  Graph g;
  Tensor a = g.input("a", {4}, DType::F32);
  g.output("b", exp(a));
  GraphSession s(g);
  s.read<float>("b", Box{{0, 4}});
  g.output("c", neg(a));
  CHECK_THROWS_AS(s.read<float>("b", Box{{0, 4}}), Error);
  CHECK_THROWS_AS(s.write("a", Box{{0, 1}}, std::vector<float>{1.f}), Error);
}
