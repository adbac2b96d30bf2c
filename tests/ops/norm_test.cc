#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "engine/session.h"
#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::check_rules;
using tessera::testing::OpCase;
using tessera::testing::ValueRange;

namespace {

// Reads the whole of `y` after writing each named f32 input, with the reference kernels.
std::vector<float> evaluate(Graph& g, Tensor y,
                            const std::vector<std::pair<std::string, std::vector<float>>>& inputs) {
  g.output("y", y);
  GraphSession s(g, SessionOptions{.backend = BackendKind::Reference});
  for (const auto& [name, values] : inputs)
    s.write<float>(name, Box::full(g.node(g.find_input(name)).shape), values);
  return s.read<float>("y", Box::full(y.shape()));
}

void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
}

// Optional parameter: a graph input of shape [size] when `present`, absent otherwise.
Tensor maybe_param(Graph& g, bool present, const char* name, int64_t size, DType dtype) {
  return present ? g.input(name, {size}, dtype) : Tensor{};
}

}  // namespace

TEST_CASE("ops: rms_norm rules and kernels") {
  uint64_t seed = 500;
  for (bool with_weight : {false, true}) {
    for (const Shape& shape : {Shape{6}, Shape{4, 5}, Shape{2, 3, 4}}) {
      check_rules(OpCase{"rms_norm",
                         [=](Graph& g) {
                           Tensor x = g.input("x", shape, DType::F32);
                           return rms_norm(
                               x, maybe_param(g, with_weight, "w", shape.back(), DType::F32), 1e-6);
                         }},
                  ++seed, 15);
    }
    check_rules(OpCase{"rms_norm f16",
                       [=](Graph& g) {
                         Tensor x = g.input("x", {3, 8}, DType::F16);
                         return rms_norm(x, maybe_param(g, with_weight, "w", 8, DType::F16), 1e-5);
                       }},
                ++seed, 15);
  }
}

TEST_CASE("ops: layer_norm rules and kernels, with and without weight and bias") {
  uint64_t seed = 600;
  for (bool with_weight : {false, true})
    for (bool with_bias : {false, true})
      for (const Shape& shape : {Shape{5}, Shape{3, 6}, Shape{2, 2, 4}}) {
        check_rules(OpCase{"layer_norm",
                           [=](Graph& g) {
                             Tensor x = g.input("x", shape, DType::F32);
                             const int64_t d = shape.back();
                             return layer_norm(x, maybe_param(g, with_weight, "w", d, DType::F32),
                                               maybe_param(g, with_bias, "b", d, DType::F32), 1e-5);
                           }},
                    ++seed, 15);
      }
  check_rules(OpCase{"layer_norm bf16",
                     [](Graph& g) {
                       Tensor x = g.input("x", {4, 8}, DType::BF16);
                       return layer_norm(x, g.input("w", {8}, DType::BF16),
                                         g.input("b", {8}, DType::BF16), 1e-5);
                     }},
              ++seed, 15);
}

TEST_CASE("ops: group_norm rules and kernels, with and without weight and bias") {
  uint64_t seed = 700;
  struct Config {
    Shape shape;
    int64_t groups;
  };
  const Config configs[] = {
      {{2, 6, 3, 2}, 3}, {{2, 6, 4}, 2}, {{3, 4}, 2}, {{2, 4, 3}, 1}, {{1, 4, 2, 2}, 4}};
  for (bool with_weight : {false, true})
    for (bool with_bias : {false, true})
      for (const Config& c : configs) {
        check_rules(OpCase{"group_norm",
                           [=](Graph& g) {
                             Tensor x = g.input("x", c.shape, DType::F32);
                             const int64_t channels = c.shape[1];
                             return group_norm(
                                 x, c.groups,
                                 maybe_param(g, with_weight, "w", channels, DType::F32),
                                 maybe_param(g, with_bias, "b", channels, DType::F32), 1e-5);
                           }},
                    ++seed, 12);
      }
}

TEST_CASE("ops: norm rules are exact on the structured cases") {
  Graph g;
  Tensor x = g.input("x", {4, 8}, DType::F32);
  Tensor w = g.input("w", {8}, DType::F32);
  Tensor b = g.input("b", {8}, DType::F32);
  const Node& ln = g.node(layer_norm(x, w, b, 1e-5).id);
  const OpDef& def = op_def(ln.kind);
  Region out(2);
  def.forward(g, ln, 0, Box{{1, 2}, {3, 4}}, out);
  CHECK(out == Region(Box{{1, 2}, {0, 8}}));
  out.clear();
  def.forward(g, ln, 2, Box{{2, 5}}, out);
  CHECK(out == Region(Box{{0, 4}, {2, 5}}));
  std::array<Box, 3> needed;
  def.needed(g, ln, Box{{1, 3}, {2, 4}}, needed);
  CHECK(needed[0] == Box{{1, 3}, {0, 8}});
  CHECK(needed[1] == Box{{2, 4}});
  CHECK(needed[2] == Box{{2, 4}});

  Tensor xs = g.input("xs", {2, 6, 5}, DType::F32);
  const Node& gn = g.node(group_norm(xs, 3, Tensor{}, g.input("gb", {6}, DType::F32), 1e-5).id);
  out = Region(3);
  op_def(gn.kind).forward(g, gn, 0, Box{{1, 2}, {3, 4}, {2, 3}}, out);
  CHECK(out == Region(Box{{1, 2}, {2, 4}, {0, 5}}));
  out.clear();
  op_def(gn.kind).forward(g, gn, 1, Box{{3, 5}}, out);
  CHECK(out == Region(Box{{0, 2}, {3, 5}, {0, 5}}));
  std::array<Box, 2> gn_needed;
  op_def(gn.kind).needed(g, gn, Box{{0, 1}, {1, 3}, {4, 5}}, gn_needed);
  CHECK(gn_needed[0] == Box{{0, 1}, {0, 4}, {0, 5}});
  CHECK(gn_needed[1] == Box{{1, 3}});
}

TEST_CASE("ops: norm reference values") {
  const std::vector<float> x = {1, 2, 3, 4};
  {
    Graph g;
    Tensor y = rms_norm(g.input("x", {4}, DType::F32), Tensor{}, 0.0);
    const double s = 1.0 / std::sqrt(7.5);
    check_close(evaluate(g, y, {{"x", x}}), {s, 2 * s, 3 * s, 4 * s});
  }
  {
    Graph g;
    Tensor y = rms_norm(g.input("x", {2, 2}, DType::F32), g.input("w", {2}, DType::F32), 0.5);
    // Rows [1, 2] (mean square 2.5) and [3, 4] (12.5), plus eps 0.5; weight [2, -1].
    const double a = 1.0 / std::sqrt(3.0), b = 1.0 / std::sqrt(13.0);
    check_close(evaluate(g, y, {{"x", x}, {"w", {2, -1}}}), {2 * a, -2 * a, 6 * b, -4 * b});
  }
  {
    Graph g;
    Tensor y = layer_norm(g.input("x", {4}, DType::F32), Tensor{}, Tensor{}, 0.0);
    const double s = 1.0 / std::sqrt(1.25);  // biased variance of 1..4
    check_close(evaluate(g, y, {{"x", x}}), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s});
  }
  {
    Graph g;
    Tensor y = layer_norm(g.input("x", {4}, DType::F32), g.input("w", {4}, DType::F32),
                          g.input("b", {4}, DType::F32), 0.0);
    const double s = 1.0 / std::sqrt(1.25);
    check_close(evaluate(g, y, {{"x", x}, {"w", {1, 2, 1, 2}}, {"b", {0, 0, 1, 1}}}),
                {-1.5 * s, -1.0 * s, 0.5 * s + 1, 3.0 * s + 1});
  }
  {
    // Bias only: it is the second input even though the weight is absent.
    Graph g;
    Tensor y =
        layer_norm(g.input("x", {2}, DType::F32), Tensor{}, g.input("b", {2}, DType::F32), 0.0);
    check_close(evaluate(g, y, {{"x", {3, 5}}, {"b", {10, 20}}}), {9, 21});
  }
  {
    // x [1, 4, 2], 2 groups: group 0 holds 1..4, group 1 is constant (normalises to 0 + bias).
    Graph g;
    Tensor y = group_norm(g.input("x", {1, 4, 2}, DType::F32), 2, g.input("w", {4}, DType::F32),
                          g.input("b", {4}, DType::F32), 1e-5);
    const double s = 1.0 / std::sqrt(1.25 + 1e-5);
    check_close(
        evaluate(g, y,
                 {{"x", {1, 2, 3, 4, 10, 10, 10, 10}}, {"w", {1, 2, 3, 4}}, {"b", {0, 0, 7, 8}}}),
        {-1.5 * s, -0.5 * s, 1.0 * s, 3.0 * s, 7, 7, 8, 8});
  }
}

TEST_CASE("ops: norm validation errors") {
  Graph g;
  Tensor x = g.input("x", {2, 4}, DType::F32);
  Tensor xi = g.input("xi", {2, 4}, DType::I32);
  Tensor s = g.input("s", {}, DType::F32);
  Tensor w4 = g.input("w4", {4}, DType::F32);
  Tensor w3 = g.input("w3", {3}, DType::F32);
  Tensor w4h = g.input("w4h", {4}, DType::F16);
  Tensor w22 = g.input("w22", {2, 2}, DType::F32);
  Tensor img = g.input("img", {2, 6, 3}, DType::F32);
  Tensor c6 = g.input("c6", {6}, DType::F32);

  CHECK_THROWS_WITH_AS(rms_norm(xi, Tensor{}, 1e-5),
                       doctest::Contains("[rmsnorm] requires a float input"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(s, Tensor{}, 1e-5),
                       doctest::Contains("[rmsnorm] requires rank >= 1"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, w3, 1e-5),
                       doctest::Contains("[rmsnorm] weight shape [3] must be [4]"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, w22, 1e-5), doctest::Contains("[rmsnorm] weight shape"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, w4h, 1e-5), doctest::Contains("[rmsnorm] weight dtype f16"),
                       Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, w4, -1.0),
                       doctest::Contains("[rmsnorm] eps must be finite and >= 0"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(x, w4, NAN), doctest::Contains("[rmsnorm] eps"), Error);
  CHECK_THROWS_WITH_AS(rms_norm(Tensor{}, w4, 1e-5), doctest::Contains("[rmsnorm] empty tensor"),
                       Error);
  Tensor x_only[] = {x};
  CHECK_THROWS_WITH_AS(g.add_node(x_only, RmsNormAttrs{.eps = -1.0}),
                       doctest::Contains("[rmsnorm] eps must be finite"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(OpKind::RmsNorm, x_only, LayerNormAttrs{}),
                       doctest::Contains("[rmsnorm] given the attributes of layernorm"), Error);

  CHECK_THROWS_WITH_AS(layer_norm(xi, Tensor{}, Tensor{}, 1e-5),
                       doctest::Contains("[layernorm] requires a float"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(s, Tensor{}, Tensor{}, 1e-5),
                       doctest::Contains("[layernorm] requires rank"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, w3, Tensor{}, 1e-5),
                       doctest::Contains("[layernorm] weight shape"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, w4, w3, 1e-5),
                       doctest::Contains("[layernorm] bias shape [3] must be [4]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, Tensor{}, w4h, 1e-5),
                       doctest::Contains("[layernorm] bias dtype"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, w4, w4, -0.1), doctest::Contains("[layernorm] eps"), Error);
  Tensor x_w[] = {x, w4};
  CHECK_THROWS_WITH_AS(g.add_node(x_w, LayerNormAttrs{.has_weight = true, .has_bias = true}),
                       doctest::Contains("[layernorm] presence flags disagree"), Error);
  CHECK_THROWS_WITH_AS(g.add_node(x_w, LayerNormAttrs{}),
                       doctest::Contains("[layernorm] presence flags disagree"), Error);

  CHECK_THROWS_WITH_AS(
      group_norm(g.input("ii", {2, 6, 3}, DType::I32), 3, Tensor{}, Tensor{}, 1e-5),
      doctest::Contains("[groupnorm] requires a float"), Error);
  CHECK_THROWS_WITH_AS(group_norm(c6, 3, Tensor{}, Tensor{}, 1e-5),
                       doctest::Contains("[groupnorm] requires x of shape"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 0, Tensor{}, Tensor{}, 1e-5),
                       doctest::Contains("[groupnorm] groups must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 4, Tensor{}, Tensor{}, 1e-5),
                       doctest::Contains("[groupnorm] 4 groups do not divide 6"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 3, w4, Tensor{}, 1e-5),
                       doctest::Contains("[groupnorm] weight shape [4] must be [6]"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 3, c6, w4, 1e-5),
                       doctest::Contains("[groupnorm] bias shape"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 3, g.input("c6h", {6}, DType::F16), Tensor{}, 1e-5),
                       doctest::Contains("[groupnorm] weight dtype"), Error);
  CHECK_THROWS_WITH_AS(group_norm(img, 3, c6, c6, -1e-3), doctest::Contains("[groupnorm] eps"),
                       Error);
  Tensor img_only[] = {img};
  CHECK_THROWS_WITH_AS(g.add_node(img_only, GroupNormAttrs{.groups = 0}),
                       doctest::Contains("[groupnorm] groups must be >= 1"), Error);
  CHECK_NOTHROW(group_norm(img, 3, c6, c6, 1e-5));
  CHECK_NOTHROW(layer_norm(x, Tensor{}, w4, 0.0));
}
