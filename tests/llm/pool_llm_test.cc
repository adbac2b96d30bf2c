// Both real models and a conv net as three sessions on one memory pool with a budget: the pool's
// peak stays within the largest working set plus the budget, warm decode steps allocate nothing,
// and every result is bitwise what sessions with unlimited memory of their own give.
#include <doctest/doctest.h>

#include <string>

#include "loaders/llm.h"
#include "tests/llm/model_cases.h"
#include "tests/support/scoped_env.h"
#include "tests/support/conv_net.h"

using namespace tessera;
using namespace tessera::testing;

TEST_CASE("llm: both real models and a conv net share one pool and its budget, results exact") {
  if (!have(kSmol) || !have(kGemma)) return;
  // The f32 path: its weights are the pool's huge-page copies (the integer paths read the cpu
  // backend's packed copies instead, checked in the thread test below).
  const testing::ScopedEnv precise("TESSERA_LINEAR", "f32");
  auto smol = LlmModel::load(model_path(kSmol), 64);
  auto gemma = LlmModel::load(model_path(kGemma), 64);
  Graph net_graph;
  conv_net(net_graph, 32, 24);
  const int64_t budget = 2 << 20;  // less than the two K/V caches together
  auto pool = MemoryPool::create(MemoryPoolOptions{.budget_bytes = budget});
  SessionOptions shared;
  shared.pool = pool;
  auto s1 = smol->new_session(shared), s2 = gemma->new_session(shared);
  GraphSession net(net_graph, SessionOptions{.pool = pool, .hints = {{"image", InputHint::Kind::Edits}}});
  auto r1 = smol->new_session(), r2 = gemma->new_session();
  GraphSession net_alone(net_graph);
  CHECK(pool->stats().sessions == 3);

  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 260, 1029, 30};
  for (GraphSession* s : {s1.get(), s2.get(), r1.get(), r2.get()}) s->write("ids", Box{{0, 7}}, prompt);
  const Box all{{0, 1}, {0, 3}, {0, 32}, {0, 24}};
  std::vector<float> pixels(3 * 32 * 24);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 17) / 17.0f;
  for (GraphSession* s : {&net, &net_alone}) s->write("image", all, pixels);
  int64_t warm_allocations = -1;
  for (int64_t t = 7; t < 14; ++t) {
    CAPTURE(t);
    if (t == 10) warm_allocations = pool->stats().allocations;
    for (auto [s, r, vocab] : {std::tuple{s1.get(), r1.get(), smol->config().vocab},
                               std::tuple{s2.get(), r2.get(), gemma->config().vocab}}) {
      const Box row{{t - 1, t}, {0, vocab}};
      std::vector<float> got = s->read<float>("logits", row);
      REQUIRE(got == r->read<float>("logits", row));
      const int32_t next = argmax(got);
      s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
      r->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
    }
    const Box edit{{0, 1}, {0, 3}, {t, t + 2}, {t, t + 2}};
    for (GraphSession* s : {&net, &net_alone}) s->write("image", edit, std::vector<float>(12, 0.5f));
    REQUIRE(net.read<float>("out", all) == net_alone.read<float>("out", all));
  }
  const PoolStats st = pool->stats();
  const int64_t largest_arena =
      std::max({s1->stats().arena_bytes, s2->stats().arena_bytes, net.stats().arena_bytes});
  MESSAGE("pool: peak ", st.peak_bytes, " bytes, kept ", st.kept_bytes, ", arena ", st.transient_bytes, ", weights ",
          st.weight_bytes, ", evictions ", st.evictions);
  CHECK(st.kept_bytes <= budget);
  CHECK(st.peak_bytes <= largest_arena + budget);
  // Decode steps (and the conv net's edits, all of one size) allocated nothing once warm.
  CHECK(st.allocations == warm_allocations);
  // Weights exist once per pool: the huge-page copies of the two models, not one per session.
  CHECK(st.weight_bytes > 0);
}

TEST_CASE("llm: both real models decode bit for bit the same with 1, 2 and 3 threads") {
  // Every linear path (int8 and int24: packed weights), int8 also with an f16 K/V cache.
  for (const char* mode : {"f32", "int8", "int24", "int8+f16 kv"})
  for (const ModelCase& m : {kSmol, kGemma}) {
    if (!have(m)) continue;
    const bool f16_kv = std::string(mode).ends_with("f16 kv");
    const testing::ScopedEnv linear_mode("TESSERA_LINEAR", f16_kv ? "int8" : mode);
    CAPTURE(mode);
    CAPTURE(m.file);
    auto model = LlmModel::load(model_path(m), 48, LlmOptions{.kv_dtype = f16_kv ? DType::F16 : DType::F32});
    const int64_t vocab = model->config().vocab;
    std::vector<std::unique_ptr<GraphSession>> sessions;
    for (int threads : {1, 2, 3}) sessions.push_back(model->new_session(SessionOptions{.threads = threads}));
    std::vector<int32_t> ids = {1, 504, 3458, 282, 260, 1029, 30, 42, 7, 19};
    for (auto& s : sessions) s->write("ids", Box{{0, 10}}, ids);
    for (int64_t t = 10; t < 16; ++t) {
      CAPTURE(t);
      std::vector<float> first;
      for (size_t k = 0; k < sessions.size(); ++k) {
        std::vector<float> row = sessions[k]->read<float>("logits", Box{{t - 1, t}, {0, vocab}});
        if (k == 0) first = row;
        else REQUIRE(row == first);
      }
      const int32_t next = argmax(first);
      for (auto& s : sessions) s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{next});
    }
    // One packed copy of the weights for the three backends (one per thread count).
    if (std::string(mode) == "int8" || std::string(mode) == "int24") {
      CHECK(sessions[0]->backend().stats().prepared_bytes > 0);
      CHECK(sessions[1]->backend().stats().prepared_bytes == 0);
      CHECK(sessions[2]->backend().stats().prepared_bytes == 0);
    }
  }
}
