#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "tests/support/op_harness.h"

using namespace tessera;
using tessera::testing::Buffer;

namespace {

struct MatmulCase {
  Graph graph;
  Tensor out;
  DType dtype = DType::F32;
  std::vector<std::vector<std::byte>> inputs;  // a, b, dense over their full shapes
  std::vector<TensorView> views;
};

// matmul(a, b) of `dtype` over inputs filled with uniform values in [-1, 1].
void build(MatmulCase& c, const Shape& a_shape, const Shape& b_shape, std::mt19937_64& rng,
           DType dtype = DType::F32) {
  c.dtype = dtype;
  Tensor a = c.graph.input("a", a_shape, dtype);
  Tensor b = c.graph.input("b", b_shape, dtype);
  c.out = matmul(a, b);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : {a_shape, b_shape}) {
    c.inputs.emplace_back(static_cast<size_t>(dtype_bytes(dtype, shape_volume(s))));
    const TensorView view = dense_view(c.inputs.back().data(), dtype, Box::full(s));
    ref::for_each_index(Box::full(s), [&](const int64_t* i) { ref::store(view, i, u(rng)); });
    c.views.push_back(view);
  }
}

// Computes `box` of the matmul with `kernel` into a buffer holding only that box; the values as
// floats (half types widen exactly).
std::vector<float> run(const MatmulCase& c, KernelFn kernel, const Box& box) {
  std::vector<std::byte> out(static_cast<size_t>(dtype_bytes(c.dtype, box.volume())));
  TensorView view = dense_view(out.data(), c.dtype, box);
  absl::Status st = kernel(KernelCall{c.graph, c.graph.node(c.out.id), c.views, view, box});
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  std::vector<float> values;
  ref::for_each_index(box, [&](const int64_t* i) { values.push_back(static_cast<float>(ref::load(view, i))); });
  return values;
}

Shape random_shape(std::mt19937_64& rng, int rank, int64_t max_dim) {
  Shape s;
  for (int d = 0; d < rank; ++d)
    s.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(max_dim)) + 1);
  return s;
}

// Random matmul shapes with broadcast batch dims; widths cross the vector and chunk sizes.
void random_shapes(std::mt19937_64& rng, Shape& a, Shape& b) {
  const int64_t m = static_cast<int64_t>(rng() % 9) + 1, k = static_cast<int64_t>(rng() % 70),
                n = static_cast<int64_t>(rng() % 40) + 1;
  Shape batch = random_shape(rng, static_cast<int>(rng() % 3), 3);
  a = batch;
  b = batch;
  if (rng() % 3 == 0)
    b.clear();  // rank-2 b shared by every batch
  else if (!b.empty() && rng() % 2)
    b[0] = 1;  // broadcast batch dim
  a.push_back(m);
  a.push_back(k);
  b.push_back(k);
  b.push_back(rng() % 5 == 0 ? n + 1100 : n);  // some widths span two column chunks
}

}  // namespace

TEST_CASE("kernels: matmul is optimised for f32, f16 and bf16") {
  Graph g;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const std::string name = dtype_name(dtype);
    Tensor m = matmul(g.input("a" + name, {2, 3}, dtype), g.input("b" + name, {3, 4}, dtype));
    CHECK(static_cast<bool>(cpu::optimised_kernel(g, g.node(m.id))));
  }
}

TEST_CASE("kernels: f16 and bf16 matmul match the reference, sub-boxes bitwise") {
  // Float accumulation, one rounding to the half type at the end; the reference rounds its
  // double sum once: they differ by at most one half-type ulp plus the float error.
  const uint64_t seed = 13;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    const DType dtype = trial % 2 == 0 ? DType::F16 : DType::BF16;
    Shape a_shape, b_shape;
    random_shapes(rng, a_shape, b_shape);
    MatmulCase c;
    build(c, a_shape, b_shape, rng, dtype);
    CAPTURE(trial);
    CAPTURE(dtype_name(dtype));
    CAPTURE(shape_string(a_shape));
    CAPTURE(shape_string(b_shape));
    const Node& n = c.graph.node(c.out.id);
    const Box full = Box::full(n.shape);
    const KernelFn fast = cpu::optimised_kernel(c.graph, n);
    const std::vector<float> got = run(c, fast, full);
    const std::vector<float> ref = run(c, ref::reference_kernel(OpKind::Matmul), full);
    const double ulp = dtype == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - ref[i]) > 1e-6 * static_cast<double>(a_shape.back() + 1) + ulp * std::fabs(ref[i]) + 1e-7)
        FAIL("element ", i, ": optimised ", got[i], " vs reference ", ref[i]);
    for (int sub = 0; sub < 6; ++sub) {
      const Box box = tessera::testing::random_box(n.shape, rng);
      CAPTURE(box.to_string());
      const std::vector<float> part = run(c, fast, box);
      std::vector<float> expected;
      const TensorView full_view = dense_view(const_cast<float*>(got.data()), DType::F32, full);
      ref::for_each_index(box, [&](const int64_t* i) { expected.push_back(*full_view.at<const float>(i)); });
      CHECK(std::memcmp(part.data(), expected.data(), part.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("kernels: f32 matmul matches the reference within tolerance") {
  const uint64_t seed = 11;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 40; ++trial) {
    Shape a_shape, b_shape;
    random_shapes(rng, a_shape, b_shape);
    MatmulCase c;
    build(c, a_shape, b_shape, rng);
    CAPTURE(seed);
    CAPTURE(trial);
    CAPTURE(shape_string(a_shape));
    CAPTURE(shape_string(b_shape));
    const Node& n = c.graph.node(c.out.id);
    const Box full = Box::full(n.shape);
    std::vector<float> fast = run(c, cpu::optimised_kernel(c.graph, n), full);
    std::vector<float> ref = run(c, ref::reference_kernel(OpKind::Matmul), full);
    // Float accumulation of K products in [-1, 1]: error grows at most ~K * 2^-24.
    const double tolerance = 1e-6 * static_cast<double>(a_shape.back() + 1);
    for (size_t i = 0; i < fast.size(); ++i)
      if (std::fabs(fast[i] - ref[i]) > tolerance) {
        FAIL("element ", i, ": optimised ", fast[i], " vs reference ", ref[i]);
      }
  }
}

TEST_CASE("kernels: f32 matmul sub-boxes are bitwise equal to the full box") {
  const uint64_t seed = 12;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    Shape a_shape, b_shape;
    random_shapes(rng, a_shape, b_shape);
    MatmulCase c;
    build(c, a_shape, b_shape, rng);
    CAPTURE(seed);
    CAPTURE(trial);
    CAPTURE(shape_string(a_shape));
    CAPTURE(shape_string(b_shape));
    const Node& n = c.graph.node(c.out.id);
    KernelFn fast = cpu::optimised_kernel(c.graph, n);
    const Box full_box = Box::full(n.shape);
    std::vector<float> full = run(c, fast, full_box);
    TensorView full_view = dense_view(full.data(), DType::F32, full_box);
    for (int sub = 0; sub < 8; ++sub) {
      Box box = tessera::testing::random_box(n.shape, rng);
      CAPTURE(box.to_string());
      std::vector<float> part = run(c, fast, box);
      TensorView part_view = dense_view(part.data(), DType::F32, box);
      ref::for_each_index(box, [&](const int64_t* i) {
        const float x = *part_view.at<float>(i), y = *full_view.at<float>(i);
        if (std::memcmp(&x, &y, sizeof(float)) != 0)
          FAIL("sub-box value ", x, " differs from full-box value ", y);
      });
    }
  }
}

TEST_CASE("kernels: f32 matmul writes into a strided output view") {
  // The output buffer holds a larger extent than the box (as a session's kept buffer does).
  std::mt19937_64 rng(13);
  MatmulCase c;
  build(c, {2, 6, 5}, {5, 9}, rng);
  const Node& n = c.graph.node(c.out.id);
  std::vector<float> full = run(c, cpu::optimised_kernel(c.graph, n), Box::full(n.shape));
  std::vector<float> big(static_cast<size_t>(n.volume()), -7.0f);
  TensorView view = dense_view(big.data(), DType::F32, Box::full(n.shape));
  Box box{{1, 2}, {2, 5}, {3, 8}};
  REQUIRE(cpu::optimised_kernel(c.graph, n)(KernelCall{c.graph, n, c.views, view, box}).ok());
  for (size_t i = 0; i < big.size(); ++i) {
    int64_t index[3] = {static_cast<int64_t>(i) / 54, static_cast<int64_t>(i) / 9 % 6,
                        static_cast<int64_t>(i) % 9};
    CHECK(big[i] == (box.contains_point(index) ? full[i] : -7.0f));
  }
}
