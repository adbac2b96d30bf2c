// cast to and from q8_0: ggml's block quantisation along the last axis, computed and kept by
// whole blocks, incremental reads bitwise equal to fresh ones.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/op_def.h"
#include "engine/session.h"
#include "kernels/quant.h"

using namespace tessera;

namespace {

// x quantised and dequantised block by block along rows of `cols` elements (the oracle).
std::vector<float> round_trip(const std::vector<float>& x, int64_t cols) {
  std::vector<float> y(x.size());
  uint8_t block[34];
  for (size_t b = 0; b < x.size(); b += 32) {
    REQUIRE(cols % 32 == 0);
    quant::quantize_q8_0(x.data() + b, block);
    quant::dequantize_q8_0(block, y.data() + b);
  }
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> random_values(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("quant: quantize_q8_0 scales by the block's largest magnitude, as ggml") {
  float x[32] = {};
  x[0] = -1.27f;
  x[1] = 0.5f;
  x[2] = 0.004f;  // 0.4 steps: rounds to 0
  x[3] = 0.006f;  // 0.6 steps: rounds to 1
  x[4] = 0.005f;  // half a step of d = 0.01 away from zero (as roundf), but 0.005f * 100 < 0.5
  x[5] = std::nanf("");
  uint8_t block[34];
  quant::quantize_q8_0(x, block);
  uint16_t d_bits;
  std::memcpy(&d_bits, block, 2);
  CHECK(d_bits == float_to_half(1.27f / 127.0f));
  const float id = 1.0f / (1.27f / 127.0f);
  CHECK(static_cast<int8_t>(block[2]) == -127);
  CHECK(static_cast<int8_t>(block[3]) == static_cast<int8_t>(std::round(0.5f * id)));
  CHECK(static_cast<int8_t>(block[4]) == 0);
  CHECK(static_cast<int8_t>(block[5]) == 1);
  CHECK(static_cast<int8_t>(block[6]) == static_cast<int8_t>(std::round(0.005f * id)));
  CHECK(static_cast<int8_t>(block[7]) == 0);  // NaN
  float y[32];
  quant::dequantize_q8_0(block, y);
  CHECK(y[0] == -127.0f * half_to_float(d_bits));
  CHECK(y[31] == 0.0f);
  // An all-zero block: d = 0, every q 0.
  std::fill(std::begin(x), std::end(x), 0.0f);
  quant::quantize_q8_0(x, block);
  for (uint8_t byte : block) CHECK(byte == 0);
}

TEST_CASE("ops: a cast through q8_0 rounds every block as quantize_q8_0, read whole or in parts") {
  std::mt19937_64 rng(3);
  Graph g;
  Tensor x = g.input("x", {3, 96}, DType::F32);
  Tensor q = cast(x, DType::Q8_0);
  CHECK(q.dtype() == DType::Q8_0);
  CHECK(q.node().size_bytes() == 3 * 3 * 34);
  g.output("y", cast(q, DType::F32));
  g.output("h", cast(cast(q, DType::F16), DType::F32));
  const std::vector<float> values = random_values(rng, 3 * 96);
  const std::vector<float> expected = round_trip(values, 96);
  for (BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
    CAPTURE(static_cast<int>(backend));
    GraphSession s(g, SessionOptions{.backend = backend});
    s.write("x", Box{{0, 3}, {0, 96}}, values);
    // A part first: only the blocks it touches are quantised, then the rest.
    const std::vector<float> part = s.read<float>("y", Box{{1, 2}, {40, 50}});
    for (int64_t j = 0; j < 10; ++j) CHECK(part[static_cast<size_t>(j)] == expected[static_cast<size_t>(96 + 40 + j)]);
    CHECK(same_bits(s.read<float>("y", Box{{0, 3}, {0, 96}}), expected));
    // f16 out: the dequantised value rounded to f16.
    const std::vector<float> halves = s.read<float>("h", Box{{2, 3}, {64, 96}});
    for (int64_t j = 0; j < 32; ++j)
      CHECK(halves[static_cast<size_t>(j)] == half_to_float(float_to_half(expected[static_cast<size_t>(2 * 96 + 64 + j)])));
  }
}

TEST_CASE("session: edits through a q8_0 cast recompute whole blocks and match a fresh session") {
  std::mt19937_64 rng(7);
  Graph g;
  Tensor x = g.input("x", {4, 64}, DType::F32);
  // The quantised value feeds a float op, so that a dirty block's neighbours stay valid.
  g.output("y", exp(cast(cast(x, DType::Q8_0), DType::F32)) * g.scalar(0.5f));
  std::vector<float> values = random_values(rng, 4 * 64);
  GraphSession s(g);
  s.write("x", Box{{0, 4}, {0, 64}}, values);
  s.read<float>("y", Box{{0, 4}, {0, 64}});
  std::uniform_int_distribution<int64_t> row(0, 3), col(0, 63);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t r = row(rng), c0 = col(rng), c1 = std::min<int64_t>(64, c0 + 1 + col(rng) % 8);
    const std::vector<float> patch = random_values(rng, static_cast<size_t>(c1 - c0));
    s.write("x", Box{{r, r + 1}, {c0, c1}}, patch);
    for (int64_t j = c0; j < c1; ++j) values[static_cast<size_t>(r * 64 + j)] = patch[static_cast<size_t>(j - c0)];
    // Read a random part, then everything: both bitwise equal to a fresh session's values.
    const int64_t a = col(rng), b = std::min<int64_t>(64, a + 1 + col(rng) % 20);
    const std::vector<float> part = s.read<float>("y", Box{{r, r + 1}, {a, b}});
    const std::vector<float> whole = s.read<float>("y", Box{{0, 4}, {0, 64}});
    GraphSession fresh(g);
    fresh.write("x", Box{{0, 4}, {0, 64}}, values);
    const std::vector<float> expected = fresh.read<float>("y", Box{{0, 4}, {0, 64}});
    REQUIRE(same_bits(whole, expected));
    for (int64_t j = a; j < b; ++j) CHECK(part[static_cast<size_t>(j - a)] == expected[static_cast<size_t>(r * 64 + j)]);
  }
}

TEST_CASE("ops: q8_0 cast rules grow boxes to whole blocks of the last axis") {
  Graph g;
  Tensor x = g.input("x", {2, 96}, DType::F32);
  Tensor q = cast(x, DType::Q8_0);
  Tensor y = cast(q, DType::F32);
  const OpDef& def = op_def(OpKind::Cast);
  Region dirty(2);
  def.forward(g, q.node(), 0, Box{{1, 2}, {33, 40}}, dirty);
  CHECK(dirty.bounding_box() == Box{{1, 2}, {32, 64}});
  Box in_box = Box::of_rank(2);
  std::span<Box> in(&in_box, 1);
  def.needed(g, y.node(), Box{{0, 1}, {90, 95}}, in);
  CHECK(in[0] == Box{{0, 1}, {64, 96}});
  def.needed(g, q.node(), Box{{0, 2}, {0, 32}}, in);
  CHECK(in[0] == Box{{0, 2}, {0, 32}});
  // Plain casts stay elementwise.
  Tensor h = cast(x, DType::F16);
  def.needed(g, h.node(), Box{{0, 1}, {90, 95}}, in);
  CHECK(in[0] == Box{{0, 1}, {90, 95}});
}

TEST_CASE("ops: q8_0 casts reject what they cannot represent, and a q8_0 value cannot be read") {
  Graph g;
  Tensor x = g.input("x", {2, 48}, DType::F32);
  CHECK_THROWS_WITH_AS(cast(x, DType::Q8_0), doctest::Contains("whole blocks of 32"), Error);
  Tensor i = g.input("i", {2, 64}, DType::I32);
  CHECK_THROWS_WITH_AS(cast(i, DType::Q8_0), doctest::Contains("f32, f16 or bf16 only"), Error);
  Tensor f = g.input("f", {2, 64}, DType::F32);
  CHECK_THROWS_WITH_AS(cast(f, DType::Q4_0), doctest::Contains("cannot cast to q4_0"), Error);
  Tensor q = cast(f, DType::Q8_0);
  CHECK_THROWS_WITH_AS(cast(q, DType::I32), doctest::Contains("f32, f16 or bf16 only"), Error);
  CHECK_THROWS_WITH_AS(cast(q, DType::Q8_0), doctest::Contains("f32, f16 or bf16 only"), Error);
  CHECK_THROWS_WITH_AS(exp(q), doctest::Contains("quantised"), Error);
  g.output("q", q);
  g.output("y", cast(q, DType::F32));
  GraphSession s(g);
  s.write("f", Box{{0, 2}, {0, 64}}, std::vector<float>(128, 1.0f));
  CHECK_THROWS_AS(s.read<float>("q", Box{{0, 1}, {0, 32}}), Error);
  // Still usable.
  const std::vector<float> y = s.read<float>("y", Box{{0, 2}, {0, 64}});
  for (float v : y) CHECK(v == 127.0f * half_to_float(float_to_half(1.0f / 127.0f)));
}

TEST_CASE("ops: attention over q8_0 K/V equals its decomposition: q quantised the same way, K/V dequantised") {
  std::mt19937_64 rng(11);
  Graph g;
  Tensor q = g.input("q", {6, 4, 64}, DType::F32);
  Tensor k = cast(g.input("k", {6, 2, 64}, DType::F32), DType::Q8_0);
  Tensor v = cast(g.input("v", {6, 2, 32}, DType::F32), DType::Q8_0);
  const AttentionParams params{.scale = 0.125, .causal = true, .window = 4, .softcap = 5.0};
  Tensor fused = attention(q, k, v, params);
  Tensor inputs[] = {q, k, v};
  g.output("fused", fused);
  const Node node = fused.node();  // a copy: the decomposition adds nodes to the graph
  g.output("decomposed", op_def(OpKind::Attention).decompose(std::span<const Tensor>(inputs, 3), node));
  // The same by hand, through the f32 kernel.
  g.output("by_hand", attention(cast(cast(q, DType::Q8_0), DType::F32), cast(k, DType::F32), cast(v, DType::F32), params));
  for (BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
    CAPTURE(static_cast<int>(backend));
    GraphSession s(g, SessionOptions{.backend = backend});
    s.write("q", Box{{0, 6}, {0, 4}, {0, 64}}, random_values(rng, 6 * 4 * 64));
    s.write("k", Box{{0, 6}, {0, 2}, {0, 64}}, random_values(rng, 6 * 2 * 64));
    s.write("v", Box{{0, 6}, {0, 2}, {0, 32}}, random_values(rng, 6 * 2 * 32));
    const Box all{{0, 6}, {0, 4}, {0, 32}};
    const std::vector<float> a = s.read<float>("fused", all);
    for (std::string other : {"decomposed", "by_hand"}) {
      CAPTURE(other);
      const std::vector<float> b = s.read<float>(other, all);
      for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) <= 1e-5f * (1 + std::fabs(a[i])));
    }
  }
}

TEST_CASE("ops: the optimised q8_0 cast rounds ties away from zero and drops NaNs, as quantize_q8_0") {
  // One block with amax 127 (d = 1, id = 1: x * id is x), ties and near-ties; one with a NaN; one
  // with an infinity; one of zeros.
  std::vector<float> values(4 * 32, 0.0f);
  const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.5f, 0.49999997f, -0.49999997f, 1.5f, 3.4999998f};
  std::copy(std::begin(ties), std::end(ties), values.begin());
  for (int j = 0; j < 32; ++j) values[static_cast<size_t>(32 + j)] = 0.37f * static_cast<float>(j - 16);
  values[40] = std::nanf("");
  values[64] = INFINITY;
  values[70] = 3.0f;
  Graph g;
  Tensor x = g.input("x", {1, 128}, DType::F32);
  g.output("y", cast(cast(x, DType::Q8_0), DType::F32));
  for (BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
    CAPTURE(static_cast<int>(backend));
    GraphSession s(g, SessionOptions{.backend = backend});
    s.write("x", Box{{0, 1}, {0, 128}}, values);
    const std::vector<float> y = s.read<float>("y", Box{{0, 1}, {0, 128}});
    const std::vector<float> expected = round_trip(values, 128);
    for (size_t i = 0; i < y.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(&y[i], &expected[i], sizeof(float)) == 0);
    }
    CHECK(y[1] == 3.0f);
    CHECK(y[2] == -3.0f);
    CHECK(y[7] == 0.0f);
    CHECK(y[40] == 0.0f);
  }
}

TEST_CASE("ops: f16 and bf16 values quantise to q8_0 as their float values do") {
  std::mt19937_64 rng(5);
  const std::vector<float> floats = random_values(rng, 64);
  for (DType half : {DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(half));
    std::vector<uint16_t> halves(64);
    std::vector<float> widened(64);
    for (size_t i = 0; i < 64; ++i) {
      halves[i] = half == DType::F16 ? float_to_half(floats[i]) : float_to_bf16(floats[i]);
      widened[i] = half == DType::F16 ? half_to_float(halves[i]) : bf16_to_float(halves[i]);
    }
    Graph g;
    g.output("y", cast(cast(g.input("x", {2, 32}, half), DType::Q8_0), DType::F32));
    for (BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
      GraphSession s(g, SessionOptions{.backend = backend});
      s.write("x", Box{{0, 2}, {0, 32}}, std::as_bytes(std::span<const uint16_t>(halves)));
      CHECK(same_bits(s.read<float>("y", Box{{0, 2}, {0, 32}}), round_trip(widened, 32)));
    }
  }
}
