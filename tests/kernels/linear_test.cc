#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/quant.h"
#include "tests/kernels/kernel_fixture.h"
#include "tests/support/quant_blocks.h"
#include "tests/support/scoped_env.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;

namespace {

// Weight bytes of `dtype` for an [n, k] matrix: random quantised blocks, or floats in [-1, 1].
std::vector<uint8_t> random_weights(DType dtype, int64_t n, int64_t k, std::mt19937_64& rng) {
  if (is_quantized(dtype)) return testing::random_quantized(dtype, n, k, rng);
  std::vector<uint8_t> bytes(static_cast<size_t>(n * k * dtype_size(dtype)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n * k; ++i) {
    const float v = u(rng);
    if (dtype == DType::F32) {
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = dtype == DType::F16 ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

struct LinearCase {
  OpFixture f;
  std::vector<uint8_t> weights;
  Shape x_shape;
  int64_t n = 0, k = 0;
  bool valid = true;  // false when the op definition rejects this weight dtype for f32 x
};

void build(LinearCase& c, DType dtype, const Shape& x_shape, int64_t n, std::mt19937_64& rng) {
  c.x_shape = x_shape;
  c.k = x_shape.back();
  c.n = n;
  c.weights = random_weights(dtype, n, c.k, rng);
  Tensor x = c.f.graph.input("x", x_shape, DType::F32);
  Tensor w =
      c.f.graph.constant({n, c.k}, dtype, std::as_bytes(std::span<const uint8_t>(c.weights)));
  try {
    c.f.out = linear(x, w);
  } catch (const Error&) {
    c.valid = false;
    return;
  }
  c.f.prepare(rng, {testing::ValueRange{-1.0, 1.0}});
}

// Error bound of a float dot product of K terms over 8 lanes (ceil(K / 8) additions per lane,
// 3 in the horizontal sum, one rounding of each dequantised weight), with a factor 2 of margin:
// (K / 8 + 6) * 2^-23 * sum_k |x_k w_k|, the weights dequantised by the reference dequantisers.
std::vector<double> tolerances(const LinearCase& c) {
  const DType dtype = c.f.graph.node(c.f.node().inputs[1]).dtype;
  std::vector<float> w(static_cast<size_t>(c.n * c.k));
  quant::dequantize_row(dtype, c.weights.data(), w.data(), c.n * c.k);
  const auto* x = reinterpret_cast<const float*>(c.f.buffers[0].data());
  const int64_t rows = shape_volume(c.x_shape) / std::max<int64_t>(c.k, 1);
  std::vector<double> tol(static_cast<size_t>(rows * c.n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < c.n; ++j) {
      double magnitude = 0;
      for (int64_t i = 0; i < c.k; ++i)
        magnitude += std::fabs(double{x[r * c.k + i]} * w[j * c.k + i]);
      tol[r * c.n + j] = (static_cast<double>(c.k) / 8 + 6) * 0x1p-23 * magnitude + 1e-30;
    }
  return tol;
}

Shape random_x_shape(std::mt19937_64& rng, int64_t k) {
  Shape s;
  if (rng() % 3 == 0) s.push_back(static_cast<int64_t>(rng() % 3) + 1);  // a batch dim
  s.push_back(static_cast<int64_t>(rng() % 9) + 1);
  s.push_back(k);
  return s;
}

int64_t random_k(std::mt19937_64& rng, DType dtype) {
  const int64_t block = dtype_block_size(dtype);
  if (block == 1) return static_cast<int64_t>(rng() % 100) + 1;  // crosses 8- and 32-wide tails
  return block * (static_cast<int64_t>(rng() % (block == 32 ? 8 : 3)) + 1);
}

constexpr DType kWeightDTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                   DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                   DType::Q4_K, DType::Q5_K, DType::Q6_K};

}  // namespace

TEST_CASE("kernels: linear is optimised for f32 x with every supported weight dtype") {
  Graph g;
  Tensor x = g.input("x", {2, 64}, DType::F32);
  std::mt19937_64 rng(1);
  Tensor x256 = g.input("x256", {2, 256}, DType::F32);
  for (DType dtype : testing::kQuantizedDTypes) {
    std::vector<uint8_t> w = testing::random_quantized(dtype, 3, 256, rng);
    Tensor y =
        linear(x256, g.constant({3, 256}, dtype, std::as_bytes(std::span<const uint8_t>(w))));
    CHECK(static_cast<bool>(cpu::optimised_kernel(g, y.node())));
  }
  Tensor f32 = linear(x, g.input("w", {5, 64}, DType::F32));
  CHECK(static_cast<bool>(cpu::optimised_kernel(g, f32.node())));
  Tensor f16 = linear(g.input("xh", {2, 64}, DType::F16), g.input("wh", {5, 64}, DType::F16));
  CHECK_FALSE(
      static_cast<bool>(cpu::optimised_kernel(g, f16.node())));  // f16 x: the reference runs
}

TEST_CASE("kernels: linear matches the reference within the float dot-product bound") {
  // The f32-activation path (linear_q8_test.cc checks the integer path).
  const testing::ScopedEnv precise("TESSERA_LINEAR", "f32");
  const uint64_t seed = 21;
  std::mt19937_64 rng(seed);
  for (DType dtype : kWeightDTypes) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t k = random_k(rng, dtype);
      const int64_t n = static_cast<int64_t>(rng() % 40) + 1;
      LinearCase c;
      build(c, dtype, random_x_shape(rng, k), n, rng);
      if (!c.valid) {
        MESSAGE("linear rejects f32 x with ", std::string(dtype_name(dtype)), " weights; skipped");
        break;
      }
      CAPTURE(seed);
      CAPTURE(trial);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(shape_string(c.x_shape));
      CAPTURE(n);
      const std::vector<double> tol = tolerances(c);
      for (cpu::Isa isa : kernel_testing::test_isas())
        kernel_testing::check_close(c.f, isa,
                                    [&](int64_t i, double) { return tol[static_cast<size_t>(i)]; });
    }
  }
}

TEST_CASE("kernels: linear sub-boxes are bitwise equal to the full box") {
  const uint64_t seed = 22;
  std::mt19937_64 rng(seed);
  for (DType dtype : kWeightDTypes) {
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t k = random_k(rng, dtype);
      // Widths up to 70 cross the 16-column items and the 4- and 2-column tiles.
      const int64_t n = static_cast<int64_t>(rng() % 70) + 1;
      LinearCase c;
      build(c, dtype, random_x_shape(rng, k), n, rng);
      if (!c.valid) break;
      CAPTURE(seed);
      CAPTURE(trial);
      CAPTURE(std::string(dtype_name(dtype)));
      CAPTURE(shape_string(c.x_shape));
      for (cpu::Isa isa : kernel_testing::test_isas())
        kernel_testing::check_sub_boxes(c.f, isa, rng);
    }
  }
}

TEST_CASE("kernels: linear gives the same bits for prefill-sized and one-row boxes") {
  // The decode case: one row against 128 rows (4-row tiles) at a model shape.
  std::mt19937_64 rng(23);
  for (DType dtype : {DType::Q4_1, DType::Q4_K, DType::Q6_K, DType::Q8_0}) {
    LinearCase c;
    build(c, dtype, {130, 512}, 48, rng);
    CAPTURE(std::string(dtype_name(dtype)));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      const KernelFn fast = c.f.optimised(isa);
      const std::vector<float> full = c.f.run(fast, Box{{0, 130}, {0, 48}});
      for (int64_t row : {0, 1, 63, 127, 129}) {
        const std::vector<float> one = c.f.run(fast, Box{{row, row + 1}, {0, 48}});
        CHECK(std::memcmp(one.data(), full.data() + row * 48, 48 * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("kernels: linear reads a non-contiguous x like a contiguous one") {
  std::mt19937_64 rng(24);
  for (DType dtype : {DType::F32, DType::Q4_0, DType::Q5_K}) {
    LinearCase c;
    const int64_t m = 5, k = dtype == DType::F32 ? 37 : 256;
    build(c, dtype, {m, k}, 9, rng);
    CAPTURE(std::string(dtype_name(dtype)));
    // The same x stored transposed: element (i, j) at j * m + i.
    const auto* x = reinterpret_cast<const float*>(c.f.buffers[0].data());
    std::vector<float> transposed(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) transposed[j * m + i] = x[i * k + j];
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      const KernelFn fast = c.f.optimised(isa);
      const Box full = Box::full(c.f.node().shape);
      const std::vector<float> expected = c.f.run(fast, full);
      OpFixture strided_inputs;
      std::vector<TensorView> views = c.f.views;
      views[0].data = transposed.data();
      views[0].strides[0] = 1;
      views[0].strides[1] = m;
      std::vector<float> result(static_cast<size_t>(full.volume()));
      TensorView out = dense_view(result.data(), DType::F32, full);
      REQUIRE(fast(KernelCall{c.f.graph, c.f.node(), views, out, full}).ok());
      CHECK(std::memcmp(result.data(), expected.data(), result.size() * sizeof(float)) == 0);
    }
  }
}
