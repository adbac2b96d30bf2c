#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "engine/ops.h"
#include "engine/session.h"
#include "tests/support/quant_blocks.h"
#include "tests/support/scoped_env.h"

using namespace tessera;

namespace {

std::vector<float> iota_values(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

}  // namespace

TEST_CASE("session: partial write recomputes only the dirty box on read") {
  Graph g;
  Tensor a = g.input("a", {4, 3}, DType::F32);
  Tensor b = g.input("b", {4, 3}, DType::F32);
  Tensor c = exp(a * b) + a;
  g.output("c", c);
  // Node by node (the fuse pass would make the chain one fused_elementwise step).
  GraphSession s(g, SessionOptions{.fuse = false});
  s.write("a", Box{{0, 4}, {0, 3}}, iota_values(12, 0.f));
  s.write("b", Box{{0, 4}, {0, 3}}, std::vector<float>(12, 0.5f));
  std::vector<float> full = s.read<float>("c", Box{{0, 4}, {0, 3}});
  CHECK(s.stats().elements_computed == 3 * 12);
  CHECK(full[5] == doctest::Approx(std::exp(2.5f) + 5.f));

  // Nothing changed: a read costs nothing.
  s.read<float>("c", Box{{0, 4}, {0, 3}});
  CHECK(s.stats().elements_computed == 0);

  // One row dirty: one row of each of the three nodes.
  s.write("a", Box{{2, 3}, {0, 3}}, std::vector<float>{1.f, 1.f, 1.f});
  std::vector<float> again = s.read<float>("c", Box{{0, 4}, {0, 3}});
  CHECK(s.stats().elements_computed == 3 * 3);
  CHECK(again[6] == doctest::Approx(std::exp(0.5f) + 1.f));
  CHECK(s.valid_region(c.id) == Region(Box{{0, 4}, {0, 3}}));

  // Reading a sub-box computes only that sub-box.
  s.write("b", Box{{0, 4}, {0, 3}}, std::vector<float>(12, 2.f));
  s.read<float>("c", Box{{1, 2}, {1, 2}});
  CHECK(s.stats().elements_computed == 3);
}

TEST_CASE("session: values not kept under a zero budget are recomputed, results unchanged") {
  Graph g;
  Tensor a = g.input("a", {8}, DType::F32);
  Tensor c = sqrt(abs(a) + a);
  g.output("c", c);
  SessionOptions options;
  options.cache_budget_bytes = 0;
  options.fuse = false;  // node by node
  GraphSession s(g, options);
  GraphSession keep(g);
  s.write("a", Box{{0, 8}}, iota_values(8, -3.f));
  keep.write("a", Box{{0, 8}}, iota_values(8, -3.f));
  std::vector<float> x = s.read<float>("c", Box{{0, 8}});
  CHECK(s.kept_bytes() == 0);
  CHECK(s.valid_region(c.id).empty());
  std::vector<float> y = s.read<float>("c", Box{{0, 8}});
  CHECK(s.stats().elements_computed == 3 * 8);  // recomputed
  std::vector<float> z = keep.read<float>("c", Box{{0, 8}});
  CHECK(std::memcmp(x.data(), z.data(), 32) == 0);
  CHECK(std::memcmp(y.data(), z.data(), 32) == 0);
}

TEST_CASE("session: a budget keeps the nodes that fit") {
  Graph g;
  Tensor a = g.input("a", {16}, DType::F32);
  Tensor b = exp(a);
  Tensor c = b + b;
  g.output("c", c);
  SessionOptions options;
  options.cache_budget_bytes = 64;  // one of the two 64-byte nodes
  GraphSession s(g, options);
  s.write("a", Box{{0, 16}}, iota_values(16, 0.f));
  s.read<float>("c", Box{{0, 16}});
  CHECK(s.kept_bytes() <= 64);
  CHECK(s.is_kept(b.id) != s.is_kept(c.id));
}

TEST_CASE("session: bad input raises Error and leaves the session usable") {
  Graph g;
  Tensor a = g.input("a", {4, 3}, DType::F32);
  Tensor ids = g.input("n", {2}, DType::I32);
  g.output("c", neg(a));
  g.output("ids", abs(ids));
  GraphSession s(g);
  std::vector<float> row(3, 1.f);
  CHECK_THROWS_WITH_AS(s.write("nope", Box{{0, 1}, {0, 3}}, row), doctest::Contains("unknown input 'nope'"), Error);
  CHECK_THROWS_WITH_AS(s.write("a", Box{{3, 5}, {0, 3}}, row), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.write("a", Box{{0, 1}}, row), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.write("a", Box{{0, 2}, {0, 3}}, row), doctest::Contains("bytes"), Error);
  CHECK_THROWS_WITH_AS(s.write("a", Box{{0, 1}, {0, 3}}, std::vector<int32_t>{1, 2, 3}), doctest::Contains("is f32"),
                       Error);
  CHECK_THROWS_WITH_AS(s.read<float>("missing", Box{{0, 1}, {0, 3}}), doctest::Contains("unknown output"), Error);
  CHECK_THROWS_WITH_AS(s.read<float>("c", Box{{0, 1}, {0, 4}}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.read<int32_t>("c", Box{{0, 1}, {0, 3}}), doctest::Contains("buffer is i32"), Error);
  std::vector<std::byte> small(4);
  CHECK_THROWS_WITH_AS(s.read("c", Box{{0, 1}, {0, 3}}, small), doctest::Contains("bytes"), Error);
  // Still usable.
  s.write("a", Box{{1, 2}, {0, 3}}, row);
  std::vector<float> out = s.read<float>("c", Box{{0, 2}, {0, 3}});
  CHECK(out[3] == -1.f);
  CHECK(out[0] == 0.f);
}

TEST_CASE("session: rank-0 and empty boxes") {
  Graph g;
  Tensor a = g.input("a", {3}, DType::F32);
  g.output("c", neg(a));
  GraphSession s(g);
  s.write("a", Box{{1, 1}}, std::vector<float>{});
  std::vector<float> none = s.read<float>("c", Box{{2, 2}});
  CHECK(none.empty());
  CHECK(s.stats().elements_computed == 0);
}

TEST_CASE("session: keep policies pin or drop nodes, results unchanged") {
  Graph g;
  Tensor a = g.input("a", {8}, DType::F32);
  Tensor b = exp(a);
  Tensor c = b * b;
  g.output("c", c);
  GraphSession s(g, SessionOptions{.fuse = false});  // node by node
  s.set_keep(b.id, Keep::Never);
  s.write("a", Box{{0, 8}}, iota_values(8, 0.f));
  std::vector<float> first = s.read<float>("c", Box{{0, 8}});
  CHECK_FALSE(s.is_kept(b.id));
  CHECK(s.valid_region(b.id).empty());
  CHECK(s.valid_region(c.id) == Region(Box{{0, 8}}));
  s.write("a", Box{{3, 4}}, std::vector<float>{1.f});
  std::vector<float> second = s.read<float>("c", Box{{0, 8}});
  CHECK(s.stats().elements_computed == 2);  // one element of b (transient) and one of c
  CHECK(second[3] == doctest::Approx(std::exp(2.f)));
  CHECK_THROWS_AS(s.set_keep(99, Keep::Always), Error);
  SessionOptions tight;
  tight.cache_budget_bytes = 32;
  tight.fuse = false;
  GraphSession p(g, tight);
  p.set_keep(b.id, Keep::Always);
  p.write("a", Box{{0, 8}}, iota_values(8, 0.f));
  p.read<float>("c", Box{{0, 8}});
  CHECK(p.is_kept(b.id));
  CHECK_FALSE(p.is_kept(c.id));  // the pinned node used the whole budget
}

TEST_CASE("session: the last plan lists the steps of a read") {
  Graph g;
  Tensor a = g.input("a", {4, 3}, DType::F32);
  Tensor c = exp(a) + a;
  g.output("c", c);
  GraphSession s(g, SessionOptions{.fuse = false});  // node by node
  s.read<float>("c", Box{{0, 4}, {0, 3}});
  s.write("a", Box{{1, 2}, {0, 3}}, std::vector<float>(3, 1.f));
  s.read<float>("c", Box{{0, 4}, {0, 3}});
  CHECK(s.last_plan().find("unary.exp {[1:2, 0:3]}") != std::string::npos);
  CHECK(s.last_plan().find("binary.add {[1:2, 0:3]}") != std::string::npos);
  s.read<float>("c", Box{{0, 4}, {0, 3}});
  CHECK(s.last_plan().empty());
}

TEST_CASE("session: weights of different shapes over the same bytes get packings of their own") {
  // The cpu backend packs a constant weight once per (address, kernel) and shares the packing
  // among the process's backends while its owner lives: two graphs viewing one buffer as 64 x 64
  // and as 128 x 32 must not share it.
  const testing::ScopedEnv int8("TESSERA_LINEAR", "int8");
  std::mt19937_64 rng(5);
  auto bytes = std::make_shared<std::vector<uint8_t>>(testing::random_quantized(DType::Q8_0, 64, 64, rng));
  const std::vector<uint8_t> copy_square = *bytes, copy_tall = *bytes;  // each viewed one way only
  std::vector<float> x(4 * 64);
  for (float& v : x) v = static_cast<float>(static_cast<int64_t>(rng() % 200) - 100) / 64.0f;
  std::vector<std::unique_ptr<Graph>> graphs;  // every session stays alive, holding its packing
  std::vector<std::unique_ptr<GraphSession>> sessions;
  auto run = [&](int64_t n, int64_t k, const uint8_t* data) {
    graphs.push_back(std::make_unique<Graph>());
    Graph& g = *graphs.back();
    Tensor in = g.input("x", {4 * 64 / k, k}, DType::F32);
    g.output("y", linear(in, g.constant_external({n, k}, DType::Q8_0, data, bytes)));
    sessions.push_back(std::make_unique<GraphSession>(g));
    GraphSession& s = *sessions.back();
    s.write<float>("x", Box{{0, 4 * 64 / k}, {0, k}}, x);
    return s.read<float>("y", Box{{0, 4 * 64 / k}, {0, n}});
  };
  const std::vector<float> square = run(64, 64, bytes->data());
  const std::vector<float> tall = run(128, 32, bytes->data());  // same address, same kernel
  CHECK(square == run(64, 64, copy_square.data()));
  CHECK(tall == run(128, 32, copy_tall.data()));
}

TEST_CASE("session: a transient target read over exactly its box is computed into the caller's buffer") {
  // The read's last step writes the caller's buffer directly (no copy out): at any element
  // alignment, for a reshape whose input is computed in place or not, a linear, and a reduction,
  // bitwise as through the arena (a read whose box is not the step's box, or of a kept value).
  Graph g;
  Tensor x = g.input("x", {8, 12}, DType::F32);
  Tensor a = tanh(x);
  g.output("r", reshape(a, {8, 3, 4}));
  g.output("l", linear(a, g.constant({5, 12}, iota_values(60, -30.0f))));
  g.output("t", tanh(a) * x);
  SessionOptions nothing_kept;
  nothing_kept.cache_budget_bytes = 0;
  GraphSession transient(g, nothing_kept), kept(g);
  std::vector<float> xs = iota_values(8 * 12, -40.0f);
  for (float& v : xs) v *= 0.05f;
  for (GraphSession* s : {&transient, &kept}) s->write<float>("x", Box{{0, 8}, {0, 12}}, xs);
  struct Read {
    const char* output;
    Box box;
  };
  for (const Read& r : {Read{"r", Box{{2, 3}, {0, 3}, {0, 4}}}, Read{"r", Box{{1, 6}, {1, 3}, {0, 4}}},
                        Read{"l", Box{{3, 4}, {0, 5}}}, Read{"l", Box{{0, 8}, {1, 4}}}, Read{"t", Box{{4, 7}, {2, 9}}}}) {
    CAPTURE(r.output);
    CAPTURE(r.box.to_string());
    const std::vector<float> expected = kept.read<float>(r.output, r.box);
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {  // 4-byte aligned, not 16
      std::vector<float> buffer(expected.size() + offset, -1.0f);
      transient.read(r.output, r.box, std::as_writable_bytes(std::span<float>(buffer).subspan(offset)));
      CHECK(std::vector<float>(buffer.begin() + static_cast<std::ptrdiff_t>(offset), buffer.end()) == expected);
      for (size_t i = 0; i < offset; ++i) CHECK(buffer[i] == -1.0f);
    }
  }
}
