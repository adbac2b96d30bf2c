// MemoryPool: sessions over different graphs share one budget and one transient arena, hints
// drive the keep policy, warm decode steps allocate nothing, and every result stays bitwise equal
// to a fresh computation whatever the budget.
#include <doctest/doctest.h>

#include <thread>

#include "engine/session.h"
#include "examples/tiny_transformer.h"
#include "tests/support/fresh.h"
#include "tests/support/conv_net.h"

using namespace tessera;
using namespace tessera::examples;
using namespace tessera::testing;

namespace {

SessionOptions on_pool(std::shared_ptr<MemoryPool> pool, std::vector<InputHint> hints) {
  SessionOptions o;
  o.pool = std::move(pool);
  o.hints = std::move(hints);
  return o;
}

const std::vector<InputHint> kAppend = {{"ids", InputHint::Kind::Append}};

std::vector<float> image(int64_t h, int64_t w, float shift) {
  std::vector<float> v(static_cast<size_t>(3 * h * w));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f + shift;
  return v;
}

}  // namespace

TEST_CASE("pool: an append hint keeps K and V and makes the rest transient") {
  TinyConfig config;
  config.capacity = 32;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  GraphSession s(g, on_pool(MemoryPool::create(), kAppend));
  s.write("ids", Box{{0, 4}}, std::vector<int32_t>{1, 2, 3, 4});
  s.read<float>("logits", Box{{3, 4}, {0, config.vocab}});
  for (const Tensor& t : m.keys) {
    CHECK(s.hinted_reuse(t.id) > 0);
    CHECK(s.is_kept(t.id));
  }
  for (const Tensor& t : m.values) CHECK(s.is_kept(t.id));
  CHECK(s.hinted_reuse(m.logits.id) == 0);
  CHECK_FALSE(s.is_kept(m.logits.id));
  CHECK_FALSE(s.is_kept(m.attention_outputs[0].id));
  // Kept: K and V of every layer, and the positions (an arange no write dirties: always reused).
  CHECK(s.kept_bytes() == 2 * config.layers * config.capacity * config.kv_heads * config.head_dim * 4 +
                              config.capacity * 4);
  CHECK_THROWS_AS(GraphSession(g, on_pool(MemoryPool::create(), {{"nope", InputHint::Kind::Append}})), Error);
}

TEST_CASE("pool: a warm decode step allocates nothing") {
  TinyConfig config;
  config.capacity = 64;
  Graph g;
  build_tiny_transformer(g, config);
  auto pool = MemoryPool::create();
  GraphSession s(g, on_pool(pool, kAppend));
  std::vector<int32_t> tokens = {5, 1, 7, 3, 9};
  s.write("ids", Box{{0, 5}}, tokens);
  s.read<float>("logits", Box{{4, 5}, {0, config.vocab}});
  int64_t allocations = 0;
  for (int64_t t = 5; t < 20; ++t) {
    if (t == 7) allocations = pool->stats().allocations;  // warm: one decode plan ran
    tokens.push_back(static_cast<int32_t>(t % config.vocab));
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{tokens.back()});
    s.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}});
  }
  CHECK(pool->stats().allocations == allocations);
  CHECK(pool->stats().transient_bytes > 0);
}

TEST_CASE("pool: a budget too small for K and V keeps decode exact") {
  TinyConfig config;
  config.capacity = 48;
  Graph g;
  TinyModel m = build_tiny_transformer(g, config);
  const int64_t kv_bytes = 2 * config.layers * config.capacity * config.kv_heads * config.head_dim * 4;
  auto pool = MemoryPool::create(MemoryPoolOptions{.budget_bytes = kv_bytes / 3});
  GraphSession s(g, on_pool(pool, kAppend));
  std::vector<int32_t> tokens = {2, 4, 6, 8};
  s.write("ids", Box{{0, 4}}, tokens);
  s.read<float>("logits", Box{{3, 4}, {0, config.vocab}});
  for (int64_t t = 4; t < 16; ++t) {
    CAPTURE(t);
    tokens.push_back(static_cast<int32_t>((t * 5) % config.vocab));
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{tokens.back()});
    CHECK(s.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}}) == fresh_logits(g, tokens, t, config.vocab));
    CHECK(pool->stats().kept_bytes <= kv_bytes / 3);
  }
  int kept = 0;
  for (const Tensor& t : m.keys) kept += s.is_kept(t.id) ? 1 : 0;
  CHECK(kept < config.layers);  // some layers' K are recomputed from scratch: slower, still exact
}

TEST_CASE("pool: sessions over different graphs share one budget and one arena") {
  TinyConfig small, large;
  small.capacity = 32;
  large.capacity = 48;
  large.dim = 48;
  large.ffn = 96;
  large.seed = 9;
  Graph g1, g2, g3;
  build_tiny_transformer(g1, small);
  build_tiny_transformer(g2, large);
  conv_net(g3, 24, 20);
  const int64_t budget = 24 << 10;
  auto pool = MemoryPool::create(MemoryPoolOptions{.budget_bytes = budget});
  GraphSession a(g1, on_pool(pool, kAppend)), b(g2, on_pool(pool, kAppend));
  GraphSession c(g3, on_pool(pool, {{"image", InputHint::Kind::Edits}}));
  GraphSession a_alone(g1, SessionOptions{.hints = kAppend}), b_alone(g2, SessionOptions{.hints = kAppend});
  GraphSession c_alone(g3);
  CHECK(pool->stats().sessions == 3);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  for (GraphSession* s : {&a, &b, &a_alone, &b_alone}) s->write("ids", Box{{0, 6}}, tokens);
  for (GraphSession* s : {&c, &c_alone}) s->write("image", Box{{0, 1}, {0, 3}, {0, 24}, {0, 20}}, image(24, 20, 0));
  const Box image_box{{0, 1}, {0, 3}, {0, 24}, {0, 20}};
  for (int64_t t = 6; t < 14; ++t) {
    CAPTURE(t);
    for (auto [s, alone, vocab] : {std::tuple{&a, &a_alone, small.vocab}, std::tuple{&b, &b_alone, large.vocab}}) {
      s->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{static_cast<int32_t>(t)});
      alone->write("ids", Box{{t, t + 1}}, std::vector<int32_t>{static_cast<int32_t>(t)});
      CHECK(s->read<float>("logits", Box{{t, t + 1}, {0, vocab}}) == alone->read<float>("logits", Box{{t, t + 1}, {0, vocab}}));
    }
    const Box edit{{0, 1}, {0, 3}, {t, t + 2}, {t, t + 3}};
    for (GraphSession* s : {&c, &c_alone}) s->write("image", edit, std::vector<float>(18, 0.25f * static_cast<float>(t % 3)));
    CHECK(c.read<float>("out", image_box) == c_alone.read<float>("out", image_box));
  }
  const PoolStats st = pool->stats();
  const int64_t largest_arena = std::max({a.stats().arena_bytes, b.stats().arena_bytes, c.stats().arena_bytes});
  CHECK(st.kept_bytes <= budget);
  CHECK(st.transient_bytes == largest_arena);  // one arena for all three, not three
  CHECK(st.peak_bytes <= largest_arena + budget);
  CHECK(st.evictions + (st.kept_bytes < budget ? 1 : 0) > 0);
  CHECK_THROWS_AS(GraphSession(g1, SessionOptions{.cache_budget_bytes = 10, .pool = pool}), Error);
}

TEST_CASE("pool: an edit hint keeps the conv features, and edits recompute only their neighbourhood") {
  Graph g;
  conv_net(g, 32, 32);
  GraphSession s(g, SessionOptions{.hints = {{"image", InputHint::Kind::Edits}}});
  const Box all{{0, 1}, {0, 3}, {0, 32}, {0, 32}};
  s.write("image", all, image(32, 32, 0));
  s.read<float>("out", all);
  const int64_t full = s.stats().elements_computed;
  s.write("image", Box{{0, 1}, {0, 3}, {10, 12}, {20, 22}}, std::vector<float>(12, 0.5f));
  std::vector<float> edited = s.read<float>("out", all);
  CHECK(s.stats().elements_computed * 5 < full);
  GraphSession fresh(g);
  std::vector<float> pixels = image(32, 32, 0);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 10; y < 12; ++y)
      for (int64_t x = 20; x < 22; ++x) pixels[static_cast<size_t>((c * 32 + y) * 32 + x)] = 0.5f;
  fresh.write("image", all, pixels);
  CHECK(fresh.read<float>("out", all) == edited);
}

TEST_CASE("pool: sessions on one pool used from several threads give the serial results") {
  TinyConfig config;
  config.capacity = 40;
  Graph g1, g2;
  build_tiny_transformer(g1, config);
  conv_net(g2, 16, 16);
  auto pool = MemoryPool::create(MemoryPoolOptions{.budget_bytes = 16 << 10});
  GraphSession lm(g1, on_pool(pool, kAppend));
  GraphSession net(g2, on_pool(pool, {{"image", InputHint::Kind::Edits}}));
  std::vector<std::vector<float>> lm_rows, net_outs;
  std::thread t1([&] {
    lm.write("ids", Box{{0, 3}}, std::vector<int32_t>{1, 2, 3});
    for (int64_t t = 3; t < 20; ++t) {
      lm.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{static_cast<int32_t>(t)});
      lm_rows.push_back(lm.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}}));
    }
  });
  std::thread t2([&] {
    const Box all{{0, 1}, {0, 3}, {0, 16}, {0, 16}};
    net.write("image", all, image(16, 16, 0));
    for (int64_t i = 0; i < 10; ++i) {
      net.write("image", Box{{0, 1}, {0, 3}, {i, i + 1}, {i, i + 1}}, std::vector<float>(3, 0.1f * static_cast<float>(i)));
      net_outs.push_back(net.read<float>("out", all));
    }
  });
  t1.join();
  t2.join();
  // The same sequences, serially on sessions of their own.
  GraphSession lm_alone(g1), net_alone(g2);
  lm_alone.write("ids", Box{{0, 3}}, std::vector<int32_t>{1, 2, 3});
  for (int64_t t = 3; t < 20; ++t) {
    lm_alone.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{static_cast<int32_t>(t)});
    CHECK(lm_alone.read<float>("logits", Box{{t, t + 1}, {0, config.vocab}}) == lm_rows[static_cast<size_t>(t - 3)]);
  }
  const Box all{{0, 1}, {0, 3}, {0, 16}, {0, 16}};
  net_alone.write("image", all, image(16, 16, 0));
  for (int64_t i = 0; i < 10; ++i) {
    net_alone.write("image", Box{{0, 1}, {0, 3}, {i, i + 1}, {i, i + 1}}, std::vector<float>(3, 0.1f * static_cast<float>(i)));
    CHECK(net_alone.read<float>("out", all) == net_outs[static_cast<size_t>(i)]);
  }
}
