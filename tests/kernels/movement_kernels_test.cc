// Optimised slice, concat (bit-exact copies) and rope_multi against the reference kernels, on
// every instruction set: equal values (copies) or within the rounding bound (rope_multi), and
// random sub-boxes bitwise equal to the full box, through strided output views too.
#include <doctest/doctest.h>

#include <random>

#include "engine/ops.h"
#include "tests/kernels/kernel_fixture.h"
#include "tests/kernels/partial_views.h"

namespace tessera {
namespace {

using kernel_testing::OpFixture;

void check(OpFixture& f, std::mt19937_64& rng, double tolerance) {
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    kernel_testing::check_close(f, isa, [&](int64_t, double ref) { return tolerance * (1.0 + std::fabs(ref)); });
    kernel_testing::check_sub_boxes(f, isa, rng, 8);
  }
}

TEST_CASE("kernels: slice copies match the reference, any axis and step") {
  std::mt19937_64 rng(81);
  for (int trial = 0; trial < 16; ++trial) {
    const Shape shape{static_cast<int64_t>(rng() % 5) + 2, static_cast<int64_t>(rng() % 6) + 3, static_cast<int64_t>(rng() % 40) + 5};
    const int64_t axis = static_cast<int64_t>(rng() % 3);
    const int64_t dim = shape[static_cast<size_t>(axis)];
    const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(dim / 2 + 1));
    const int64_t step = static_cast<int64_t>(rng() % 3) + 1;
    CAPTURE(trial);
    OpFixture f;
    f.out = slice(f.graph.input("x", shape, DType::F32), axis, start, dim, step);
    f.prepare(rng);
    check(f, rng, 0);
  }
}

TEST_CASE("kernels: concat copies match the reference on every axis") {
  std::mt19937_64 rng(82);
  for (int64_t axis = 0; axis < 3; ++axis) {
    OpFixture f;
    std::vector<Tensor> parts;
    for (int k = 0; k < 3; ++k) {
      Shape shape{3, 4, 9};
      shape[static_cast<size_t>(axis)] = static_cast<int64_t>(k) + 2;
      parts.push_back(f.graph.input("x" + std::to_string(k), shape, DType::F32));
    }
    f.out = concat(parts, axis);
    f.prepare(rng);
    check(f, rng, 0);
  }
}

TEST_CASE("kernels: concat of feature maps copies whole channels, sub-boxes and strided views alike") {
  // NCHW maps (a dense block's concat along channels) and rank 1: the kernel copies each
  // input's part as runs merged over the inner axes both views hold contiguously (whole channel
  // planes), else row by row; inputs given through padded or strided partial views, outputs
  // through a strided view (check_sub_boxes), and every axis.
  std::mt19937_64 rng(83);
  for (int64_t axis = 0; axis < 4; ++axis) {
    CAPTURE(axis);
    OpFixture f;
    std::vector<Tensor> parts;
    for (int k = 0; k < 3; ++k) {
      Shape shape{2, 5, 7, 9};
      shape[static_cast<size_t>(axis)] = static_cast<int64_t>(rng() % 4) + 1;
      parts.push_back(f.graph.input("x" + std::to_string(k), shape, DType::F32));
    }
    f.out = concat(parts, axis);
    f.prepare(rng);
    check(f, rng, 0);
    for (cpu::Isa isa : kernel_testing::test_isas()) kernel_testing::check_partial_views(f, f.optimised(isa), rng, 8);
  }
  OpFixture f;
  f.out = concat(std::vector<Tensor>{f.graph.input("a", {5}, DType::F32), f.graph.input("b", {11}, DType::F32)}, 0);
  f.prepare(rng);
  check(f, rng, 0);
}

TEST_CASE("kernels: rope_multi matches the reference and is box-independent") {
  // cos and sin in double rounded to float, two float products and a sum of values in [-2, 2].
  std::mt19937_64 rng(83);
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{8, 8, 8, 8}, std::vector<int64_t>{2, 6, 4}}) {
    OpFixture f;
    Tensor x = f.graph.input("x", {7, 3, 36}, DType::F32);
    Tensor pos = f.graph.input("pos", {7, static_cast<int64_t>(axes.size())}, DType::I32);
    f.out = rope_multi(x, pos, axes, 2000.0);
    f.prepare(rng, {{-2, 2}, {0, 60}});
    check(f, rng, 1e-6);
  }
}

}  // namespace
}  // namespace tessera
