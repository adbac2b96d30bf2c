// The bad-input catalogue of GraphSession: every entry point given wrong names, boxes, buffers,
// dtypes and node ids throws an Error that names the argument, and the session stays usable:
// afterwards every output reads bitwise equal to a fresh session given the same valid writes.
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "doctest/doctest.h"
#include "engine/graph.h"
#include "engine/ops.h"
#include "engine/session.h"

namespace tessera {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

struct Model {
  Graph g;
  Tensor x, ids, table, quant, y, z, w, huge;
  Model() {
    x = g.input("x", {4, 6}, DType::F32);
    ids = g.input("ids", {5}, DType::I32);
    std::vector<float> t(30);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i) * 0.25f;
    table = g.constant({10, 3}, t);
    std::vector<std::byte> blocks(4 * 34, std::byte{1});  // a 4x32 q8_0 weight
    quant = g.constant({4, 32}, DType::Q8_0, blocks);
    y = gather(table, ids);
    z = sum(x * x + g.scalar(1.0f), {1});
    w = softmax(x, -1);
    // 2^43 f32 elements (26 TB) from one row of x.
    huge = expand(reshape(slice(x, 0, 0, 1), {1, 6}), {int64_t{1} << 37, 8, 6}) ;
    g.output("y", y);
    g.output("z", z);
    g.output("w", w);
    g.output("huge", huge);
    g.output("total", sum(huge, {0, 1, 2}));
  }
};

const std::vector<float> kX = [] {
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 7.0f - 1.0f;
  return v;
}();
const std::vector<int32_t> kIds = {3, 1, 4, 1, 5};

void write_valid(GraphSession& s) {
  s.write("x", Box{{0, 4}, {0, 6}}, kX);
  s.write("ids", Box{{0, 5}}, kIds);
}

// Every small output, bitwise, against a fresh session given the same writes.
void check_same_as_fresh(const Graph& g, GraphSession& s) {
  GraphSession fresh(g);
  write_valid(fresh);
  for (const auto& [name, box] : std::vector<std::pair<const char*, Box>>{
           {"y", Box{{0, 5}, {0, 3}}}, {"z", Box{{0, 4}}}, {"w", Box{{0, 4}, {0, 6}}}}) {
    CAPTURE(name);
    const std::vector<float> a = s.read<float>(name, box), b = fresh.read<float>(name, box);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("reliability: bad writes are Errors naming the argument and lose no value") {
  Model m;
  GraphSession s(m.g);
  write_valid(s);
  (void)s.read<float>("w", Box{{0, 4}, {0, 6}});  // valid values that a bad call must not lose
  const std::vector<float> row(6, 1.0f);
  CHECK_THROWS_WITH_AS(s.write("nope", Box{{0, 1}, {0, 6}}, row), doctest::Contains("unknown input 'nope'"), Error);
  CHECK_THROWS_WITH_AS(s.write("z", Box{{0, 1}}, std::vector<float>{1}), doctest::Contains("unknown input 'z'"), Error);
  CHECK_THROWS_WITH_AS(s.write("x", Box{{0, 6}}, row), doctest::Contains("write to 'x'"), Error);             // rank
  CHECK_THROWS_WITH_AS(s.write("x", Box{{4, 5}, {0, 6}}, row), doctest::Contains("out of range"), Error);     // past
  CHECK_THROWS_WITH_AS(s.write("x", Box{{-1, 0}, {0, 6}}, row), doctest::Contains("out of range"), Error);    // negative
  CHECK_THROWS_WITH_AS(s.write("x", Box{{3, 1}, {0, 6}}, row), doctest::Contains("out of range"), Error);     // inverted
  CHECK_THROWS_AS(s.write("x", Box{{0, kMax}, {0, kMax}}, row), Error);
  CHECK_THROWS_AS(s.write("x", Box{{std::numeric_limits<int64_t>::min(), kMax}, {0, 6}}, row), Error);
  CHECK_THROWS_WITH_AS(s.write("x", Box{{0, 1}, {0, 6}}, std::vector<float>(5)), doctest::Contains("bytes"), Error);
  CHECK_THROWS_WITH_AS(s.write("x", Box{{0, 1}, {0, 6}}, std::vector<float>(7)), doctest::Contains("bytes"), Error);
  CHECK_THROWS_WITH_AS(s.write("x", Box{{0, 1}, {0, 6}}, std::vector<int32_t>(6)), doctest::Contains("i32"), Error);
  CHECK_THROWS_WITH_AS(s.write("ids", Box{{0, 1}}, std::vector<float>{1}), doctest::Contains("'ids'"), Error);
  // An empty box with no data is a no-op.
  CHECK_NOTHROW(s.write("x", Box{{2, 2}, {0, 6}}, std::vector<float>{}));
  check_same_as_fresh(m.g, s);
}

TEST_CASE("reliability: bad reads are Errors naming the argument and lose no value") {
  Model m;
  GraphSession s(m.g);
  write_valid(s);
  (void)s.read<float>("w", Box{{0, 4}, {0, 6}});
  std::vector<float> out(4);
  auto bytes = [](std::vector<float>& v) { return std::as_writable_bytes(std::span<float>(v)); };
  CHECK_THROWS_WITH_AS(s.read("nope", Box{{0, 4}}, bytes(out)), doctest::Contains("unknown output 'nope'"), Error);
  CHECK_THROWS_WITH_AS(s.read("x", Box{{0, 4}}, bytes(out)), doctest::Contains("unknown output 'x'"), Error);
  CHECK_THROWS_WITH_AS(s.read("z", Box{{0, 5}}, bytes(out)), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.read("z", Box{{0, 4}, {0, 1}}, bytes(out)), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.read("z", Box{{3, 1}}, bytes(out)), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.read("z", Box{{0, 3}}, bytes(out)), doctest::Contains("buffer has 16 bytes"), Error);
  CHECK_THROWS_AS(s.read<int32_t>("z", Box{{0, 4}}), Error);
  CHECK_THROWS_AS(s.read<float>("z", Box{{0, kMax}}), Error);
  CHECK_THROWS_AS(s.read<float>("huge", Box{{0, kMax}, {0, 8}, {0, 6}}), Error);
  // Valid but 26 TB: refused against the machine's memory before anything is allocated.
  CHECK_THROWS_WITH_AS(s.read<float>("huge", Box{{0, int64_t{1} << 37}, {0, 8}, {0, 6}}),
                       doctest::Contains("memory"), Error);
  // The session holds a node's values in one buffer of its extent: even a small box of the
  // 26 TB node is refused, and so is a read whose computation needs all of it.
  CHECK_THROWS_WITH_AS(s.read<float>("huge", Box{{5, 7}, {0, 8}, {0, 6}}), doctest::Contains("memory"), Error);
  CHECK_THROWS_WITH_AS(s.read<float>("total", Box{}), doctest::Contains("memory"), Error);
  // read_node: unknown ids, quantised values (blocks, not elements).
  std::vector<std::byte> any(4352);
  CHECK_THROWS_WITH_AS(s.read_node(-1, Box{{0, 4}}, any), doctest::Contains("no node -1"), Error);
  CHECK_THROWS_WITH_AS(s.read_node(m.g.size(), Box{{0, 4}}, any), doctest::Contains("no node"), Error);
  CHECK_THROWS_WITH_AS(s.read_node(m.quant.id, Box{{0, 4}, {0, 32}}, any), doctest::Contains("q8_0"), Error);
  std::vector<std::byte> exact(4 * 34);
  CHECK_THROWS_AS(s.read_node(m.quant.id, Box{{0, 4}, {0, 32}}, exact), Error);
  check_same_as_fresh(m.g, s);
}

TEST_CASE("reliability: out-of-range ids fail the read and leave the session usable") {
  Model m;
  GraphSession s(m.g);
  write_valid(s);
  (void)s.read<float>("y", Box{{0, 5}, {0, 3}});
  s.write("ids", Box{{2, 3}}, std::vector<int32_t>{10});
  CHECK_THROWS_AS(s.read<float>("y", Box{{0, 5}, {0, 3}}), Error);
  s.write("ids", Box{{2, 3}}, std::vector<int32_t>{-1});
  CHECK_THROWS_AS(s.read<float>("y", Box{{0, 5}, {0, 3}}), Error);
  s.write("ids", Box{{2, 3}}, std::vector<int32_t>{kIds[2]});
  check_same_as_fresh(m.g, s);
}

TEST_CASE("reliability: explain, set_keep and compile_ahead reject bad arguments") {
  Model m;
  GraphSession s(m.g);
  write_valid(s);
  (void)s.read<float>("w", Box{{0, 4}, {0, 6}});
  CHECK_THROWS_WITH_AS(s.explain("nope", Box{{0, 4}}), doctest::Contains("'nope'"), Error);
  CHECK_THROWS_WITH_AS(s.explain("z", Box{{0, 9}}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(s.set_keep(-1, Keep::Always), doctest::Contains("no node -1"), Error);
  CHECK_THROWS_WITH_AS(s.set_keep(m.g.size() + 5, Keep::Never), doctest::Contains("no node"), Error);
  CHECK_THROWS_AS(s.is_folded(-3), Error);
  CHECK_THROWS_AS(s.is_fused_away(1 << 30), Error);
  CHECK_THROWS_AS(s.valid_region(-1), Error);
  CHECK_THROWS_AS(s.is_kept(m.g.size()), Error);
  auto ahead = [&](ReadPattern p) { return s.compile_ahead(std::span<const ReadPattern>(&p, 1)); };
  CHECK_THROWS_WITH_AS(ahead({{{"x", Box{{0, 1}, {0, 6}}}}, "nope", Box{{0, 1}}}), doctest::Contains("'nope'"), Error);
  CHECK_THROWS_WITH_AS(ahead({{{"nope", Box{{0, 1}}}}, "z", Box{{0, 1}}}), doctest::Contains("'nope'"), Error);
  CHECK_THROWS_WITH_AS(ahead({{{"x", Box{{0, 9}, {0, 6}}}}, "z", Box{{0, 1}}}), doctest::Contains("'x'"), Error);
  CHECK_THROWS_WITH_AS(ahead({{{"x", Box{{0, 1}, {0, 6}}}}, "z", Box{{2, 1}}}), doctest::Contains("'z'"), Error);
  check_same_as_fresh(m.g, s);
}

TEST_CASE("reliability: an input that cannot be allocated fails session creation with an Error") {
  Graph g;
  Tensor x = g.input("x", {int64_t{1} << 40}, DType::F32);  // 4 TiB
  g.output("y", x + x);
  CHECK_THROWS_WITH_AS(GraphSession{g}, doctest::Contains("[pool]"), Error);
}

TEST_CASE("reliability: a tiny cache budget recomputes instead of failing, bitwise equal") {
  Model m;
  for (int64_t budget : {0, 1, 64, 1000}) {
    CAPTURE(budget);
    GraphSession s(m.g, SessionOptions{.cache_budget_bytes = budget});
    write_valid(s);
    for (int round = 0; round < 3; ++round) {
      s.write("x", Box{{round, round + 1}, {0, 6}}, std::vector<float>(kX.begin() + round * 6, kX.begin() + round * 6 + 6));
      (void)s.read<float>("z", Box{{0, 4}});
    }
    CHECK(s.kept_bytes() <= std::max<int64_t>(budget, s.kept_bytes()));
    check_same_as_fresh(m.g, s);
  }
}

TEST_CASE("reliability: bad session options are Errors") {
  Model m;
  CHECK_THROWS_WITH_AS(GraphSession(m.g, SessionOptions{.max_region_boxes = 0}), doctest::Contains("max_region_boxes"),
                       Error);
  CHECK_THROWS_AS(GraphSession(m.g, SessionOptions{.backend_name = "no-such-backend"}), Error);
  CHECK_THROWS_AS(GraphSession(m.g, SessionOptions{.cache_budget_bytes = 10, .pool = MemoryPool::create()}), Error);
  CHECK_THROWS_AS(GraphSession(m.g, SessionOptions{.hints = {InputHint{"nope"}}}), Error);
  CHECK_THROWS_AS(GraphSession(m.g, SessionOptions{.keep_always = {-1}}), Error);
  CHECK_THROWS_AS(GraphSession(m.g, SessionOptions{.keep_always = {1 << 30}}), Error);
}

}  // namespace
}  // namespace tessera
