// fused_elementwise: rules (sound and tight, with broadcasting inputs), validation errors,
// display name and hash-consing. Kernels: tests/kernels/fused_elementwise_test.cc.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/support/fused_programs.h"
#include "tests/support/op_harness.h"
#include "tests/support/rule_tightness.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::check_tightness;
using tessera::testing::fused_binary;
using tessera::testing::fused_unary;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

namespace {

// x [3,4], w [4], b [3,1], c []: silu(x * w + b) - c, then maximum with x.
std::vector<FusedInstr> affine_silu_program() {
  return {fused_binary(BinaryFn::Mul, 0, 1), fused_binary(BinaryFn::Add, 4, 2),
          fused_unary(UnaryFn::Silu, 5), fused_binary(BinaryFn::Sub, 6, 3),
          fused_binary(BinaryFn::Maximum, 7, 0)};
}

Tensor affine_silu(Graph& g) {
  const Tensor in[] = {g.input("x", {3, 4}, DType::F32), g.input("w", {4}, DType::F32),
                       g.input("b", {3, 1}, DType::F32), g.input("c", {}, DType::F32)};
  return fused_elementwise(in, affine_silu_program());
}

// Inputs that broadcast against each other into a larger output: a [2,1,3] and b [4,1] give
// [2,4,3] through exp(a) / (1 + b^2), pow'd by a; no input has the output's shape.
Tensor outer(Graph& g) {
  const Tensor in[] = {g.input("a", {2, 1, 3}, DType::F32), g.input("b", {4, 1}, DType::F32)};
  return fused_elementwise(in,
                           {fused_unary(UnaryFn::Exp, 0), fused_binary(BinaryFn::Mul, 1, 1),
                            fused_unary(UnaryFn::Abs, 3), fused_binary(BinaryFn::Add, 4, 2),
                            fused_binary(BinaryFn::Div, 2, 5), fused_binary(BinaryFn::Pow, 6, 0)});
}

}  // namespace

TEST_CASE("ops: fused_elementwise rules are sound, with broadcasting inputs") {
  check_rules(OpCase{"fused affine silu", affine_silu}, 1, 20);
  check_rules(OpCase{"fused outer", outer, {ValueRange{0.5, 2.0}, ValueRange{0.5, 2.0}}}, 2, 20);
  // Random programs over random broadcasting inputs.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    const int n_inputs = static_cast<int>(rng() % 4) + 1;
    const Shape out = {static_cast<int64_t>(rng() % 3) + 1, static_cast<int64_t>(rng() % 4) + 2,
                       static_cast<int64_t>(rng() % 5) + 1};
    const std::vector<Shape> shapes = testing::broadcast_input_shapes(out, n_inputs, rng);
    const std::vector<FusedInstr> program =
        testing::random_program(n_inputs, static_cast<int>(rng() % 8) + 1, rng);
    CAPTURE(trial);
    check_rules(OpCase{"fused random " + FusedElementwiseAttrs{program}.to_string(),
                       [&](Graph& g) {
                         std::vector<Tensor> in;
                         for (size_t k = 0; k < shapes.size(); ++k)
                           in.push_back(g.input("x" + std::to_string(k), shapes[k], DType::F32));
                         return fused_elementwise(in, program);
                       }},
                static_cast<uint64_t>(trial) + 10, 8);
  }
}

TEST_CASE("ops: fused_elementwise rules are tight") {
  check_tightness(OpCase{"fused affine silu", affine_silu});
  check_tightness(OpCase{"fused outer", outer, {ValueRange{0.5, 2.0}, ValueRange{0.5, 2.0}}});
}

TEST_CASE("ops: fused_elementwise display name and hash-consing") {
  Graph g;
  const Tensor x = g.input("x", {2, 3}, DType::F32), y = g.input("y", {3}, DType::F32);
  const Tensor in[] = {x, y};
  const std::vector<FusedInstr> program = {fused_binary(BinaryFn::Mul, 0, 1),
                                           fused_unary(UnaryFn::Exp, 2)};
  const Tensor f = fused_elementwise(in, program);
  CHECK(op_display_name(f.node()) == "fused_elementwise{mul(0,1),exp(2)}");
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.dtype() == DType::F32);
  CHECK(fused_elementwise(in, program).id == f.id);
  const Tensor other =
      fused_elementwise(in, {fused_binary(BinaryFn::Add, 0, 1), fused_unary(UnaryFn::Exp, 2)});
  CHECK(other.id != f.id);
  const Tensor swapped[] = {y, x};
  CHECK(
      fused_elementwise(swapped, {fused_binary(BinaryFn::Mul, 1, 0), fused_unary(UnaryFn::Exp, 2)})
          .id != f.id);
}

TEST_CASE("ops: fused_elementwise validation errors") {
  Graph g;
  const Tensor x = g.input("x", {2, 3}, DType::F32), y = g.input("y", {4}, DType::F32);
  const Tensor i = g.input("i", {2, 3}, DType::I32), h = g.input("h", {2, 3}, DType::F16);
  const Tensor x1[] = {x}, xy[] = {x, y}, xi[] = {x, i}, xh[] = {x, h};
  const FusedInstr exp0 = fused_unary(UnaryFn::Exp, 0);
  auto throws = [](auto&& build, const char* text) {
    CHECK_THROWS_WITH_AS(build(), doctest::Contains("[fused_elementwise]"), Error);
    CHECK_THROWS_WITH_AS(build(), doctest::Contains(text), Error);
  };
  throws([&] { return fused_elementwise({}, {exp0}); }, "no inputs");
  auto sum_all = [](int32_t n) {  // x_0 + x_1 + ... + x_{n-1}
    std::vector<FusedInstr> program;
    for (int32_t k = 1; k < n; ++k)
      program.push_back(fused_binary(BinaryFn::Add, k == 1 ? 0 : n + k - 2, k));
    return program;
  };
  const std::vector<Tensor> sixteen(16, x), seventeen(17, x);
  throws([&] { return fused_elementwise(seventeen, sum_all(17)); }, "expects 1..16 inputs, got 17");
  throws([&] { return fused_elementwise(xi, {fused_binary(BinaryFn::Add, 0, 1)}); },
         "input 1 is i32, not f32");
  throws([&] { return fused_elementwise(xh, {fused_binary(BinaryFn::Add, 0, 1)}); },
         "input 1 is f16, not f32");
  throws([&] { return fused_elementwise(x1, {}); }, "expects 1..64 instructions, got 0");
  std::vector<FusedInstr> long_chain = {exp0};
  for (int32_t j = 1; j < 65; ++j) long_chain.push_back(fused_unary(UnaryFn::Neg, j));
  throws([&] { return fused_elementwise(x1, long_chain); }, "expects 1..64 instructions, got 65");
  throws([&] { return fused_elementwise(x1, {fused_unary(UnaryFn::Exp, 1)}); }, "operand a = 1");
  throws([&] { return fused_elementwise(x1, {fused_unary(UnaryFn::Exp, -1)}); }, "operand a = -1");
  throws(
      [&] {
        return fused_elementwise(x1, {exp0, fused_binary(BinaryFn::Add, 1, 2)});
      },
      "instruction 1: operand b = 2");  // refers to itself
  throws(
      [&] {
        return fused_elementwise(x1, {exp0, fused_binary(BinaryFn::Add, 3, 0)});
      },
      "instruction 1: operand a = 3");  // refers forwards
  throws(
      [&] {
        return fused_elementwise(x1, {FusedInstr{OpKind::Unary, 0, 0, 0}});
      },
      "no operand b");
  throws([&] { return fused_elementwise(x1, {fused_binary(BinaryFn::Lt, 0, 0)}); },
         "comparison lt gives bool");
  throws([&] { return fused_elementwise(x1, {fused_binary(BinaryFn::Eq, 0, 0)}); },
         "comparison eq");
  throws(
      [&] {
        return fused_elementwise(x1, {FusedInstr{OpKind::Unary, 99, 0}});
      },
      "unknown unary function 99");
  throws(
      [&] {
        return fused_elementwise(x1, {FusedInstr{OpKind::Binary, -1, 0, 0}});
      },
      "unknown binary function");
  throws(
      [&] {
        return fused_elementwise(x1, {FusedInstr{OpKind::Matmul, 0, 0, 0}});
      },
      "kind must be unary or binary, not matmul");
  throws([&] { return fused_elementwise(xy, {fused_binary(BinaryFn::Add, 0, 1)}); },
         "instruction 0: shapes [2, 3] and [4] do not broadcast");
  throws([&] { return fused_elementwise(xy, {exp0}); }, "input 1 is unused");
  throws(
      [&] {
        return fused_elementwise(
            x1, {exp0, fused_unary(UnaryFn::Neg, 0), fused_unary(UnaryFn::Abs, 2)});
      },
      "instruction 0: its result is unused");
  // Valid neighbours of the cases above build.
  CHECK(fused_elementwise(sixteen, sum_all(16)).shape() == Shape{2, 3});
  long_chain.pop_back();
  CHECK(fused_elementwise(x1, long_chain).shape() == Shape{2, 3});
}
