#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::Buffer;
using tessera::testing::check_rules;
using tessera::testing::evaluate_full;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

namespace {

// The values of node t after evaluating the whole graph with the reference kernels, as doubles.
std::vector<double> values_of(const Graph& g, Tensor t, const std::vector<Buffer>& inputs = {}) {
  std::vector<Buffer> values = evaluate_full(g, inputs);
  const Node& n = g.node(t.id);
  TensorView v = dense_view(values[static_cast<size_t>(t.id)].data(), n.dtype, Box::full(n.shape));
  std::vector<double> out;
  ref::for_each_index(Box::full(n.shape),
                      [&](const int64_t* i) { out.push_back(ref::load(v, i)); });
  return out;
}

template <class T>
Buffer bytes_of(const std::vector<T>& values) {
  Buffer b(values.size() * sizeof(T));
  std::memcpy(b.data(), values.data(), b.size());
  return b;
}

// Runs the reference kernel of node t (no inputs) over `box` into a buffer holding only `box`.
Buffer compute_box(const Graph& g, Tensor t, const Box& box) {
  const Node& n = g.node(t.id);
  Buffer part(static_cast<size_t>(box.volume() * dtype_size(n.dtype)));
  TensorView view = dense_view(part.data(), n.dtype, box);
  absl::Status st = ref::reference_kernel(n.kind)(KernelCall{g, n, {}, view, box});
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  return part;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("ops: matmul rules with broadcast batch dims") {
  struct Case {
    Shape a, b;
    DType dtype;
  };
  const Case cases[] = {
      {{5, 4}, {4, 3}, DType::F32},           // plain
      {{3, 5, 4}, {4, 6}, DType::F32},        // batched a, rank-2 b
      {{2, 4}, {3, 4, 5}, DType::F32},        // rank-2 a, batched b
      {{2, 1, 3, 4}, {3, 4, 2}, DType::F32},  // broadcast on both sides
      {{1, 4, 3}, {2, 3, 5}, DType::F16},     // size-1 batch dim, f16 rounding
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const std::string label = shape_string(c.a) + " x " + shape_string(c.b);
    check_rules(OpCase{label,
                       [c](Graph& g) {
                         Tensor a = g.input("a", c.a, c.dtype);
                         return matmul(a, g.input("b", c.b, c.dtype));
                       }},
                seed++);
  }
}

TEST_CASE("ops: matmul and gather rules are exact") {
  Graph g;
  Tensor a = g.input("a", {2, 1, 6, 4}, DType::F32);
  Tensor b = g.input("b", {3, 4, 5}, DType::F32);
  const Node& c = g.node(matmul(a, b).id);  // [2, 3, 6, 5]
  Region fwd(4);
  kMatmulDef.forward(g, c, 0, Box{{1, 2}, {0, 1}, {5, 6}, {2, 3}}, fwd);  // one element of a
  CHECK(fwd == Region(Box{{1, 2}, {0, 3}, {5, 6}, {0, 5}}));
  fwd.clear();
  kMatmulDef.forward(g, c, 1, Box{{2, 3}, {0, 4}, {1, 3}}, fwd);  // two columns of b
  CHECK(fwd == Region(Box{{0, 2}, {2, 3}, {0, 6}, {1, 3}}));
  std::array<Box, 2> needed;
  kMatmulDef.needed(g, c, Box{{1, 2}, {1, 3}, {4, 6}, {0, 2}}, needed);
  CHECK(needed[0] == Box{{1, 2}, {0, 1}, {4, 6}, {0, 4}});
  CHECK(needed[1] == Box{{1, 3}, {0, 4}, {0, 2}});

  Tensor table = g.input("table", {10, 4}, DType::F32);
  Tensor ids = g.input("ids", {3, 7}, DType::I32);
  const Node& e = g.node(gather(table, ids).id);  // [3, 7, 4]
  Region gf(3);
  kGatherDef.forward(g, e, 1, Box{{2, 3}, {6, 7}}, gf);  // an appended token
  CHECK(gf == Region(Box{{2, 3}, {6, 7}, {0, 4}}));
  gf.clear();
  kGatherDef.forward(g, e, 0, Box{{4, 5}, {1, 2}}, gf);
  CHECK(gf == Region(Box{{0, 3}, {0, 7}, {1, 2}}));
  kGatherDef.needed(g, e, Box{{2, 3}, {6, 7}, {0, 2}}, needed);
  CHECK(needed[0] == Box{{0, 10}, {0, 2}});
  CHECK(needed[1] == Box{{2, 3}, {6, 7}});
}

TEST_CASE("ops: matmul of known matrices") {
  Graph g;
  Tensor a = g.constant({2, 2}, {1, 2, 3, 4});
  Tensor b = g.constant({2, 3}, {5, 6, 7, 8, 9, 10});
  CHECK(values_of(g, matmul(a, b)) == std::vector<double>{21, 24, 27, 47, 54, 61});
  // A batch of two left matrices against one shared right matrix.
  Tensor batch = g.constant({2, 1, 2}, {1, 0, 0, 1});
  CHECK(values_of(g, matmul(batch, b)) == std::vector<double>{5, 6, 7, 8, 9, 10});
}

TEST_CASE("ops: gather rules with rank-2 ids and rank-3 table") {
  struct Case {
    Shape table, ids;
    DType table_dtype, ids_dtype;
  };
  const Case cases[] = {
      {{6, 3, 2}, {2, 3}, DType::F32, DType::I32},
      {{7}, {4, 2}, DType::F32, DType::I64},  // rank-1 table: the output is the ids' shape
      {{5, 4}, {3}, DType::I32, DType::I32},
      {{4, 3}, {}, DType::F32, DType::I32},  // a single id
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const std::string label = shape_string(c.table) + " by ids " + shape_string(c.ids);
    // Ranges follow declaration order: table first, then ids in [0, V - 1].
    check_rules(OpCase{label,
                       [c](Graph& g) {
                         Tensor table = g.input("table", c.table, c.table_dtype);
                         return gather(table, g.input("ids", c.ids, c.ids_dtype));
                       },
                       {ValueRange{-100, 100}, ValueRange{0, static_cast<double>(c.table[0] - 1)}}},
                seed++);
  }
}

TEST_CASE("ops: gather picks table rows") {
  Graph g;
  Tensor table = g.constant({3, 2}, {0, 1, 10, 11, 20, 21});
  Tensor ids = g.input("ids", {2, 2}, DType::I32);
  Tensor out = gather(table, ids);
  CHECK(g.node(out.id).shape == Shape{2, 2, 2});
  CHECK(values_of(g, out, {bytes_of(std::vector<int32_t>{2, 0, 1, 2})}) ==
        std::vector<double>{20, 21, 0, 1, 10, 11, 20, 21});
}

TEST_CASE("ops: gather with an out-of-range id fails the kernel") {
  for (int64_t bad : {3, -1}) {
    Graph g;
    Tensor table = g.input("table", {3, 2}, DType::F32);
    Tensor ids = g.input("ids", {2}, DType::I64);
    Tensor out = gather(table, ids);
    std::vector<float> table_values(6, 1.0f);
    std::vector<int64_t> id_values{0, bad};
    TensorView tv = dense_view(table_values.data(), DType::F32, Box{{0, 3}, {0, 2}});
    TensorView iv = dense_view(id_values.data(), DType::I64, Box{{0, 2}});
    std::vector<float> result(4);
    TensorView ov = dense_view(result.data(), DType::F32, Box{{0, 2}, {0, 2}});
    std::vector<TensorView> views{tv, iv};
    Box box{{0, 2}, {0, 2}};
    absl::Status st =
        ref::reference_kernel(OpKind::Gather)(KernelCall{g, g.node(out.id), views, ov, box});
    CHECK_FALSE(st.ok());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(st.message()).find("out of range [0, 3)") != std::string::npos);
    // Only the bad position's box fails; the good id alone computes.
    Box good{{0, 1}, {0, 2}};
    CHECK(
        ref::reference_kernel(OpKind::Gather)(KernelCall{g, g.node(out.id), views, ov, good}).ok());
  }
}

TEST_CASE("ops: triu and tril rules and values") {
  for (int64_t k : {-1, 0, 2}) {
    const auto seed = static_cast<uint64_t>(k + 10);
    check_rules(OpCase{"triu",
                       [k](Graph& g) {
                         return triu(g.input("x", {2, 4, 5}, DType::F32), k);
                       }},
                seed, 10);
    check_rules(OpCase{"tril",
                       [k](Graph& g) {
                         return tril(g.input("x", {4, 3}, DType::I64), k);
                       }},
                seed, 10);
  }
  Graph g;
  Tensor x = g.constant({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(values_of(g, triu(x, 0)) == std::vector<double>{1, 2, 3, 0, 5, 6, 0, 0, 9});
  CHECK(values_of(g, triu(x, 1)) == std::vector<double>{0, 2, 3, 0, 0, 6, 0, 0, 0});
  CHECK(values_of(g, tril(x, 0)) == std::vector<double>{1, 0, 0, 4, 5, 0, 7, 8, 9});
  CHECK(values_of(g, tril(x, -1)) == std::vector<double>{0, 0, 0, 4, 0, 0, 7, 8, 0});
}

TEST_CASE("ops: arange values") {
  Graph g;
  CHECK(values_of(g, arange(g, 5, 1.5, 0.5)) == std::vector<double>{1.5, 2, 2.5, 3, 3.5});
  CHECK(values_of(g, arange(g, 4, 3, -2, DType::I32)) == std::vector<double>{3, 1, -1, -3});
  CHECK(values_of(g, arange(g, 0)).empty());
  CHECK(g.node(arange(g, 3, 0, 1, DType::I64).id).dtype == DType::I64);
}

TEST_CASE("ops: rand gives the same values whatever box computes them") {
  Graph g;
  for (Tensor t :
       {rand(g, {5, 7, 3}, 42), randn(g, {5, 7, 3}, 42), rand(g, {6, 4}, 7, DType::BF16)}) {
    const Node& n = g.node(t.id);
    Buffer full = evaluate_full(g, {})[static_cast<size_t>(t.id)];
    TensorView fv = dense_view(full.data(), n.dtype, Box::full(n.shape));
    std::mt19937_64 rng(3);
    for (int trial = 0; trial < 20; ++trial) {
      CAPTURE(trial);
      Box box = tessera::testing::random_box(n.shape, rng);
      Buffer part = compute_box(g, t, box);
      TensorView pv = dense_view(part.data(), n.dtype, box);
      ref::for_each_index(box, [&](const int64_t* i) {
        CHECK(std::memcmp(part.data() + pv.offset(i) * dtype_size(n.dtype),
                          full.data() + fv.offset(i) * dtype_size(n.dtype),
                          static_cast<size_t>(dtype_size(n.dtype))) == 0);
      });
    }
  }
}

TEST_CASE("ops: rand is uniform on the unit interval and randn is standard normal") {
  Graph g;
  std::vector<double> u = values_of(g, rand(g, {100, 100}, 1));
  for (double x : u) REQUIRE((x >= 0 && x < 1));
  CHECK(std::fabs(mean_of(u) - 0.5) < 0.02);
  for (DType dtype : {DType::F16, DType::BF16})
    for (double x : values_of(g, rand(g, {4000}, 5, dtype))) REQUIRE((x >= 0 && x < 1));

  std::vector<double> z = values_of(g, randn(g, {10000}, 1));
  const double mean = mean_of(z);
  double var = 0;
  for (double x : z) var += (x - mean) * (x - mean);
  const double stddev = std::sqrt(var / static_cast<double>(z.size()));
  CHECK(std::fabs(mean) < 0.05);
  CHECK(std::fabs(stddev - 1.0) < 0.05);
  for (double x : z) REQUIRE(std::isfinite(x));
}

TEST_CASE("ops: rand seeds give different values") {
  Graph g;
  std::vector<double> a = values_of(g, rand(g, {64}, 1)), b = values_of(g, rand(g, {64}, 2));
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  CHECK(same < 4);
  CHECK(values_of(g, randn(g, {64}, 1)) != values_of(g, randn(g, {64}, 2)));
  // Same seed, same values (also across graphs).
  Graph h;
  CHECK(values_of(h, rand(h, {64}, 1)) == a);
}

TEST_CASE("ops: matmul validation errors") {
  Graph g;
  Tensor a = g.input("a", {2, 3, 4}, DType::F32);
  Tensor b = g.input("b", {4, 5}, DType::F32);
  CHECK_NOTHROW(matmul(a, b));
  CHECK_THROWS_WITH_AS(matmul(a, g.input("k", {3, 5}, DType::F32)),
                       doctest::Contains("[matmul] inner dimensions"), Error);
  CHECK_THROWS_WITH_AS(matmul(g.input("v", {4}, DType::F32), b),
                       doctest::Contains("[matmul] inputs need rank >= 2"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, g.input("h", {4, 5}, DType::F16)),
                       doctest::Contains("[matmul] dtype mismatch"), Error);
  Tensor ia = g.input("ia", {2, 4}, DType::I32);
  CHECK_THROWS_WITH_AS(matmul(ia, g.input("ib", {4, 2}, DType::I32)),
                       doctest::Contains("[matmul] needs float"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, g.input("bb", {3, 4, 5}, DType::F32)),
                       doctest::Contains("[matmul] batch dims"), Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor{}, b), doctest::Contains("[matmul]"), Error);
}

TEST_CASE("ops: gather, triangle, arange and rand validation errors") {
  Graph g;
  Tensor table = g.input("table", {5, 3}, DType::F32);
  CHECK_THROWS_WITH_AS(gather(table, g.input("fids", {2}, DType::F32)),
                       doctest::Contains("[gather] ids must be"), Error);
  CHECK_THROWS_WITH_AS(gather(g.input("scalar", {}, DType::F32), g.input("ids", {2}, DType::I32)),
                       doctest::Contains("[gather] table must have rank"), Error);
  CHECK_THROWS_WITH_AS(triu(g.input("row", {4}, DType::F32)), doctest::Contains("[triangle]"),
                       Error);
  CHECK_THROWS_WITH_AS(tril(g.input("row2", {4}, DType::F32), 1), doctest::Contains("[triangle]"),
                       Error);
  CHECK_THROWS_WITH_AS(arange(g, -1), doctest::Contains("[arange] length"), Error);
  CHECK_THROWS_WITH_AS(arange(g, 3, 0, 1, DType::Bool), doctest::Contains("[arange] dtype"), Error);
  CHECK_THROWS_WITH_AS(rand(g, {4}, 1, DType::I32),
                       doctest::Contains("[rand] dtype must be a float"), Error);
  CHECK_THROWS_WITH_AS(randn(g, {4}, 1, DType::Bool),
                       doctest::Contains("[rand] dtype must be a float"), Error);
  CHECK_THROWS_WITH_AS(rand(g, {2, -1}, 1), doctest::Contains("[rand]"), Error);
}
