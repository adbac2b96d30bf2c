// Rope, rope_multi, conv2d, pool2d and upsample: rules by perturbation, reference values and
// validation.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tests/ops/nn_test_util.h"

using namespace tessera;
using namespace tessera::testing;

// ---- rope ------------------------------------------------------------------------------------

TEST_CASE("ops: rope rules in both modes with n_rot < D") {
  for (RopeMode mode : {RopeMode::HalfSplit, RopeMode::Interleaved}) {
    check_rules_and_reads(OpCase{"rope [2, 5, 3, 8] n_rot 6",
                                 [mode](Graph& g) {
                                   Tensor x = g.input("x", {2, 5, 3, 8}, DType::F32);
                                   return rope(x, g.input("pos", {5}, DType::I32), 6, 10000.0,
                                               mode);
                                 },
                                 {ValueRange{}, ValueRange{0, 50}}},
                          1, 30);
    check_rules_and_reads(OpCase{"rope f16 rank 3 i64 positions",
                                 [mode](Graph& g) {
                                   Tensor x = g.input("x", {6, 2, 10}, DType::F16);
                                   return rope(x, g.input("pos", {6}, DType::I64), 4, 500.0, mode,
                                               0.5);
                                 },
                                 {ValueRange{}, ValueRange{-8, 300}}},
                          2, 30);
    check_rules_and_reads(OpCase{"rope n_rot == D",
                                 [mode](Graph& g) {
                                   Tensor x = g.input("x", {4, 1, 6}, DType::F32);
                                   return rope(x, g.input("pos", {4}, DType::I32), 6, 10000.0,
                                               mode);
                                 },
                                 {ValueRange{}, ValueRange{0, 9}}},
                          3, 20);
  }
}

TEST_CASE("ops: rope at position 0 is the identity") {
  for (RopeMode mode : {RopeMode::HalfSplit, RopeMode::Interleaved}) {
    Graph g;
    Tensor x_in = g.input("x", {3, 2, 8}, DType::F32);
    Tensor y = rope(x_in, g.input("pos", {3}, DType::I32), 6, 10000.0, mode);
    std::vector<double> x = random_values(48, 7);
    CHECK(evaluate(g, y, {x, {0, 0, 0}}) == x);
  }
}

TEST_CASE("ops: rope rotates the pairs of each mode") {
  // One head, D = 6, n_rot = 4, position 1, base 100: theta_0 = 1, theta_1 = 100^(-1/2) = 0.1.
  std::vector<double> x = {1, 2, 3, 4, 5, 6};
  auto build = [](Graph& g, RopeMode mode, double freq_scale) {
    Tensor x_in = g.input("x", {1, 1, 6}, DType::F32);
    return rope(x_in, g.input("pos", {1}, DType::I32), 4, 100.0, mode, freq_scale);
  };
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  SUBCASE("half split pairs (i, i + 2)") {
    Graph g;
    Tensor y = build(g, RopeMode::HalfSplit, 1.0);
    check_close(evaluate(g, y, {x, {1}}),
                {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1, 5, 6});
  }
  SUBCASE("interleaved pairs (2i, 2i + 1)") {
    Graph g;
    Tensor y = build(g, RopeMode::Interleaved, 1.0);
    check_close(evaluate(g, y, {x, {1}}),
                {1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1, 5, 6});
  }
  SUBCASE("freq_scale multiplies the angle") {
    Graph g;
    Tensor y = build(g, RopeMode::HalfSplit, 0.5);
    check_close(evaluate(g, y, {x, {2}}),
                {1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1, 5, 6});
  }
}

TEST_CASE("ops: rope rules are exact on pairs and positions") {
  Graph g;
  Tensor pos = g.input("pos", {5}, DType::I32);
  Tensor x = g.input("x", {5, 3, 8}, DType::F32);
  Tensor half = rope(x, pos, 6, 10000.0, RopeMode::HalfSplit);
  Tensor inter = rope(x, pos, 6, 10000.0, RopeMode::Interleaved);
  // Column 1 pairs with 4 (half split) or 0 (interleaved); column 7 passes through.
  Region want(Box{{2, 3}, {0, 3}, {1, 2}});
  want.add(Box{{2, 3}, {0, 3}, {4, 5}});
  CHECK(forward_of(half, 0, Box{{2, 3}, {0, 3}, {1, 2}}) == want);
  CHECK(forward_of(inter, 0, Box{{2, 3}, {0, 3}, {1, 2}}) == Region(Box{{2, 3}, {0, 3}, {0, 2}}));
  CHECK(forward_of(half, 0, Box{{0, 5}, {1, 2}, {7, 8}}) == Region(Box{{0, 5}, {1, 2}, {7, 8}}));
  CHECK(forward_of(half, 1, Box{{3, 4}}) == Region(Box{{3, 4}, {0, 3}, {0, 6}}));
  CHECK(needed_of(half, Box{{1, 3}, {0, 1}, {2, 4}})[0] == Box{{1, 3}, {0, 1}, {0, 6}});
  CHECK(needed_of(inter, Box{{1, 3}, {0, 1}, {3, 5}})[0] == Box{{1, 3}, {0, 1}, {2, 6}});
  CHECK(needed_of(inter, Box{{1, 3}, {0, 1}, {3, 5}})[1] == Box{{1, 3}});
  CHECK(needed_of(inter, Box{{1, 3}, {0, 1}, {6, 8}})[1].empty());  // pass-through only
}

// ---- rope_multi ------------------------------------------------------------------------------

TEST_CASE("ops: rope_multi rules by perturbation") {
  check_rules_and_reads(OpCase{"rope_multi [2, 5, 3, 16] axes {4, 6, 2}",
                               [](Graph& g) {
                                 Tensor x = g.input("x", {2, 5, 3, 16}, DType::F32);
                                 return rope_multi(x, g.input("pos", {5, 3}, DType::I32),
                                                   {4, 6, 2}, 10000.0);
                               },
                               {ValueRange{}, ValueRange{0, 50}}},
                        1, 30);
  check_rules_and_reads(OpCase{"rope_multi f16 i64 positions, sum == D",
                               [](Graph& g) {
                                 Tensor x = g.input("x", {6, 2, 8}, DType::F16);
                                 return rope_multi(x, g.input("pos", {6, 2}, DType::I64), {2, 6},
                                                   100.0);
                               },
                               {ValueRange{}, ValueRange{-8, 300}}},
                        2, 30);
}

TEST_CASE("ops: rope_multi rotates interleaved pairs per axis") {
  // Axis 0 owns columns 0..3 (d = 4) at position 1: theta = 1 and 100^(-2/4) = 0.1. Axis 1 owns
  // columns 4, 5 (d = 2) at position 2: theta = 2. Columns 6, 7 pass through.
  Graph g;
  Tensor x = g.input("x", {1, 1, 8}, DType::F32);
  Tensor y = rope_multi(x, g.input("pos", {1, 2}, DType::I32), {4, 2}, 100.0);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  const double c2 = std::cos(2.0), s2 = std::sin(2.0);
  check_close(evaluate(g, y, {{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2}}),
              {1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1,
               5 * c2 - 6 * s2, 5 * s2 + 6 * c2, 7, 8});
  CHECK(op_display_name(y.node()) == "rope_multi{axes_dims=[4,2],base=100}");
}

TEST_CASE("ops: rope_multi rules are exact on pairs and position axes") {
  Graph g;
  Tensor pos = g.input("pos", {5, 3}, DType::I32);
  Tensor y = rope_multi(g.input("x", {5, 3, 16}, DType::F32), pos, {4, 6, 2}, 10000.0);
  // Columns: axis 0 [0, 4), axis 1 [4, 10), axis 2 [10, 12), pass-through [12, 16).
  CHECK(forward_of(y, 0, Box{{2, 3}, {0, 3}, {5, 6}}) == Region(Box{{2, 3}, {0, 3}, {4, 6}}));
  CHECK(forward_of(y, 0, Box{{0, 5}, {1, 2}, {11, 14}}) == Region(Box{{0, 5}, {1, 2}, {10, 14}}));
  CHECK(forward_of(y, 0, Box{{0, 1}, {0, 1}, {13, 15}}) == Region(Box{{0, 1}, {0, 1}, {13, 15}}));
  CHECK(forward_of(y, 1, Box{{3, 4}, {1, 2}}) == Region(Box{{3, 4}, {0, 3}, {4, 10}}));
  CHECK(forward_of(y, 1, Box{{0, 2}, {0, 3}}) == Region(Box{{0, 2}, {0, 3}, {0, 12}}));
  CHECK(needed_of(y, Box{{1, 3}, {0, 1}, {3, 5}})[0] == Box{{1, 3}, {0, 1}, {2, 6}});
  CHECK(needed_of(y, Box{{1, 3}, {0, 1}, {3, 5}})[1] == Box{{1, 3}, {0, 2}});
  CHECK(needed_of(y, Box{{1, 3}, {0, 1}, {10, 16}})[1] == Box{{1, 3}, {2, 3}});
  CHECK(needed_of(y, Box{{1, 3}, {0, 1}, {12, 16}})[1].empty());  // pass-through only
}

TEST_CASE("ops: rope_multi validation errors") {
  Graph g;
  Tensor x = g.input("x", {4, 2, 8}, DType::F32);
  Tensor pos = g.input("pos", {4, 2}, DType::I32);
  CHECK_THROWS_WITH_AS(rope_multi(g.input("x2", {4, 8}, DType::F32), pos, {4, 4}),
                       doctest::Contains("[rope_multi] x must have rank >= 3"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, g.input("pf", {4, 2}, DType::F32), {4, 4}),
                       doctest::Contains("[rope_multi] positions must be i32 or i64"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, pos, {2, 2, 2}),
                       doctest::Contains("[rope_multi] positions must have shape [4, 3]"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, pos, {3, 4}),
                       doctest::Contains("[rope_multi] axes_dims must be even"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, pos, {4, 6}),
                       doctest::Contains("[rope_multi] axes_dims [4,6] sum to 10"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, pos, {4, 4}, -1.0),
                       doctest::Contains("[rope_multi] base must be positive"), Error);
  CHECK_THROWS_WITH_AS(rope_multi(x, pos, {}),
                       doctest::Contains("[rope_multi] needs at least one axis"), Error);
  CHECK_NOTHROW(rope_multi(x, pos, {4, 2}));
}

// ---- conv2d ----------------------------------------------------------------------------------

TEST_CASE("ops: conv2d rules with stride, padding, dilation and groups") {
  const Conv2dParams strided{.stride_h = 2,
                             .stride_w = 2,
                             .pad_h = 1,
                             .pad_w = 1,
                             .dilation_h = 2,
                             .dilation_w = 2,
                             .groups = 2};
  check_rules_and_reads(OpCase{"conv2d s2 p1 d2 g2 bias", [&](Graph& g) {
                                 Tensor x = g.input("x", {2, 4, 9, 8}, DType::F32);
                                 Tensor w = g.input("w", {6, 2, 3, 3}, DType::F32);
                                 return conv2d(x, w, g.input("b", {6}, DType::F32), strided);
                               }});
  check_rules_and_reads(
      OpCase{"conv2d s2 p1 d2 g2 no bias", [&](Graph& g) {
               Tensor x = g.input("x", {2, 4, 9, 8}, DType::F32);
               return conv2d(x, g.input("w", {6, 2, 3, 3}, DType::F32), Tensor{}, strided);
             }});
  const Conv2dParams mixed{.stride_h = 1,
                           .stride_w = 2,
                           .pad_h = 2,
                           .pad_w = 0,
                           .dilation_h = 1,
                           .dilation_w = 3,
                           .groups = 1};
  check_rules_and_reads(OpCase{"conv2d per-axis parameters", [&](Graph& g) {
                                 Tensor x = g.input("x", {1, 3, 7, 10}, DType::F32);
                                 Tensor w = g.input("w", {2, 3, 2, 3}, DType::F32);
                                 return conv2d(x, w, g.input("b", {2}, DType::F32), mixed);
                               }});
  check_rules_and_reads(OpCase{"conv2d 4x4 tiles", [](Graph& g) {
                                 Tensor x = g.input("x", {1, 8, 9, 11}, DType::F32);
                                 Tensor w = g.input("w", {8, 8, 3, 3}, DType::F32);
                                 return conv2d(x, w, g.input("b", {8}, DType::F32),
                                               Conv2dParams{.pad_h = 1, .pad_w = 1, .tile = 4});
                               }});
  check_rules_and_reads(OpCase{"conv2d depthwise bf16", [](Graph& g) {
                                 Tensor x = g.input("x", {1, 4, 6, 6}, DType::BF16);
                                 Tensor w = g.input("w", {8, 1, 3, 3}, DType::BF16);
                                 return conv2d(x, w, g.input("b", {8}, DType::BF16),
                                               Conv2dParams{.pad_h = 1, .pad_w = 1, .groups = 4});
                               }});
}

TEST_CASE("ops: conv2d 1x1 equals a matmul over channels") {
  Graph g;
  Tensor x_in = g.input("x", {1, 3, 2, 2}, DType::F32);
  Tensor w_in = g.input("w", {2, 3, 1, 1}, DType::F32);
  Tensor y = conv2d(x_in, w_in, g.input("b", {2}, DType::F32));
  std::vector<double> x = random_values(12, 1), w = random_values(6, 2), b = random_values(2, 3);
  std::vector<double> want;
  for (int o = 0; o < 2; ++o)
    for (int p = 0; p < 4; ++p) {
      double acc = 0;
      for (int c = 0; c < 3; ++c)
        acc += w[static_cast<size_t>(o * 3 + c)] * x[static_cast<size_t>(c * 4 + p)];
      want.push_back(acc + b[static_cast<size_t>(o)]);
    }
  check_close(evaluate(g, y, {x, w, b}), want);
}

TEST_CASE("ops: conv2d hand-computed 3x3 with zero padding") {
  // A Sobel kernel over 1..9 (cross-correlation, as in PyTorch), plus bias 0.5.
  std::vector<double> sobel = {1, 0, -1, 2, 0, -2, 1, 0, -1};
  Graph g;
  Tensor x = g.input("x", {1, 1, 3, 3}, DType::F32);
  Tensor w = g.input("w", {1, 1, 3, 3}, DType::F32);
  Tensor b = g.input("b", {1}, DType::F32);
  Tensor same = conv2d(x, w, b, Conv2dParams{.pad_h = 1, .pad_w = 1});
  Tensor strided =
      conv2d(x, w, b, Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
  CHECK(same.shape() == Shape{1, 1, 3, 3});
  CHECK(evaluate(g, same, {iota(9), sobel, {0.5}}) ==
        std::vector<double>{-8.5, -5.5, 9.5, -19.5, -7.5, 20.5, -20.5, -5.5, 21.5});
  CHECK(evaluate(g, strided, {iota(9), sobel, {0.5}}) ==
        std::vector<double>{-8.5, 9.5, -20.5, 21.5});
}

TEST_CASE("ops: conv2d dilation reads every other pixel") {
  Graph g;
  Tensor x = g.input("x", {1, 1, 5, 5}, DType::F32);
  Tensor y = conv2d(x, g.input("w", {1, 1, 3, 3}, DType::F32), Tensor{},
                    Conv2dParams{.dilation_h = 2, .dilation_w = 2});
  // Taps at rows/cols 0, 2, 4 of 1..25: 1 3 5 / 11 13 15 / 21 23 25, weights 1..9.
  const double want = 1 * 1 + 2 * 3 + 3 * 5 + 4 * 11 + 5 * 13 + 6 * 15 + 7 * 21 + 8 * 23 + 9 * 25;
  CHECK(evaluate(g, y, {iota(25), iota(9)}) == std::vector<double>{want});
}

TEST_CASE("ops: conv2d forward rule follows the receptive field") {
  Graph g;
  Tensor x = g.input("x", {1, 4, 8, 8}, DType::F32);
  Tensor w = g.input("w", {6, 2, 3, 3}, DType::F32);
  Tensor same = conv2d(x, w, Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1, .groups = 2});
  // A pixel of channel 1 (group 0): a 3x3 neighbourhood of the group's 3 output channels.
  CHECK(forward_of(same, 0, Box{{0, 1}, {1, 2}, {4, 5}, {4, 5}}) ==
        Region(Box{{0, 1}, {0, 3}, {3, 6}, {3, 6}}));
  Tensor strided =
      conv2d(x, w, Tensor{},
             Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 2});
  // Output o reads rows 2o - 1 .. 2o + 1: row 4 only reaches o = 2, row 3 reaches o = 1 and 2.
  CHECK(forward_of(strided, 0, Box{{0, 1}, {2, 4}, {4, 5}, {3, 4}}) ==
        Region(Box{{0, 1}, {3, 6}, {2, 3}, {1, 3}}));
  CHECK(forward_of(strided, 1, Box{{4, 5}, {0, 2}, {0, 3}, {0, 3}}) ==
        Region(Box{{0, 1}, {4, 5}, {0, 4}, {0, 4}}));
  std::vector<Box> need = needed_of(strided, Box{{0, 1}, {2, 4}, {1, 3}, {0, 1}});
  CHECK(need[0] == Box{{0, 1}, {0, 4}, {1, 6}, {0, 2}});
  CHECK(need[1] == Box{{2, 4}, {0, 2}, {0, 3}, {0, 3}});
}

TEST_CASE("ops: conv2d with 4x4 tiles aligns its rules to the tiles") {
  Graph g;
  Tensor x = g.input("x", {1, 8, 10, 11}, DType::F32);
  Tensor w = g.input("w", {8, 8, 3, 3}, DType::F32);
  Tensor tiled = conv2d(x, w, Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1, .tile = 4});
  Tensor plain = conv2d(x, w, Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1});
  CHECK(conv2d_output_tile(g, tiled.node()) == 4);
  CHECK(conv2d_output_tile(g, plain.node()) == 1);
  // A pixel reaches outputs 4 .. 6: the tiles [4, 8); at the far corner, outputs 8 .. 10 (9 .. 10
  // wide): the last tiles, clamped to the 10 x 11 output.
  CHECK(forward_of(tiled, 0, Box{{0, 1}, {2, 3}, {5, 6}, {5, 6}}) == Region(Box{{0, 1}, {0, 8}, {4, 8}, {4, 8}}));
  CHECK(forward_of(tiled, 0, Box{{0, 1}, {2, 3}, {9, 10}, {10, 11}}) ==
        Region(Box{{0, 1}, {0, 8}, {8, 10}, {8, 11}}));
  CHECK(forward_of(plain, 0, Box{{0, 1}, {2, 3}, {5, 6}, {5, 6}}) == Region(Box{{0, 1}, {0, 8}, {4, 7}, {4, 7}}));
  // Output (5, 1) needs its tile's window: rows 3 .. 8 and columns 0 .. 4 (padding below 0).
  CHECK(needed_of(tiled, Box{{0, 1}, {0, 2}, {5, 6}, {1, 2}})[0] == Box{{0, 1}, {0, 8}, {3, 9}, {0, 5}});
  CHECK(needed_of(plain, Box{{0, 1}, {0, 2}, {5, 6}, {1, 2}})[0] == Box{{0, 1}, {0, 8}, {4, 7}, {0, 3}});
  // Convs the 4x4 kernel does not take keep the receptive field: stride 2, 7 input channels, f16.
  Tensor strided =
      conv2d(x, w, Tensor{}, Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .tile = 4});
  Tensor narrow = conv2d(g.input("x7", {1, 7, 10, 11}, DType::F32), g.input("w7", {8, 7, 3, 3}, DType::F32),
                         Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1, .tile = 4});
  Tensor half = conv2d(g.input("xh", {1, 8, 10, 11}, DType::F16), g.input("wh", {8, 8, 3, 3}, DType::F16),
                       Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1, .tile = 4});
  for (const Tensor& t : {strided, narrow, half}) CHECK(conv2d_output_tile(g, t.node()) == 1);
  CHECK(forward_of(narrow, 0, Box{{0, 1}, {2, 3}, {5, 6}, {5, 6}}) == Region(Box{{0, 1}, {0, 8}, {4, 7}, {4, 7}}));
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, Conv2dParams{.pad_h = 1, .pad_w = 1, .tile = 2}),
                       doctest::Contains("[conv2d] tile must be 1 or 4, got 2"), Error);
}

// ---- pool2d ----------------------------------------------------------------------------------

TEST_CASE("ops: pool2d rules for max and avg with padding") {
  for (PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
    check_rules_and_reads(
        OpCase{"pool2d k3 s2 p1", [kind](Graph& g) {
                 return pool2d(g.input("x", {2, 3, 7, 8}, DType::F32), kind, 3, 2, 1);
               }});
    check_rules_and_reads(
        OpCase{"pool2d k2 s2", [kind](Graph& g) {
                 return pool2d(g.input("x", {1, 2, 6, 5}, DType::F16), kind, 2, 2);
               }});
    check_rules_and_reads(
        OpCase{"pool2d k3 s1 p2", [kind](Graph& g) {
                 return pool2d(g.input("x", {1, 2, 5, 5}, DType::F32), kind, 3, 1, 2);
               }});
  }
}

TEST_CASE("ops: pool2d hand-computed values") {
  Graph g;
  Tensor x = g.input("x", {1, 1, 4, 4}, DType::F32);
  CHECK(evaluate(g, pool2d(x, PoolKind::Max, 2, 2), {iota(16)}) ==
        std::vector<double>{6, 8, 14, 16});
  CHECK(evaluate(g, pool2d(x, PoolKind::Avg, 2, 2), {iota(16)}) ==
        std::vector<double>{3.5, 5.5, 11.5, 13.5});
  // Padding: max ignores it, avg counts it (divisor 9 everywhere).
  CHECK(evaluate(g, pool2d(x, PoolKind::Max, 3, 2, 1), {iota(16)}) ==
        std::vector<double>{6, 8, 14, 16});
  check_close(evaluate(g, pool2d(x, PoolKind::Avg, 3, 2, 1), {iota(16)}),
              {14.0 / 9, 30.0 / 9, 57.0 / 9, 11});
  // Max over negative values is not confused by the zero padding.
  std::vector<double> negative = iota(16, -20);
  CHECK(evaluate(g, pool2d(x, PoolKind::Max, 3, 2, 1), {negative}) ==
        std::vector<double>{-15, -13, -7, -5});
}

// ---- upsample --------------------------------------------------------------------------------

TEST_CASE("ops: upsample rules x2 and x3") {
  check_rules_and_reads(OpCase{"upsample x2", [](Graph& g) {
                                 return upsample_nearest(g.input("x", {2, 3, 4, 5}, DType::F32), 2);
                               }});
  check_rules_and_reads(OpCase{"upsample x3 rank 3", [](Graph& g) {
                                 return upsample_nearest(g.input("x", {3, 2, 3}, DType::F16), 3);
                               }});
  check_rules_and_reads(OpCase{"upsample x2 i64",
                               [](Graph& g) {
                                 return upsample_nearest(g.input("x", {3, 2}, DType::I64), 2);
                               }},
                        3, 10);
}

TEST_CASE("ops: upsample repeats each pixel") {
  Graph g;
  Tensor y = upsample_nearest(g.input("x", {1, 2, 2}, DType::F32), 2);
  CHECK(y.shape() == Shape{1, 4, 4});
  CHECK(evaluate(g, y, {{1, 2, 3, 4}}) ==
        std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  CHECK(forward_of(y, 0, Box{{0, 1}, {1, 2}, {0, 2}}) == Region(Box{{0, 1}, {2, 4}, {0, 4}}));
  CHECK(needed_of(y, Box{{0, 1}, {1, 3}, {3, 4}})[0] == Box{{0, 1}, {0, 2}, {1, 2}});
  Tensor z = upsample_nearest(g.input("z", {2, 2}, DType::F32), 3);
  CHECK(needed_of(z, Box{{2, 4}, {5, 6}})[0] == Box{{0, 2}, {1, 2}});
}

// ---- validation ------------------------------------------------------------------------------

TEST_CASE("ops: rope validation errors") {
  Graph g;
  Tensor x = g.input("x", {4, 2, 8}, DType::F32);
  Tensor pos = g.input("pos", {4}, DType::I32);
  CHECK_THROWS_WITH_AS(rope(g.input("x2", {4, 8}, DType::F32), pos, 4, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] x must have rank >= 3"), Error);
  CHECK_THROWS_WITH_AS(rope(g.input("xi", {4, 2, 8}, DType::I32), pos, 4, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] x must be float"), Error);
  CHECK_THROWS_WITH_AS(rope(x, g.input("pf", {4}, DType::F32), 4, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] positions must be i32 or i64"), Error);
  CHECK_THROWS_WITH_AS(rope(x, g.input("p5", {5}, DType::I32), 4, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] positions must have shape [4]"), Error);
  CHECK_THROWS_WITH_AS(rope(x, g.input("p2", {4, 1}, DType::I32), 4, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] positions must have shape [4]"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 3, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] n_rot must be even"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 10, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] n_rot must be even"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 0, 1e4, RopeMode::HalfSplit),
                       doctest::Contains("[rope] n_rot must be even"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 4, 0.0, RopeMode::HalfSplit),
                       doctest::Contains("[rope] base must be positive"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 4, 1e4, static_cast<RopeMode>(7)),
                       doctest::Contains("[rope] unknown mode"), Error);
  CHECK_THROWS_WITH_AS(rope(x, pos, 4, 1e4, RopeMode::HalfSplit, NAN),
                       doctest::Contains("[rope] freq_scale"), Error);
  CHECK_NOTHROW(rope(x, pos, 8, 1e4, RopeMode::Interleaved));
}

TEST_CASE("ops: conv2d validation errors") {
  Graph g;
  Tensor x = g.input("x", {1, 4, 5, 5}, DType::F32);
  Tensor w = g.input("w", {6, 2, 3, 3}, DType::F32);
  const Conv2dParams g2{.groups = 2};
  auto with = [](auto change) {
    Conv2dParams p{.groups = 2};
    change(p);
    return p;
  };
  CHECK_THROWS_WITH_AS(conv2d(g.input("x3", {4, 5, 5}, DType::F32), w, Tensor{}, g2),
                       doctest::Contains("[conv2d] x must be [N, C, H, W]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, g.input("w3", {6, 2, 3}, DType::F32), Tensor{}, g2),
                       doctest::Contains("[conv2d] weight must be [O, C / groups, KH, KW]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(g.input("xi", {1, 4, 5, 5}, DType::I32),
                              g.input("wi", {6, 2, 3, 3}, DType::I32), Tensor{}, g2),
                       doctest::Contains("[conv2d] x must be float"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, g.input("wh", {6, 2, 3, 3}, DType::F16), Tensor{}, g2),
                       doctest::Contains("[conv2d] dtype mismatch"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, g.input("bh", {6}, DType::F16), g2),
                       doctest::Contains("[conv2d] dtype mismatch"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, g.input("w1", {6, 1, 3, 3}, DType::F32), Tensor{},
                              with([](auto& p) { p.groups = 3; })),
                       doctest::Contains("[conv2d] input channels 4 not divisible by groups 3"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, g.input("w5", {5, 2, 3, 3}, DType::F32), Tensor{}, g2),
                       doctest::Contains("[conv2d] output channels 5 not divisible by groups 2"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, Conv2dParams{}),
                       doctest::Contains("input channels per group"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, g.input("b5", {5}, DType::F32), g2),
                       doctest::Contains("[conv2d] bias must be [6]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, with([](auto& p) { p.stride_w = 0; })),
                       doctest::Contains("[conv2d] stride must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, with([](auto& p) { p.pad_h = -1; })),
                       doctest::Contains("[conv2d] padding must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, with([](auto& p) { p.dilation_h = 0; })),
                       doctest::Contains("[conv2d] dilation must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, with([](auto& p) { p.groups = 0; })),
                       doctest::Contains("[conv2d] groups must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w, Tensor{}, with([](auto& p) { p.dilation_w = 3; })),
                       doctest::Contains("[conv2d] input [1, 4, 5, 5] too small"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, g.input("w0", {6, 2, 0, 3}, DType::F32), Tensor{}, g2),
                       doctest::Contains("[conv2d] kernel must be at least 1x1"), Error);
  Tensor in[] = {x, w};
  CHECK_THROWS_WITH_AS(g.add_node(OpKind::Conv2d, in, Pool2dAttrs{}),
                       doctest::Contains("[conv2d] given the attributes of pool2d"), Error);
  CHECK_NOTHROW(conv2d(x, w, Tensor{}, with([](auto& p) { p.dilation_w = 2; })));
}

TEST_CASE("ops: pool2d validation errors") {
  Graph g;
  Tensor x = g.input("x", {1, 2, 4, 4}, DType::F32);
  CHECK_THROWS_WITH_AS(pool2d(g.input("x3", {2, 4, 4}, DType::F32), PoolKind::Max, 2, 2),
                       doctest::Contains("[pool2d] x must be [N, C, H, W]"), Error);
  CHECK_THROWS_WITH_AS(pool2d(g.input("xi", {1, 2, 4, 4}, DType::I32), PoolKind::Max, 2, 2),
                       doctest::Contains("[pool2d] x must be float"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, PoolKind::Max, 0, 2),
                       doctest::Contains("[pool2d] kernel must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, PoolKind::Avg, 2, 0),
                       doctest::Contains("[pool2d] stride must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, PoolKind::Avg, 2, 2, -1),
                       doctest::Contains("[pool2d] padding must be in [0, kernel)"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, PoolKind::Max, 2, 2, 2),
                       doctest::Contains("[pool2d] padding must be in [0, kernel)"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, PoolKind::Max, 5, 1),
                       doctest::Contains("[pool2d] input [1, 2, 4, 4] too small"), Error);
  CHECK_THROWS_WITH_AS(pool2d(x, static_cast<PoolKind>(5), 2, 2),
                       doctest::Contains("[pool2d] unknown kind"), Error);
}

TEST_CASE("ops: upsample validation errors") {
  Graph g;
  CHECK_THROWS_WITH_AS(upsample_nearest(g.input("x", {2, 3}, DType::F32), 0),
                       doctest::Contains("[upsample] scale must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(upsample_nearest(g.input("x1", {3}, DType::F32), 2),
                       doctest::Contains("[upsample] x must have rank >= 2"), Error);
  CHECK_THROWS_WITH_AS(
      upsample_nearest(g.input("big", {1, int64_t{1} << 62}, DType::Bool), 4),
      doctest::Contains("[upsample] output of [1, 4611686018427387904] x4 overflows"), Error);
}
