// End-to-end exactness of the optimised CPU kernels inside a session: a small quantised LLM
// (gather from a quantised table, rms_norm, linear with several block formats, rope,
// GQA attention with a window, silu / gelu, residual adds, the tied output linear) decoded
// token by token must give bitwise the logits of a fresh session computing the whole sequence.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/ops.h"
#include "engine/session.h"
#include "tests/support/quant_blocks.h"
#include "tests/support/scoped_env.h"

using namespace tessera;

namespace {

constexpr int64_t kCapacity = 40, kVocab = 80, kDim = 64, kHeads = 4, kKvHeads = 2, kHeadDim = 16,
                  kFfn = 256;

Tensor quantized(Graph& g, DType dtype, int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes = testing::random_quantized(dtype, n, k, rng);
  return g.constant({n, k}, dtype, std::as_bytes(std::span<const uint8_t>(bytes)));
}

Tensor norm_weight(Graph& g, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& x : w) x = u(rng);
  return g.constant({n}, w);
}

void build_model(Graph& g) {
  std::mt19937_64 rng(77);
  Tensor ids = g.input("ids", {kCapacity}, DType::I32);
  Tensor positions = arange(g, kCapacity, 0, 1, DType::I32);
  Tensor table = quantized(g, DType::Q8_0, kVocab, kDim, rng);
  // Quantised weights have entries up to ~0.3: scale the residual stream to stay O(1).
  Tensor x = gather(table, ids) * g.scalar(8.0f);
  const DType formats[][4] = {{DType::Q4_1, DType::Q8_0, DType::Q5_0, DType::Q6_K},
                              {DType::Q4_0, DType::Q5_1, DType::Q8_0, DType::Q4_K}};
  for (int layer = 0; layer < 2; ++layer) {
    const DType* f = formats[layer];
    Tensor h = rms_norm(x, norm_weight(g, kDim, rng), 1e-6);
    Tensor q = reshape(linear(h, quantized(g, f[0], kHeads * kHeadDim, kDim, rng)),
                       {kCapacity, kHeads, kHeadDim});
    Tensor k = reshape(linear(h, quantized(g, f[1], kKvHeads * kHeadDim, kDim, rng)),
                       {kCapacity, kKvHeads, kHeadDim});
    Tensor v = reshape(linear(h, quantized(g, f[0], kKvHeads * kHeadDim, kDim, rng)),
                       {kCapacity, kKvHeads, kHeadDim});
    q = rope(q, positions, kHeadDim, 10000.0, RopeMode::HalfSplit);
    k = rope(k, positions, kHeadDim, 10000.0, RopeMode::HalfSplit);
    AttentionParams params;
    params.scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    params.window = layer == 0 ? 6 : 0;
    Tensor a = reshape(attention(q, k, v, params), {kCapacity, kHeads * kHeadDim});
    x = x + linear(a, quantized(g, f[2], kDim, kHeads * kHeadDim, rng));
    Tensor h2 = rms_norm(x, norm_weight(g, kDim, rng), 1e-6);
    Tensor gate = layer == 0 ? silu(linear(h2, quantized(g, f[1], kFfn, kDim, rng)))
                             : gelu(linear(h2, quantized(g, f[1], kFfn, kDim, rng)), true);
    Tensor up = linear(h2, quantized(g, f[0], kFfn, kDim, rng));
    x = x + linear(gate * up, quantized(g, f[3], kDim, kFfn, rng));
  }
  g.output("logits", linear(rms_norm(x, norm_weight(g, kDim, rng), 1e-6), table));
}

std::vector<float> fresh_row(const Graph& g, const std::vector<int32_t>& tokens, int64_t row,
                             BackendKind backend = BackendKind::Cpu) {
  SessionOptions options;
  options.backend = backend;
  GraphSession fresh(g, options);
  fresh.write("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  return fresh.read<float>("logits", Box{{row, row + 1}, {0, kVocab}});
}

int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

TEST_CASE(
    "kernels: decoding a quantised model with optimised kernels matches a fresh session bitwise") {
  Graph g;
  build_model(g);
  std::vector<int32_t> tokens = {3, 17, 42, 8, 8, 61, 0, 79, 25, 33};
  GraphSession s(g);
  s.write("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  int64_t t = static_cast<int64_t>(tokens.size()) - 1;
  std::vector<float> logits = s.read<float>("logits", Box{{t, t + 1}, {0, kVocab}});
  for (int step = 0; step < 10; ++step) {
    CAPTURE(step);
    tokens.push_back(argmax(logits));
    t = static_cast<int64_t>(tokens.size()) - 1;
    s.write("ids", Box{{t, t + 1}}, std::vector<int32_t>{tokens.back()});
    logits = s.read<float>("logits", Box{{t, t + 1}, {0, kVocab}});
    const std::vector<float> want = fresh_row(g, tokens, t);
    REQUIRE(std::memcmp(want.data(), logits.data(), want.size() * sizeof(float)) == 0);
  }
  // Editing a middle token recomputes the rows after it: still the fresh values.
  tokens[5] = 11;
  s.write("ids", Box{{5, 6}}, std::vector<int32_t>{11});
  logits = s.read<float>("logits", Box{{t, t + 1}, {0, kVocab}});
  const std::vector<float> want = fresh_row(g, tokens, t);
  CHECK(std::memcmp(want.data(), logits.data(), want.size() * sizeof(float)) == 0);
  // And the optimised backend with f32 activations (the int8 path rounds them: linear_q8_test)
  // stays close to the reference backend end to end.
  const testing::ScopedEnv precise("TESSERA_LINEAR", "f32");
  logits = fresh_row(g, tokens, t);
  const std::vector<float> reference = fresh_row(g, tokens, t, BackendKind::Reference);
  double scale = 0;
  for (float v : reference) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (int64_t i = 0; i < kVocab; ++i)
    CHECK(std::fabs(logits[static_cast<size_t>(i)] - reference[static_cast<size_t>(i)]) <=
          1e-4 * scale + 1e-5);
}
