#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "tests/kernels/kernel_fixture.h"

using namespace tessera;
using tessera::kernel_testing::OpFixture;
using tessera::testing::ValueRange;

namespace {

constexpr double kUlp = 0x1p-23;  // relative size of one float ulp, at most

Shape random_shape(std::mt19937_64& rng, int max_rank = 3, int64_t max_last = 70) {
  Shape s;
  const int rank = static_cast<int>(rng() % static_cast<uint64_t>(max_rank)) + 1;
  for (int d = 0; d + 1 < rank; ++d) s.push_back(static_cast<int64_t>(rng() % 4) + 1);
  s.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(max_last)) + 1);
  return s;
}

struct UnaryCase {
  UnaryFn fn;
  const char* name;
  ValueRange range;
  double relative;   // tolerance in units of |reference|
  double per_input;  // plus this times |x| (absolute error of 1 + erf / 1 + tanh in gelu)
};

// Exact functions (one IEEE operation, or none) get 0; the rest a few ulp of their
// polynomial / library approximations, gelu an absolute term from the erf / tanh
// approximation's absolute error (1.5e-7 for erf, a few 1e-8 for tanh) times 0.5 |x|.
const UnaryCase kUnaryCases[] = {
    {UnaryFn::Neg, "neg", {-10, 10}, 0, 0},
    {UnaryFn::Abs, "abs", {-10, 10}, 0, 0},
    {UnaryFn::Relu, "relu", {-10, 10}, 0, 0},
    {UnaryFn::Floor, "floor", {-10, 10}, 0, 0},
    {UnaryFn::Ceil, "ceil", {-10, 10}, 0, 0},
    {UnaryFn::Round, "round", {-10, 10}, 0, 0},
    {UnaryFn::Sqrt, "sqrt", {0, 100}, 0, 0},
    {UnaryFn::Reciprocal, "reciprocal", {-10, 10}, 0, 0},
    {UnaryFn::Rsqrt, "rsqrt", {0.001, 100}, 2 * kUlp, 0},
    {UnaryFn::Exp, "exp", {-80, 80}, 4 * kUlp, 0},
    {UnaryFn::Sigmoid, "sigmoid", {-20, 20}, 8 * kUlp, 0},
    {UnaryFn::Tanh, "tanh", {-10, 10}, 8 * kUlp, 0},
    {UnaryFn::Silu, "silu", {-20, 20}, 8 * kUlp, 0},
    {UnaryFn::GeluTanh, "gelu_tanh", {-10, 10}, 8 * kUlp, 1e-7},
    {UnaryFn::GeluErf, "gelu_erf", {-10, 10}, 8 * kUlp, 2e-7},
    {UnaryFn::Erf, "erf", {-4, 4}, 8 * kUlp, 0},
};

// NaN, infinities, signed zeros, and values near the ends of exp's range.
const float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           0.0f,
                           -0.0f,
                           88.5f,
                           89.0f,
                           -87.0f,
                           -200.0f,
                           1e-30f,
                           -1e-30f,
                           0.62f,
                           0.63f,
                           3.4e38f};

void build_unary(OpFixture& f, const UnaryCase& c, const Shape& shape, std::mt19937_64& rng) {
  f.out = unary(c.fn, f.graph.input("x", shape, DType::F32));
  f.prepare(rng, {c.range});
}

kernel_testing::Tolerance unary_tolerance(const OpFixture& f, const UnaryCase& c) {
  const auto* x = reinterpret_cast<const float*>(f.buffers[0].data());
  return [x, c](int64_t i, double ref) {
    return c.relative * std::fabs(ref) + c.per_input * std::fabs(x[i]) + 1e-37;
  };
}

// Binary operand shapes that broadcast to a random output shape (dims set to 1, leading dims
// dropped), so rows read a broadcast vector, a broadcast value or a full row.
void random_broadcast(std::mt19937_64& rng, Shape& a, Shape& b) {
  const Shape out = random_shape(rng, 4);
  for (Shape* s : {&a, &b}) {
    *s = out;
    for (int64_t& d : *s)
      if (rng() % 3 == 0) d = 1;
    const size_t drop = rng() % 3 == 0 ? rng() % s->size() : 0;
    s->erase(s->begin(), s->begin() + static_cast<std::ptrdiff_t>(drop));
  }
}

}  // namespace

TEST_CASE("kernels: unary matches the reference within per-function tolerances") {
  const uint64_t seed = 41;
  std::mt19937_64 rng(seed);
  for (const UnaryCase& c : kUnaryCases) {
    for (int trial = 0; trial < 4; ++trial) {
      OpFixture f;
      build_unary(f, c, random_shape(rng), rng);
      CAPTURE(c.name);
      CAPTURE(trial);
      for (cpu::Isa isa : kernel_testing::test_isas())
        kernel_testing::check_close(f, isa, unary_tolerance(f, c));
    }
    OpFixture f;
    build_unary(f, c, {static_cast<int64_t>(std::size(kSpecials))}, rng);
    std::memcpy(f.buffers[0].data(), kSpecials, sizeof(kSpecials));
    CAPTURE(c.name);
    for (cpu::Isa isa : kernel_testing::test_isas())
      kernel_testing::check_close(f, isa, [&](int64_t i, double ref) {
        // Special inputs: exact results must match; near overflow a few ulp.
        return std::isfinite(kSpecials[i]) ? 16 * kUlp * std::fabs(ref) + 1e-37 : 0.0;
      });
  }
}

TEST_CASE("kernels: unary sub-boxes are bitwise equal to the full box") {
  std::mt19937_64 rng(42);
  for (const UnaryCase& c : kUnaryCases) {
    OpFixture f;
    build_unary(f, c, random_shape(rng), rng);
    CAPTURE(c.name);
    for (cpu::Isa isa : kernel_testing::test_isas())
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
  }
}

TEST_CASE("kernels: binary is exact (like the reference) with broadcasting, and box-independent") {
  // One IEEE operation per element: the reference's double result rounds to the same float.
  const uint64_t seed = 43;
  std::mt19937_64 rng(seed);
  for (BinaryFn fn : {BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div, BinaryFn::Minimum,
                      BinaryFn::Maximum}) {
    for (int trial = 0; trial < 12; ++trial) {
      Shape a, b;
      random_broadcast(rng, a, b);
      OpFixture f;
      Tensor lhs = f.graph.input("a", a, DType::F32);
      f.out = binary(fn, lhs, f.graph.input("b", b, DType::F32));
      f.prepare(rng);
      if (trial == 0) {  // NaN must win in minimum / maximum, as in the reference
        reinterpret_cast<float*>(f.buffers[0].data())[0] = std::numeric_limits<float>::quiet_NaN();
      }
      CAPTURE(static_cast<int>(fn));
      CAPTURE(shape_string(a));
      CAPTURE(shape_string(b));
      for (cpu::Isa isa : kernel_testing::test_isas()) {
        kernel_testing::check_close(f, isa, [](int64_t, double) { return 0.0; });
        kernel_testing::check_sub_boxes(f, isa, rng, 4);
      }
    }
  }
}

TEST_CASE("kernels: rms_norm matches the reference and is box-independent") {
  // Errors are multiplicative: the sum of squares over D in 8 lanes ((D / 8 + 4) roundings),
  // the square root and division in double, two multiplies: (D / 8 + 10) ulp relative.
  const uint64_t seed = 44;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 24; ++trial) {
    const Shape shape = random_shape(rng, 3, 300);
    const bool weighted = trial % 3 != 0;
    OpFixture f;
    Tensor x = f.graph.input("x", shape, DType::F32);
    f.out = rms_norm(x, weighted ? f.graph.input("w", {shape.back()}, DType::F32) : Tensor{}, 1e-5);
    f.prepare(rng);
    CAPTURE(shape_string(shape));
    const double relative = (static_cast<double>(shape.back()) / 8 + 10) * kUlp;
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(
          f, isa, [&](int64_t, double ref) { return relative * std::fabs(ref) + 1e-37; });
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
    }
  }
}

TEST_CASE("kernels: rope matches the reference and is box-independent") {
  // cos and sin are computed in double and rounded to float; each output is two float products
  // and a sum of x values in [-2, 2]: |error| <= 4 * 2^-24 * (|x_a| + |x_b|) < 1e-6.
  const uint64_t seed = 45;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 24; ++trial) {
    Shape shape;
    if (rng() % 3 == 0) shape.push_back(2);
    const int64_t t = static_cast<int64_t>(rng() % 12) + 1, h = static_cast<int64_t>(rng() % 4) + 1;
    const int64_t d = 2 * (static_cast<int64_t>(rng() % 40) + 1);
    const int64_t n_rot =
        rng() % 3 == 0 ? 2 * (static_cast<int64_t>(rng() % static_cast<uint64_t>(d / 2)) + 1) : d;
    shape.push_back(t);
    shape.push_back(h);
    shape.push_back(d);
    const RopeMode mode = trial % 2 == 0 ? RopeMode::HalfSplit : RopeMode::Interleaved;
    OpFixture f;
    Tensor x = f.graph.input("x", shape, DType::F32);
    Tensor positions = f.graph.input("pos", {t}, trial % 4 < 2 ? DType::I32 : DType::I64);
    f.out =
        rope(x, positions, n_rot, trial % 3 == 0 ? 1e6 : 10000.0, mode, trial % 5 == 0 ? 0.5 : 1.0);
    f.prepare(rng, {{-2.0, 2.0}, {0, 4000}});
    CAPTURE(shape_string(shape));
    CAPTURE(n_rot);
    CAPTURE(static_cast<int>(mode));
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      kernel_testing::check_close(f, isa, [](int64_t, double) { return 1e-6; });
      kernel_testing::check_sub_boxes(f, isa, rng, 6);
    }
  }
}

TEST_CASE("kernels: rope and rms_norm give the same bits on every path") {
  // The AVX2 rope rotates whole contiguous rows eight lanes at a time and keeps its cos/sin
  // table per thread between calls; rms_norm scales contiguous rows eight at a time. Both must
  // give the portable path's bits: real head sizes in both modes (rows long enough for the
  // vector loops), partial rotation, and nodes of different attributes run alternately (the
  // thread's table must follow them).
  if (!cpu::isa_supported(cpu::Isa::Avx2)) {
    MESSAGE("skipped: this CPU has no AVX2");
    return;
  }
  std::mt19937_64 rng(46);
  struct Case {
    int64_t heads, d, n_rot;
    RopeMode mode;
    double base;
  };
  std::vector<std::unique_ptr<OpFixture>> fixtures;
  for (const Case& c : {Case{9, 64, 64, RopeMode::Interleaved, 10000.0}, Case{4, 256, 256, RopeMode::HalfSplit, 1e6},
                        Case{3, 64, 32, RopeMode::HalfSplit, 10000.0}, Case{2, 80, 48, RopeMode::Interleaved, 500.0},
                        Case{2, 24, 24, RopeMode::HalfSplit, 10000.0}}) {
    auto f = std::make_unique<OpFixture>();
    Tensor x = f->graph.input("x", {5, c.heads, c.d}, DType::F32);
    Tensor positions = f->graph.input("pos", {5}, DType::I32);
    f->out = rope(x, positions, c.n_rot, c.base, c.mode, 1.0);
    f->prepare(rng, {{-2.0, 2.0}, {0, 4000}});
    fixtures.push_back(std::move(f));
  }
  for (int round = 0; round < 2; ++round)
    for (const auto& f : fixtures) {
      CAPTURE(shape_string(f->node().shape));
      const Box full = Box::full(f->node().shape);
      const std::vector<float> vector = f->run(f->optimised(cpu::Isa::Avx2), full);
      const std::vector<float> scalar = f->run(f->optimised(cpu::Isa::Portable), full);
      CHECK(std::memcmp(vector.data(), scalar.data(), vector.size() * sizeof(float)) == 0);
      // One row alone (a decode step) after the others.
      const Box row{{4, 5}, {0, f->node().shape[1]}, {0, f->node().shape[2]}};
      const std::vector<float> one = f->run(f->optimised(cpu::Isa::Avx2), row);
      CHECK(std::memcmp(one.data(), scalar.data() + 4 * one.size(), one.size() * sizeof(float)) == 0);
    }
  // rms_norm: the sums of squares differ between paths (FMA against multiply then add), the
  // scaling must not: on the same x, the weighted output is the unweighted one times w, one
  // float product per element, on each path.
  for (int64_t width : {576, 640, 20, 7}) {
    for (cpu::Isa isa : kernel_testing::test_isas()) {
      CAPTURE(width);
      const std::string isa_label = cpu::isa_name(isa);
      CAPTURE(isa_label);
      OpFixture plain, weighted;
      std::mt19937_64 same(47);
      plain.out = rms_norm(plain.graph.input("x", {3, width}, DType::F32), Tensor{}, 1e-6);
      plain.prepare(same);
      same.seed(47);
      const Tensor wx = weighted.graph.input("x", {3, width}, DType::F32);  // x first: filled first
      weighted.out = rms_norm(wx, weighted.graph.input("w", {width}, DType::F32), 1e-6);
      weighted.prepare(same);
      const Box full = Box::full(plain.node().shape);
      const std::vector<float> y = plain.run(plain.optimised(isa), full);
      const std::vector<float> yw = weighted.run(weighted.optimised(isa), full);
      const float* w = static_cast<const float*>(weighted.views[1].data);
      int mismatches = 0;
      for (size_t i = 0; i < y.size(); ++i)
        if (!(yw[i] == y[i] * w[i % static_cast<size_t>(width)])) ++mismatches;
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("kernels: cast between float dtypes equals the reference bit for bit") {
  // Values that exercise rounding: ties to even at half and bf16 precision, half subnormals and
  // the smallest ones that round to zero, overflow to infinity, infinities, NaNs with payloads,
  // signed zeros; then random values over a wide range. Rows of 37 (odd tails), contiguous and
  // through a strided input view, on every instruction set, full box and a sub-box.
  std::vector<float> special = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6.1e-5f, 5.96e-8f,
                                2.98e-8f, 2.9e-8f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256,
                                std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), 1e-40f};
  uint32_t payload_nan = 0x7fc12345u;
  float nan_with_payload;
  std::memcpy(&nan_with_payload, &payload_nan, 4);
  special.push_back(nan_with_payload);
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<float> exponent(-30.0f, 20.0f);
  std::vector<float> values = special;
  while (values.size() < 5 * 37) values.push_back((rng() % 2 ? 1.0f : -1.0f) * std::exp2(exponent(rng)));
  const Shape shape = {5, 37};
  for (DType in : {DType::F32, DType::F16, DType::BF16})
    for (DType out : {DType::F32, DType::F16, DType::BF16}) {
      if (in == out) continue;
      CAPTURE(dtype_name(in));
      CAPTURE(dtype_name(out));
      Graph g;
      Tensor x = g.input("x", shape, in);
      Tensor y = cast(x, out);
      // The input in its dtype, stored twice as wide (the strided view reads every other element).
      const int in_size = dtype_size(in), out_size = dtype_size(out);
      std::vector<std::byte> dense(values.size() * static_cast<size_t>(in_size));
      std::vector<std::byte> wide(2 * dense.size());
      TensorView dense_in = dense_view(dense.data(), in, Box::full(shape));
      for (int64_t i = 0; i < Box::full(shape).volume(); ++i) {
        const int64_t index[2] = {i / 37, i % 37};
        ref::store(dense_in, index, values[static_cast<size_t>(i)]);
        std::memcpy(wide.data() + 2 * i * in_size, dense.data() + i * in_size, static_cast<size_t>(in_size));
      }
      TensorView strided_in = dense_view(wide.data(), in, Box::full(shape));
      for (auto& stride : strided_in.strides) stride *= 2;
      auto run = [&](const KernelFn& kernel, const TensorView& input, const Box& box) {
        std::vector<std::byte> result(static_cast<size_t>(box.volume() * out_size));
        const TensorView views[1] = {input};
        absl::Status st = kernel(KernelCall{g, y.node(), views, dense_view(result.data(), out, box), box});
        REQUIRE(st.ok());
        return result;
      };
      const Box full = Box::full(shape), part{{1, 4}, {3, 30}};
      const std::vector<std::byte> want = run(ref::reference_kernel(OpKind::Cast), dense_in, full);
      const std::vector<std::byte> want_part = run(ref::reference_kernel(OpKind::Cast), dense_in, part);
      for (cpu::Isa isa : kernel_testing::test_isas()) {
        CAPTURE(cpu::isa_name(isa));
        const KernelFn kernel = cpu::optimised_kernel_for(g, y.node(), isa);
        REQUIRE(static_cast<bool>(kernel));
        CHECK(run(kernel, dense_in, full) == want);
        CHECK(run(kernel, strided_in, full) == want);
        CHECK(run(kernel, dense_in, part) == want_part);
      }
    }
}
