// A small Llama-style causal transformer built from the engine API with random weights (fixed
// seed): token embedding, per layer RMSNorm -> GQA attention with RoPE -> residual -> RMSNorm ->
// SwiGLU MLP -> residual, final RMSNorm and output projection. Used by the core demo and the
// decode tests; real models are built the same way from GGUF weights.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/graph.h"
#include "engine/ops.h"

namespace tessera::examples {

struct TinyConfig {
  int64_t vocab = 64;
  int64_t dim = 32;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 8;
  int64_t ffn = 64;
  int64_t layers = 2;
  int64_t capacity = 128;  // maximum context: the fixed size of the "ids" input
  uint64_t seed = 7;
};

// Node handles of interest for tests and statistics.
struct TinyModel {
  Tensor ids;                  // input "ids" [capacity] i32
  Tensor logits;               // output "logits" [capacity, vocab] f32
  std::vector<Tensor> keys;    // per layer, K after RoPE [capacity, kv_heads, head_dim]
  std::vector<Tensor> values;  // per layer, V [capacity, kv_heads, head_dim]
  std::vector<Tensor> attention_outputs;
};

inline Tensor random_weight(Graph& g, std::mt19937_64& rng, const Shape& shape, double scale) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> values(static_cast<size_t>(shape_volume(shape)));
  for (float& v : values) v = normal(rng);
  return g.constant(shape, values);
}

inline TinyModel build_tiny_transformer(Graph& g, const TinyConfig& c) {
  std::mt19937_64 rng(c.seed);
  const int64_t T = c.capacity;
  const double init = 1.0 / std::sqrt(static_cast<double>(c.dim));
  TinyModel m;
  m.ids = g.input("ids", {T}, DType::I32);
  Tensor positions = arange(g, T, 0, 1, DType::I32);
  Tensor x = gather(random_weight(g, rng, {c.vocab, c.dim}, 1.0), m.ids);
  auto ones = [&](int64_t n) { return g.constant({n}, std::vector<float>(static_cast<size_t>(n), 1.0f)); };
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    Tensor h = rms_norm(x, ones(c.dim), 1e-5);
    Tensor q = reshape(matmul(h, random_weight(g, rng, {c.dim, c.heads * c.head_dim}, init)), {T, c.heads, c.head_dim});
    Tensor k = reshape(matmul(h, random_weight(g, rng, {c.dim, c.kv_heads * c.head_dim}, init)),
                       {T, c.kv_heads, c.head_dim});
    Tensor v = reshape(matmul(h, random_weight(g, rng, {c.dim, c.kv_heads * c.head_dim}, init)),
                       {T, c.kv_heads, c.head_dim});
    q = rope(q, positions, c.head_dim, 10000.0, RopeMode::HalfSplit);
    k = rope(k, positions, c.head_dim, 10000.0, RopeMode::HalfSplit);
    AttentionParams params;
    params.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    Tensor a = attention(q, k, v, params);
    m.keys.push_back(k);
    m.values.push_back(v);
    m.attention_outputs.push_back(a);
    x = x + matmul(reshape(a, {T, c.heads * c.head_dim}), random_weight(g, rng, {c.heads * c.head_dim, c.dim}, init));
    Tensor h2 = rms_norm(x, ones(c.dim), 1e-5);
    Tensor gate = silu(matmul(h2, random_weight(g, rng, {c.dim, c.ffn}, init)));
    Tensor up = matmul(h2, random_weight(g, rng, {c.dim, c.ffn}, init));
    x = x + matmul(gate * up, random_weight(g, rng, {c.ffn, c.dim}, 1.0 / std::sqrt(static_cast<double>(c.ffn))));
  }
  m.logits = matmul(rms_norm(x, ones(c.dim), 1e-5), random_weight(g, rng, {c.dim, c.vocab}, init));
  g.output("logits", m.logits);
  return m;
}

// Greedy pick over one row of logits.
inline int32_t argmax_row(const std::vector<float>& row) {
  int32_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace tessera::examples
