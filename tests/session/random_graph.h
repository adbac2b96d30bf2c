// Random-graph generator shared by the differential session tests: random DAGs drawn from
// the whole op list over a few inputs ("x", "y" [rows, cols] f32, "z" [cols] f32, "ids" [rows]
// i32), plus helpers to write random boxes and compare reads. Header-only, tests only.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/session.h"
#include "tests/support/quant_blocks.h"

namespace tessera::random_graph_testing {

// Shapes and extra op families of a generated graph. The defaults are the small graphs of the
// original test (their random streams must not change: seeds are compared across versions).
struct RandomGraphConfig {
  int64_t rows_lo = 2, rows_hi = 6;
  // cols = cols_step * uniform(cols_lo, cols_hi).
  int64_t cols_lo = 1, cols_hi = 3, cols_step = 2;
  bool linear = false;         // also draw linear layers (float or block-quantised weights)
  bool scale_weights = false;  // weight constants scaled by 1 / sqrt(fan-in)
};

struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype;
  double lo, hi;
};

class RandomGraph {
 public:
  RandomGraph(Graph& g, std::mt19937_64& rng, const RandomGraphConfig& config = {})
      : g_(g), rng_(rng), config_(config) {
    rows_ = uniform(config.rows_lo, config.rows_hi);
    cols_ = config.cols_step * uniform(config.cols_lo, config.cols_hi);
    add_input("x", {rows_, cols_}, DType::F32, -2, 2);
    add_input("y", {rows_, cols_}, DType::F32, -2, 2);
    add_input("z", {cols_}, DType::F32, 0.5, 2);
    ids_ = add_input("ids", {rows_}, DType::I32, 0, 1);
  }

  const std::vector<InputSpec>& inputs() const { return inputs_; }
  const std::vector<Tensor>& pool() const { return pool_; }
  // Tensors read as keys and values by the attention ops drawn so far.
  const std::vector<Tensor>& attention_kv() const { return attention_kv_; }

  // Adds random ops until the graph holds at least `min_nodes` computed nodes.
  void grow(int min_nodes) {
    int attempts = 0;
    while (computed_nodes() < min_nodes && attempts++ < 2000)
      try_add(static_cast<int>(uniform(0, op_count() - 1)));
  }
  // Adds a linear layer with a weight of `dtype` over a random pool matrix.
  bool try_add_linear(DType dtype) {
    try {
      pool_.push_back(linear_layer(pick_matrix(), dtype));
      used_[kLinear] = true;
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // Adds one op of family `which` (in [0, op_count())) over random pool tensors; false when the
  // draw was incompatible (e.g. shapes that do not broadcast) or gave an empty tensor.
  bool try_add(int which) {
    try {
      Tensor t = make(which);
      if (t.node().volume() == 0) return false;  // empty slices are legal but untestable here
      if (t.dtype() == DType::F32) pool_.push_back(t);
      used_[which] = true;
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  int computed_nodes() const {
    int n = 0;
    for (NodeId id = 0; id < g_.size(); ++id)
      if (g_.node(id).kind != OpKind::Input && g_.node(id).kind != OpKind::Constant) ++n;
    return n;
  }
  uint32_t kinds_used() const {
    uint32_t mask = 0;
    for (int i = 0; i < op_count(); ++i) mask |= used_[i] ? (1u << i) : 0u;
    return mask;
  }
  // Op families the generator draws from: kOps, or kOps + 1 with linear layers.
  int op_count() const { return config_.linear ? kOps + 1 : kOps; }
  static constexpr int kOps = 26;
  static constexpr int kAttention = 25;  // causal attention (records its k and v in attention_kv())
  static constexpr int kLinear = 26;     // only with RandomGraphConfig::linear

 private:
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  Tensor add_input(const std::string& name, const Shape& shape, DType dtype, double lo, double hi) {
    Tensor t = g_.input(name, shape, dtype);
    inputs_.push_back({name, shape, dtype, lo, hi});
    if (dtype == DType::F32) pool_.push_back(t);
    return t;
  }
  // Recent tensors are picked more often so that chains get deep.
  Tensor pick() {
    size_t n = pool_.size();
    size_t back = static_cast<size_t>(uniform(0, static_cast<int64_t>(std::min<size_t>(n, 6)) - 1));
    return rng_() % 3 == 0 ? pool_[static_cast<size_t>(uniform(0, static_cast<int64_t>(n) - 1))]
                           : pool_[n - 1 - back];
  }
  Tensor pick_matrix() {
    for (int i = 0; i < 20; ++i) {
      Tensor t = pick();
      if (t.rank() == 2) return t;
    }
    return pool_[0];
  }
  Tensor weight(const Shape& shape) {
    std::vector<float> v(static_cast<size_t>(shape_volume(shape)));
    std::normal_distribution<float> d(0.f, 0.5f);
    for (float& x : v) x = d(rng_);
    if (config_.scale_weights) {
      // Keeps activations of wide layers in range: std 0.5 / sqrt(fan-in).
      const float s = 1.0f / std::sqrt(static_cast<float>(shape.back()));
      for (float& x : v) x *= s;
    }
    return g_.constant(shape, v);
  }
  // linear(a, weight [c, k]) with k = c rounded up to whole blocks (a zero-padded to k): the
  // weight quantised in a random block format, or f32/f16/bf16.
  Tensor linear_layer(Tensor a, DType dtype) {
    const int64_t c = a.dim(1);
    const int64_t block = dtype_block_size(dtype);
    const int64_t k = (c + block - 1) / block * block;
    Tensor x = k == c ? a : pad(a, {0, 0}, {0, k - c});
    if (is_quantized(dtype)) {
      std::vector<uint8_t> bytes = testing::random_quantized(dtype, c, k, rng_);
      return linear(x, g_.constant({c, k}, dtype, std::as_bytes(std::span<const uint8_t>(bytes))));
    }
    return linear(x, dtype == DType::F32 ? weight({c, k}) : cast(weight({c, k}), dtype));
  }
  Tensor as_image(Tensor t) { return reshape(t, {1, 1, t.dim(0), t.dim(1)}); }

  Tensor make(int which) {
    Tensor a = pick_matrix();
    const int64_t r = a.dim(0), c = a.dim(1);
    switch (which) {
      case 0:
        return unary(static_cast<UnaryFn>(uniform(0, static_cast<int64_t>(UnaryFn::Count) - 1)), a);
      case 1: {
        auto fn = static_cast<BinaryFn>(uniform(0, static_cast<int64_t>(BinaryFn::Ge)));
        Tensor out = binary(fn, a, pick());
        return out.dtype() == DType::Bool ? where(out, a, pick()) : out;
      }
      case 2:
        return where(gt(a, pick()), pick(), a);
      case 3:
        return cast(cast(a, rng_() % 2 ? DType::F16 : DType::BF16), DType::F32);
      case 4: {
        auto fn = static_cast<ReduceFn>(uniform(0, 4));
        return a + reduce(fn, a, {uniform(0, 1)}, true);
      }
      case 5:
        return cast(argmax(a, uniform(0, 1), true), DType::F32) + a;
      case 6:
        return cumsum(a, uniform(0, 1));
      case 7:
        return rng_() % 2 ? matmul(a, weight({c, c})) : matmul(a, transpose(pick_matrix(), 0, 1));
      case 8:
        return reshape(reshape(a, {r * c}), {c, r});
      case 9:
        return transpose(a, 0, 1);
      case 10: {
        int64_t axis = uniform(0, 1), n = a.dim(static_cast<int>(axis));
        int64_t start = uniform(0, n - 1), step = uniform(1, 2);
        Tensor s = slice(a, axis, start, n, step);
        std::vector<int64_t> before{0, 0}, after{0, 0};
        after[static_cast<size_t>(axis)] = n - s.dim(static_cast<int>(axis));
        return pad(s, before, after, 0.5f);
      }
      case 11: {
        Tensor parts[] = {a, pick()};
        Tensor cat = concat(parts, uniform(0, 1));
        return slice(cat, 0, 1, cat.dim(0));
      }
      case 12:
        return slice(repeat(a, {2, 1}), 0, uniform(0, r), uniform(0, r) + r);
      case 13:
        return flip(a, {uniform(0, 1)});
      case 14:
        return expand(sum(a, {0}, true), {r, c});
      case 15: {
        Tensor table = pick_matrix();
        if (table.dim(0) < 2) throw Error("table too small");
        return gather(table, ids_);
      }
      case 16:
        return rng_() % 2 ? triu(a, uniform(-1, 1)) : tril(a, uniform(-1, 1));
      case 17:
        return a + arange(g_, c, -1.0, 0.25) +
               (rng_() % 2 ? rand(g_, {r, c}, rng_() % 5) : randn(g_, {r, c}, rng_() % 5));
      case 18:
        return rng_() % 2 ? softmax(a, uniform(0, 1)) : log_softmax(a, -1);
      case 19:
        return rng_() % 2 ? rms_norm(a, weight({c}), 1e-5)
                          : layer_norm(a, weight({c}), weight({c}), 1e-5);
      case 20:
        return reshape(group_norm(reshape(a, {1, r, c, 1}), 1, Tensor{}, Tensor{}, 1e-5), {r, c});
      case 21: {
        if (c % 2) throw Error("odd");
        Tensor pos = arange(g_, r, 0, 1, DType::I32);
        return reshape(rope(reshape(a, {r, 1, c}), pos, c, 100.0,
                            rng_() % 2 ? RopeMode::HalfSplit : RopeMode::Interleaved),
                       {r, c});
      }
      case 22: {
        Conv2dParams p;
        p.pad_h = p.pad_w = 1;
        p.dilation_h = uniform(1, 2);
        p.pad_h = p.dilation_h;
        return reshape(conv2d(as_image(a), weight({1, 1, 3, 3}), weight({1}), p), {r, c});
      }
      case 23:
        return reshape(pool2d(as_image(a), rng_() % 2 ? PoolKind::Max : PoolKind::Avg, 3, 1, 1),
                       {r, c});
      case 24:
        return reshape(pool2d(upsample_nearest(as_image(a), 2), PoolKind::Avg, 2, 2, 0), {r, c});
      case 25: {
        if (a.dim(0) != r) throw Error("shape");
        AttentionParams p;
        p.scale = 0.5;
        p.window = rng_() % 2 ? uniform(1, 3) : 0;
        p.softcap = rng_() % 2 ? 5.0 : 0.0;
        Tensor q = reshape(a, {r, 1, c}), k = reshape(pick_matrix(), {r, 1, c}),
               v = reshape(pick_matrix(), {r, 1, c});
        Tensor out = reshape(attention(q, k, v, p), {r, c});
        attention_kv_.push_back(k);
        attention_kv_.push_back(v);
        return out;
      }
      case 26: {
        static constexpr DType kFloat[] = {DType::F32, DType::F16, DType::BF16};
        const size_t n_quant = std::size(testing::kQuantizedDTypes);
        const size_t pick = static_cast<size_t>(uniform(0, static_cast<int64_t>(n_quant + 2)));
        return linear_layer(
            a, pick < n_quant ? testing::kQuantizedDTypes[pick] : kFloat[pick - n_quant]);
      }
    }
    throw Error("unreachable");
  }

  Graph& g_;
  std::mt19937_64& rng_;
  RandomGraphConfig config_;
  int64_t rows_, cols_;
  Tensor ids_;
  std::vector<InputSpec> inputs_;
  std::vector<Tensor> pool_;
  std::vector<Tensor> attention_kv_;
  bool used_[kOps + 1] = {};
};

inline std::vector<std::byte> random_values(const InputSpec& in, int64_t count,
                                            std::mt19937_64& rng) {
  std::vector<std::byte> bytes(static_cast<size_t>(count * dtype_size(in.dtype)));
  for (int64_t i = 0; i < count; ++i) {
    if (in.dtype == DType::I32) {
      int32_t v = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(in.lo), static_cast<int64_t>(in.hi))(rng));
      std::memcpy(bytes.data() + i * 4, &v, 4);
    } else {
      float v = static_cast<float>(std::uniform_real_distribution<double>(in.lo, in.hi)(rng));
      std::memcpy(bytes.data() + i * 4, &v, 4);
    }
  }
  return bytes;
}

inline Box random_box(const Shape& shape, std::mt19937_64& rng) {
  Box b = Box::of_rank(static_cast<int>(shape.size()));
  for (int d = 0; d < b.rank(); ++d) {
    int64_t x = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
    int64_t y = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(rng);
    b[d] = rng() % 3 == 0 ? Interval(0, shape[d]) : Interval(std::min(x, y), std::max(x, y) + 1);
  }
  return b;
}

// Copies box `box` out of a dense full tensor of `shape`.
inline std::vector<std::byte> extract(const std::vector<std::byte>& full, const Shape& shape,
                                      const Box& box, int size) {
  std::vector<std::byte> out;
  Shape strides = row_major_strides(shape);
  int64_t index[kMaxRank];
  for (int d = 0; d < box.rank(); ++d) index[d] = box.begin(d);
  if (box.empty()) return out;
  while (true) {
    int64_t o = 0;
    for (int d = 0; d < box.rank(); ++d) o += index[d] * strides[static_cast<size_t>(d)];
    out.insert(out.end(), full.begin() + o * size, full.begin() + (o + 1) * size);
    int d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.begin(d);
    }
    if (d < 0) break;
  }
  return out;
}

// Copies `data` (dense row-major over `box`) into the full dense tensor `full` of `shape`.
inline void scatter(std::vector<std::byte>& full, const Shape& shape, const Box& box,
                    const std::vector<std::byte>& data, int size) {
  if (box.empty()) return;
  Shape strides = row_major_strides(shape);
  int64_t j = 0;
  int64_t index[kMaxRank];
  for (int d = 0; d < box.rank(); ++d) index[d] = box.begin(d);
  while (true) {
    int64_t o = 0;
    for (int d = 0; d < box.rank(); ++d) o += index[d] * strides[static_cast<size_t>(d)];
    std::memcpy(full.data() + o * size, data.data() + j * size, static_cast<size_t>(size));
    ++j;
    int d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box.end(d)) break;
      index[d] = box.begin(d);
    }
    if (d < 0) break;
  }
}

}  // namespace tessera::random_graph_testing
