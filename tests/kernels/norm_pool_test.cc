// The optimised group_norm, layer_norm, pool2d and nearest upsample on every instruction set:
// close to (or, for copies and max, equal to) the reference, bitwise box-independent, and the
// same bits through partial strided input views.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/ops.h"
#include "tests/kernels/kernel_fixture.h"
#include "tests/kernels/partial_views.h"

namespace tessera {
namespace {

using kernel_testing::OpFixture;

constexpr double kUlp = 0x1p-24;

// Statistics and the normalisation run in double (only the summation order differs from the
// reference), then one rounding to float: within an ulp of the reference's float, plus a
// cancellation term for outputs near zero.
double norm_tolerance(double reference) {
  return 2 * kUlp * std::fabs(reference) + 1e-9;
}

void check_all(const OpFixture& f, const kernel_testing::Tolerance& tolerance,
               std::mt19937_64& rng) {
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    CAPTURE(cpu::isa_name(isa));
    kernel_testing::check_close(f, isa, tolerance);
    kernel_testing::check_sub_boxes(f, isa, rng, 6);
    kernel_testing::check_partial_views(f, f.optimised(isa), rng, 3);
  }
}

// The norms' vector loops do the scalar code's operations in its order: every instruction set
// gives the portable kernel's bits.
void check_same_bits_on_every_isa(const OpFixture& f) {
  const Box full = Box::full(f.node().shape);
  const std::vector<float> portable = f.run(f.optimised(cpu::Isa::Portable), full);
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    CAPTURE(cpu::isa_name(isa));
    const std::vector<float> got = f.run(f.optimised(isa), full);
    CHECK(std::memcmp(got.data(), portable.data(), got.size() * sizeof(float)) == 0);
  }
}

Tensor maybe_param(Graph& g, const char* name, int64_t size, bool present) {
  return present ? g.input(name, {size}, DType::F32) : Tensor{};
}

}  // namespace

TEST_CASE("kernels: group_norm matches the reference, is box-independent and has the same bits on every instruction set") {
  const uint64_t seed = 101;
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{1, 8, 9, 13}, 2}, {{2, 6, 5, 7}, 3}, {{1, 12, 17, 3}, 12}, {{1, 5, 11, 19}, 1},
      {{2, 9, 31}, 3},    {{3, 10}, 5},      {{1, 4, 1, 1}, 2}, {{1, 16, 12, 21}, 4},  // the last: long runs
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& [shape, groups] = cases[k];
    CAPTURE(shape_string(shape));
    OpFixture f;
    Tensor x = f.graph.input("x", shape, DType::F32);
    f.out = group_norm(x, groups, maybe_param(f.graph, "w", shape[1], k % 3 != 1),
                       maybe_param(f.graph, "b", shape[1], k % 3 != 2), 1e-5);
    // An offset mean, as activations have: the two-pass variance must not cancel.
    f.prepare(rng, {{1.0, 3.0}, {0.5, 1.5}, {-1, 1}});
    check_all(
        f, [](int64_t, double ref) { return norm_tolerance(ref); }, rng);
    check_same_bits_on_every_isa(f);
  }
}

TEST_CASE("kernels: layer_norm matches the reference, is box-independent and has the same bits on every instruction set") {
  const uint64_t seed = 102;
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  const std::vector<Shape> shapes = {{7, 33}, {2, 3, 129}, {5, 1}, {1, 64}, {3, 2, 2, 17}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& shape = shapes[k];
    CAPTURE(shape_string(shape));
    OpFixture f;
    Tensor x = f.graph.input("x", shape, DType::F32);
    f.out = layer_norm(x, maybe_param(f.graph, "w", shape.back(), k % 3 != 1),
                       maybe_param(f.graph, "b", shape.back(), k % 3 != 2), 1e-6);
    f.prepare(rng, {{-3.0, 5.0}, {0.5, 1.5}, {-1, 1}});
    check_all(
        f, [](int64_t, double ref) { return norm_tolerance(ref); }, rng);
    check_same_bits_on_every_isa(f);
  }
}

TEST_CASE("kernels: pool2d max is exact (NaN included) and avg within the float sum bound") {
  const uint64_t seed = 103;
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  struct PoolCase {
    Shape shape;
    int64_t kernel, stride, padding;
  };
  const std::vector<PoolCase> cases = {
      {{1, 3, 9, 13}, 2, 2, 0},  {{2, 5, 11, 7}, 3, 2, 1}, {{1, 4, 8, 17}, 3, 1, 1},
      {{1, 2, 10, 10}, 4, 3, 2}, {{1, 1, 1, 5}, 1, 1, 0},
  };
  for (const PoolCase& c : cases) {
    for (PoolKind kind : {PoolKind::Max, PoolKind::Avg}) {
      CAPTURE(shape_string(c.shape));
      CAPTURE(c.kernel);
      OpFixture f;
      f.out = pool2d(f.graph.input("x", c.shape, DType::F32), kind, c.kernel, c.stride, c.padding);
      f.prepare(rng);
      if (kind == PoolKind::Max) {  // a NaN must propagate to every window holding it
        float* x = static_cast<float*>(static_cast<void*>(f.buffers[0].data()));
        x[std::min<int64_t>(5, shape_volume(c.shape) - 1)] = std::nanf("");
      }
      // avg: k^2 float additions of values in [-2, 2], then the division.
      const double bound =
          kind == PoolKind::Max ? 0.0 : (static_cast<double>(c.kernel * c.kernel) + 2) * 2 * kUlp;
      check_all(
          f, [&](int64_t, double) { return bound; }, rng);
    }
  }
}

TEST_CASE("kernels: upsample copies exactly for every dtype and box") {
  const uint64_t seed = 104;
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  for (DType dtype : {DType::F32, DType::F16, DType::I32, DType::I64, DType::Bool}) {
    for (int64_t scale : {1, 2, 3}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(scale);
      OpFixture f;
      const Shape shape = {2, 3, 5, 7};
      f.out = upsample_nearest(f.graph.input("x", shape, dtype), scale);
      f.prepare(rng, {{-100, 100}});
      const Node& n = f.node();
      const int64_t size = dtype_size(dtype);
      auto run = [&](KernelFn kernel, const Box& box, std::vector<std::byte>& out) {
        out.assign(static_cast<size_t>(box.volume() * size), std::byte{0});
        const TensorView view = dense_view(out.data(), dtype, box);
        REQUIRE(kernel(KernelCall{f.graph, n, f.views, view, box}).ok());
      };
      const Box full = Box::full(n.shape);
      std::vector<std::byte> want, got;
      run(ref::reference_kernel(OpKind::Upsample), full, want);
      for (cpu::Isa isa : kernel_testing::test_isas()) {
        const KernelFn fast = f.optimised(isa);
        run(fast, full, got);
        CHECK(got == want);
        for (int trial = 0; trial < 6; ++trial) {
          const Box box = testing::random_box(n.shape, rng);
          std::vector<std::byte> part, part_ref;
          run(fast, box, part);
          run(ref::reference_kernel(OpKind::Upsample), box, part_ref);
          CHECK(part == part_ref);
        }
        if (dtype == DType::F32) kernel_testing::check_partial_views(f, fast, rng, 3);
      }
    }
  }
}

TEST_CASE("kernels: norms, pool and upsample are optimised for the dtypes they cover only") {
  Graph g;
  Tensor h = g.input("h", {1, 4, 3, 3}, DType::F16);
  Tensor x = g.input("x", {1, 4, 3, 3}, DType::F32);
  const Tensor covered[] = {group_norm(x, 2, Tensor{}, Tensor{}, 1e-5),
                            layer_norm(x, Tensor{}, Tensor{}, 1e-5), pool2d(x, PoolKind::Avg, 2, 1),
                            upsample_nearest(h, 2)};
  const Tensor uncovered[] = {group_norm(h, 2, Tensor{}, Tensor{}, 1e-5),
                              pool2d(h, PoolKind::Max, 2, 1)};
  for (cpu::Isa isa : kernel_testing::test_isas()) {
    for (const Tensor& t : covered)
      CHECK(static_cast<bool>(cpu::optimised_kernel_for(g, g.node(t.id), isa)));
    for (const Tensor& t : uncovered)
      CHECK_FALSE(static_cast<bool>(cpu::optimised_kernel_for(g, g.node(t.id), isa)));
  }
}

}  // namespace tessera
