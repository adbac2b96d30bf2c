#include <doctest/doctest.h>

#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

TEST_CASE("ops: unary rules and kernels") {
  for (int64_t f = 0; f < static_cast<int64_t>(UnaryFn::Count); ++f) {
    auto fn = static_cast<UnaryFn>(f);
    check_rules(OpCase{"unary", [fn](Graph& g) { return unary(fn, g.input("x", {3, 5}, DType::F32)); },
                       {ValueRange{0.1, 3.0}}},
                static_cast<uint64_t>(f), 10);
  }
  check_rules(OpCase{"neg i32", [](Graph& g) { return neg(g.input("x", {4, 3}, DType::I32)); }}, 1, 10);
  check_rules(OpCase{"exp f16", [](Graph& g) { return exp(g.input("x", {4, 3}, DType::F16)); }}, 2, 10);
}

TEST_CASE("ops: binary broadcasting rules and kernels") {
  for (int64_t f = 0; f < static_cast<int64_t>(BinaryFn::Count); ++f) {
    auto fn = static_cast<BinaryFn>(f);
    check_rules(OpCase{"binary", [fn](Graph& g) {
                         return binary(fn, g.input("a", {2, 1, 4}, DType::F32), g.input("b", {3, 1}, DType::F32));
                       },
                       {ValueRange{0.5, 2.0}, ValueRange{0.5, 2.0}}},
                static_cast<uint64_t>(f), 10);
  }
  check_rules(OpCase{"div i32", [](Graph& g) {
                       return div(g.input("a", {3, 4}, DType::I32), g.input("b", {4}, DType::I32));
                     },
                     {ValueRange{-20, 20}, ValueRange{1, 5}}});
}

TEST_CASE("ops: where and cast rules and kernels") {
  check_rules(OpCase{"where", [](Graph& g) {
    return where(g.input("c", {4, 1}, DType::Bool), g.input("a", {4, 3}, DType::F32), g.input("b", {3}, DType::F32));
  }});
  check_rules(OpCase{"cast", [](Graph& g) { return cast(g.input("x", {5, 2}, DType::F32), DType::BF16); }});
  check_rules(OpCase{"cast to i32", [](Graph& g) { return cast(g.input("x", {5, 2}, DType::F32), DType::I32); }});
}

TEST_CASE("ops: elementwise validation errors") {
  Graph g;
  Tensor a = g.input("a", {2, 3}, DType::F32);
  Tensor b = g.input("b", {4}, DType::F32);
  Tensor i = g.input("i", {2, 3}, DType::I32);
  CHECK_THROWS_WITH_AS(add(a, b), doctest::Contains("[binary.add]"), Error);
  CHECK_THROWS_WITH_AS(add(a, i), doctest::Contains("dtype mismatch"), Error);
  CHECK_THROWS_WITH_AS(exp(i), doctest::Contains("[unary.exp]"), Error);
  CHECK_THROWS_WITH_AS(where(a, a, a), doctest::Contains("[where]"), Error);
}

TEST_CASE("graph: hash-consing returns the same node") {
  Graph g;
  Tensor a = g.input("a", {2, 3}, DType::F32);
  Tensor b = g.input("b", {2, 3}, DType::F32);
  CHECK(add(a, b).id == add(a, b).id);
  CHECK(add(a, b).id != add(b, a).id);
  CHECK(g.constant({2}, {1.f, 2.f}).id == g.constant({2}, {1.f, 2.f}).id);
  CHECK(g.constant({2}, {1.f, 2.f}).id != g.constant({2}, {1.f, 3.f}).id);
  CHECK_THROWS_AS(g.input("a", {1}, DType::F32), Error);
}
