#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/session.h"
#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

namespace {

// Reads the whole of `y` after writing `x` to the input "x", with the reference kernels.
template <class In, class Out = In>
std::vector<Out> evaluate(Graph& g, Tensor y, const std::vector<In>& x) {
  g.output("y", y);
  GraphSession s(g, SessionOptions{.backend = BackendKind::Reference});
  s.write<In>("x", Box::full(g.node(g.find_input("x")).shape), x);
  return s.read<Out>("y", Box::full(y.shape()));
}

std::string axes_label(const std::vector<int64_t>& axes) {
  std::string s = "{";
  for (int64_t a : axes) absl::StrAppend(&s, a, ",");
  return s + "}";
}

}  // namespace

TEST_CASE("ops: reduce rules and kernels, every function, axes and keepdims") {
  const std::vector<std::vector<int64_t>> axes_sets = {{},     {0},      {1},   {-1},
                                                       {0, 2}, {-3, -1}, {2, 1}};
  uint64_t seed = 0;
  for (int64_t f = 0; f <= static_cast<int64_t>(ReduceFn::Prod); ++f) {
    const auto fn = static_cast<ReduceFn>(f);
    for (const auto& axes : axes_sets)
      for (bool keepdims : {false, true}) {
        const std::string label =
            absl::StrCat("reduce fn ", f, " axes ", axes_label(axes), " keepdims ", keepdims);
        check_rules(OpCase{label,
                           [=](Graph& g) {
                             return reduce(fn, g.input("x", {3, 4, 5}, DType::F32), axes, keepdims);
                           },
                           {ValueRange{-2.0, 2.0}}},
                    ++seed, 8);
      }
  }
}

TEST_CASE("ops: reduce rules on integer, half and small shapes") {
  for (ReduceFn fn : {ReduceFn::Sum, ReduceFn::Max, ReduceFn::Min, ReduceFn::Prod}) {
    check_rules(OpCase{"reduce i32",
                       [fn](Graph& g) {
                         return reduce(fn, g.input("x", {4, 6}, DType::I32), {1});
                       },
                       {ValueRange{-3, 3}}},
                static_cast<uint64_t>(fn) + 100, 10);
  }
  check_rules(OpCase{"mean f16",
                     [](Graph& g) {
                       return mean(g.input("x", {5, 3}, DType::F16), {0}, true);
                     }},
              7, 10);
  check_rules(
      OpCase{"sum bf16 rank 1", [](Graph& g) { return sum(g.input("x", {7}, DType::BF16), {}); }},
      8, 10);
  check_rules(OpCase{"max rank 4 middle axes",
                     [](Graph& g) {
                       return max(g.input("x", {2, 3, 2, 4}, DType::F32), {1, 2});
                     }},
              9, 10);
  check_rules(OpCase{"sum i64",
                     [](Graph& g) {
                       return sum(g.input("x", {3, 5}, DType::I64), {-1}, true);
                     },
                     {ValueRange{-1000, 1000}}},
              10, 10);
}

TEST_CASE("ops: argmax and argmin rules, ties included") {
  uint64_t seed = 200;
  for (ReduceFn fn : {ReduceFn::Argmax, ReduceFn::Argmin})
    for (int64_t axis : {0, 1, -1})
      for (bool keepdims : {false, true}) {
        // Integers in a narrow range make ties common: the first index must win in any box.
        check_rules(
            OpCase{"arg i32",
                   [=](Graph& g) {
                     return reduce(fn, g.input("x", {4, 3, 5}, DType::I32), {axis}, keepdims);
                   },
                   {ValueRange{0, 2}}},
            ++seed, 8);
        check_rules(
            OpCase{"arg f32",
                   [=](Graph& g) {
                     return reduce(fn, g.input("x", {4, 3, 5}, DType::F32), {axis}, keepdims);
                   }},
            ++seed, 8);
      }
}

TEST_CASE("ops: reduce shapes and dtypes") {
  Graph g;
  Tensor x = g.input("x", {2, 3, 4}, DType::F32);
  CHECK(sum(x, {0, 2}).shape() == Shape{3});
  CHECK(sum(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(sum(x, {}).shape() == Shape{});
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(argmax(x, -1).shape() == Shape{2, 3});
  CHECK(argmax(x, 1, true).shape() == Shape{2, 1, 4});
  CHECK(argmax(x, 1).dtype() == DType::I64);
  CHECK(max(x, {1}).dtype() == DType::F32);
  // Axes are normalised, sorted and deduplicated into the attrs: equivalent calls hash-cons.
  CHECK(sum(x, {-1, 0}).id == sum(x, {0, 2}).id);
  CHECK(sum(x, {}).id == sum(x, {0, 1, 2}).id);
  CHECK(sum(x, {0}).id != sum(x, {0}, true).id);
  CHECK(g.node(sum(x, {2, 0}, true).id).attrs_as<ReduceAttrs>() ==
        ReduceAttrs{.fn = ReduceFn::Sum, .axes = {0, 2}, .keepdims = true});
}

TEST_CASE("ops: reduce reference values") {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  {
    Graph g;
    CHECK(evaluate(g, sum(g.input("x", {2, 3}, DType::F32), {0}), v) ==
          std::vector<float>{5, 7, 9});
  }
  {
    Graph g;
    CHECK(evaluate(g, sum(g.input("x", {2, 3}, DType::F32), {-1}, true), v) ==
          std::vector<float>{6, 15});
  }
  {
    Graph g;
    CHECK(evaluate(g, sum(g.input("x", {2, 3}, DType::F32), {}), v) == std::vector<float>{21});
  }
  {
    Graph g;
    CHECK(evaluate(g, mean(g.input("x", {2, 3}, DType::F32), {0}), v) ==
          std::vector<float>{2.5f, 3.5f, 4.5f});
  }
  {
    Graph g;
    CHECK(evaluate(g, prod(g.input("x", {2, 3}, DType::F32), {1}), v) ==
          std::vector<float>{6, 120});
  }
  {
    Graph g;
    CHECK(evaluate(g, max(g.input("x", {2, 3}, DType::F32), {1}), v) == std::vector<float>{3, 6});
  }
  {
    Graph g;
    CHECK(evaluate(g, min(g.input("x", {2, 3}, DType::F32), {0}), v) ==
          std::vector<float>{1, 2, 3});
  }
  {
    Graph g;
    const std::vector<int32_t> xi = {-5, 7, 2, 3, -1, 4};
    CHECK(evaluate(g, sum(g.input("x", {2, 3}, DType::I32), {1}), xi) ==
          std::vector<int32_t>{4, 6});
  }
  {
    // Reducing over an empty axis: sum 0, prod 1.
    Graph g;
    CHECK(evaluate(g, sum(g.input("x", {2, 0}, DType::F32), {1}), std::vector<float>{}) ==
          std::vector<float>{0, 0});
  }
  {
    Graph g;
    CHECK(evaluate(g, prod(g.input("x", {2, 0}, DType::F32), {1}), std::vector<float>{}) ==
          std::vector<float>{1, 1});
  }
}

TEST_CASE("ops: argmax and argmin pick the first tie and the first NaN") {
  auto arg = [](ReduceFn fn, std::vector<float> x) {
    Graph g;
    const int64_t n = static_cast<int64_t>(x.size());
    return evaluate<float, int64_t>(g, reduce(fn, g.input("x", {n}, DType::F32), {0}), x)[0];
  };
  CHECK(arg(ReduceFn::Argmax, {1, 3, 3, 2}) == 1);
  CHECK(arg(ReduceFn::Argmin, {2, 0, 5, 0}) == 1);
  CHECK(arg(ReduceFn::Argmax, {-1, -1, -1}) == 0);
  CHECK(arg(ReduceFn::Argmax, {1, NAN, 5, NAN}) == 1);
  CHECK(arg(ReduceFn::Argmin, {1, 0, NAN, -3}) == 2);
  {
    Graph g;
    Tensor x = g.input("x", {2, 3}, DType::I32);
    CHECK(evaluate<int32_t, int64_t>(g, argmax(x, 0), {4, 1, 9, 4, 8, 2}) ==
          std::vector<int64_t>{0, 1, 0});
  }
  {
    Graph g;
    const std::vector<float> r =
        evaluate(g, max(g.input("x", {4}, DType::F32), {0}), std::vector<float>{1, NAN, 7, 2});
    CHECK(std::isnan(r[0]));
  }
  {
    Graph g;
    const std::vector<float> r =
        evaluate(g, min(g.input("x", {3}, DType::F32), {0}), std::vector<float>{NAN, -1, 7});
    CHECK(std::isnan(r[0]));
  }
}

TEST_CASE("ops: reduce validation errors") {
  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  Tensor xi = g.input("xi", {2, 3}, DType::I32);
  Tensor xb = g.input("xb", {2, 3}, DType::Bool);
  Tensor empty = g.input("e", {2, 0}, DType::F32);
  Tensor in[] = {x};
  CHECK_THROWS_WITH_AS(g.add_node(in, ReduceAttrs{.fn = static_cast<ReduceFn>(99), .axes = {0}}),
                       doctest::Contains("[reduce] unknown function"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, ReduceAttrs{.fn = ReduceFn::Count}),
                       doctest::Contains("[reduce] unknown function"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, ReduceAttrs{.axes = {1, 0}}),
                       doctest::Contains("[reduce.sum] axes must be sorted"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, ReduceAttrs{.axes = {-1}}),
                       doctest::Contains("[reduce.sum] axis -1 out of range"), Error);
  CHECK_THROWS_WITH_AS(sum(xb, {0}), doctest::Contains("[reduce.sum] does not accept bool"), Error);
  CHECK_THROWS_WITH_AS(argmax(xb, 0), doctest::Contains("[reduce.argmax] does not accept bool"),
                       Error);
  CHECK_THROWS_WITH_AS(mean(xi, {0}), doctest::Contains("[reduce.mean] requires a float input"),
                       Error);
  CHECK_THROWS_WITH_AS(sum(x, {2}), doctest::Contains("[reduce.sum] axis 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(max(x, {-3}), doctest::Contains("[reduce.max] axis -3 out of range"), Error);
  CHECK_THROWS_WITH_AS(sum(x, {1, -1}), doctest::Contains("[reduce.sum] duplicate axis"), Error);
  CHECK_THROWS_WITH_AS(reduce(ReduceFn::Argmin, x, {0, 1}),
                       doctest::Contains("[reduce.argmin] takes exactly one axis"), Error);
  CHECK_THROWS_WITH_AS(max(empty, {1}),
                       doctest::Contains("[reduce.max] cannot reduce over axis 1 of size 0"),
                       Error);
  CHECK_THROWS_WITH_AS(argmin(empty, 1), doctest::Contains("[reduce.argmin] cannot reduce"), Error);
  CHECK_THROWS_WITH_AS(sum(Tensor{}, {0}), doctest::Contains("[reduce] empty tensor"), Error);
  CHECK_NOTHROW(sum(empty, {1}));
  CHECK_NOTHROW(sum(xi, {0}));
}

TEST_CASE("ops: cumsum rules and kernels") {
  uint64_t seed = 300;
  for (int64_t axis : {0, 1, -1}) {
    check_rules(OpCase{"cumsum f32",
                       [axis](Graph& g) {
                         return cumsum(g.input("x", {4, 6}, DType::F32), axis);
                       }},
                ++seed, 15);
  }
  check_rules(OpCase{"cumsum rank 3",
                     [](Graph& g) {
                       return cumsum(g.input("x", {2, 5, 3}, DType::F32), 1);
                     }},
              ++seed, 15);
  check_rules(OpCase{"cumsum i32",
                     [](Graph& g) {
                       return cumsum(g.input("x", {3, 7}, DType::I32), -1);
                     },
                     {ValueRange{-9, 9}}},
              ++seed, 15);
  check_rules(
      OpCase{"cumsum f16", [](Graph& g) { return cumsum(g.input("x", {9}, DType::F16), 0); }},
      ++seed, 15);
}

TEST_CASE("ops: cumsum reference values") {
  {
    Graph g;
    CHECK(evaluate(g, cumsum(g.input("x", {4}, DType::I32), 0), std::vector<int32_t>{1, 2, 3, 4}) ==
          std::vector<int32_t>{1, 3, 6, 10});
  }
  {
    Graph g;
    CHECK(evaluate(g, cumsum(g.input("x", {2, 3}, DType::F32), 0),
                   std::vector<float>{1, 2, 3, 4, 5, 6}) == std::vector<float>{1, 2, 3, 5, 7, 9});
  }
  {
    Graph g;
    CHECK(evaluate(g, cumsum(g.input("x", {2, 3}, DType::F32), -1),
                   std::vector<float>{1, 2, 3, 4, 5, 6}) == std::vector<float>{1, 3, 6, 4, 9, 15});
  }
}

TEST_CASE("ops: cumsum validation errors") {
  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  Tensor s = g.input("s", {}, DType::F32);
  Tensor in[] = {x};
  CHECK_THROWS_WITH_AS(cumsum(g.input("b", {3}, DType::Bool), 0),
                       doctest::Contains("[cumsum] does not accept bool"), Error);
  CHECK_THROWS_WITH_AS(cumsum(x, 2), doctest::Contains("[cumsum] axis 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(cumsum(s, 0), doctest::Contains("[cumsum] axis 0 out of range for rank 0"),
                       Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, CumsumAttrs{.axis = -1}),
                       doctest::Contains("[cumsum] axis -1"), Error);
  CHECK_THROWS_WITH_AS(cumsum(Tensor{}, 0), doctest::Contains("[cumsum] empty tensor"), Error);
}

TEST_CASE("ops: softmax and log_softmax rules and kernels") {
  uint64_t seed = 400;
  for (bool log : {false, true}) {
    auto op = [log](Tensor x, int64_t axis) {
      return log ? log_softmax(x, axis) : softmax(x, axis);
    };
    check_rules(OpCase{"softmax last",
                       [=](Graph& g) {
                         return op(g.input("x", {3, 5}, DType::F32), -1);
                       }},
                ++seed, 15);
    check_rules(OpCase{"softmax axis 0",
                       [=](Graph& g) {
                         return op(g.input("x", {3, 5}, DType::F32), 0);
                       }},
                ++seed, 15);
    check_rules(OpCase{"softmax middle",
                       [=](Graph& g) {
                         return op(g.input("x", {2, 4, 3}, DType::F32), 1);
                       }},
                ++seed, 15);
    // A wide spread of values: a row statistic taken over part of the row would overflow.
    check_rules(OpCase{"softmax wide",
                       [=](Graph& g) {
                         return op(g.input("x", {3, 4}, DType::F32), 1);
                       },
                       {ValueRange{-1000, 1000}}},
                ++seed, 20);
    check_rules(OpCase{"softmax bf16",
                       [=](Graph& g) {
                         return op(g.input("x", {4, 6}, DType::BF16), 1);
                       }},
                ++seed, 15);
  }
}

TEST_CASE("ops: softmax reference values") {
  {
    Graph g;
    const std::vector<float> y =
        evaluate(g, softmax(g.input("x", {3}, DType::F32)), std::vector<float>{1, 2, 3});
    CHECK(y[0] == doctest::Approx(0.09003057).epsilon(1e-6));
    CHECK(y[1] == doctest::Approx(0.24472847).epsilon(1e-6));
    CHECK(y[2] == doctest::Approx(0.66524096).epsilon(1e-6));
  }
  {
    Graph g;
    const std::vector<float> y =
        evaluate(g, log_softmax(g.input("x", {3}, DType::F32)), std::vector<float>{1, 2, 3});
    CHECK(y[0] == doctest::Approx(-2.40760596).epsilon(1e-6));
    CHECK(y[1] == doctest::Approx(-1.40760596).epsilon(1e-6));
    CHECK(y[2] == doctest::Approx(-0.40760596).epsilon(1e-6));
  }
  {
    // Along axis 0 of [[0, 0], [0, ln 3]]: columns are independent; large values do not overflow.
    Graph g;
    const std::vector<float> y = evaluate(g, softmax(g.input("x", {2, 2}, DType::F32), 0),
                                          std::vector<float>{1000, 0, 1000, std::log(3.0f)});
    CHECK(y[0] == doctest::Approx(0.5));
    CHECK(y[2] == doctest::Approx(0.5));
    CHECK(y[1] == doctest::Approx(0.25));
    CHECK(y[3] == doctest::Approx(0.75));
  }
}

TEST_CASE("ops: softmax validation errors") {
  Graph g;
  Tensor x = g.input("x", {2, 3}, DType::F32);
  Tensor in[] = {x};
  CHECK_THROWS_WITH_AS(softmax(g.input("i", {3}, DType::I32)),
                       doctest::Contains("[softmax] requires a float input"), Error);
  CHECK_THROWS_WITH_AS(log_softmax(x, 2), doctest::Contains("[softmax] axis 2 out of range"),
                       Error);
  CHECK_THROWS_WITH_AS(softmax(g.input("s", {}, DType::F32)),
                       doctest::Contains("[softmax] axis -1 out of range"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(in, SoftmaxAttrs{.axis = 2}),
                       doctest::Contains("[softmax] axis 2"), Error);
}

TEST_CASE("ops: softmax and cumsum recompute only the dirty rows in a session") {
  Graph g;
  Tensor x = g.input("x", {4, 6}, DType::F32);
  Tensor y = softmax(x, -1);
  Tensor c = cumsum(x, -1);
  g.output("y", y);
  g.output("c", c);
  GraphSession s(g, SessionOptions{.backend = BackendKind::Reference});
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i));
  s.write<float>("x", Box{{0, 4}, {0, 6}}, v);
  const std::vector<float> before = s.read<float>("y", Box{{0, 4}, {0, 6}});
  s.read<float>("c", Box{{0, 4}, {0, 6}});
  // Change one element of row 2: softmax recomputes that row only; cumsum its suffix only.
  s.write<float>("x", Box{{2, 3}, {4, 5}}, std::vector<float>{3.5f});
  const std::vector<float> after = s.read<float>("y", Box{{0, 4}, {0, 6}});
  CHECK(s.stats().elements_per_node[static_cast<size_t>(y.id)] == 6);
  s.read<float>("c", Box{{0, 4}, {0, 6}});
  CHECK(s.stats().elements_per_node[static_cast<size_t>(c.id)] == 2);
  v[2 * 6 + 4] = 3.5f;
  Graph fresh_graph;
  Tensor fresh = softmax(fresh_graph.input("x", {4, 6}, DType::F32), -1);
  CHECK(evaluate(fresh_graph, fresh, v) == after);
  CHECK(std::vector<float>(before.begin(), before.begin() + 12) ==
        std::vector<float>(after.begin(), after.begin() + 12));
}
