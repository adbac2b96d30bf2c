// A small conv net with random weights (fixed seed) for memory-pool and edit tests: conv, silu,
// strided conv, conv, nearest upsample, conv. Input "image" [1, 3, H, W], output "out"
// [1, 3, H, W] (H and W even). `tile`: Conv2dAttrs::tile of the stride-1 convs (4: the 8 -> 8
// conv runs 4x4 Winograd tiles).
#pragma once

#include <random>
#include <vector>

#include "engine/ops.h"

namespace tessera::testing {

// A constant of `shape` with normal values of standard deviation `sigma` drawn from `rng`.
inline Tensor random_constant(Graph& g, std::mt19937_64& rng, const Shape& shape, float sigma) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> values(static_cast<size_t>(shape_volume(shape)));
  for (float& v : values) v = normal(rng);
  return g.constant(shape, values);
}

inline Tensor conv_net(Graph& g, int64_t height, int64_t width, uint64_t seed = 11, int64_t tile = 1) {
  std::mt19937_64 rng(seed);
  auto weight = [&](const Shape& shape) { return random_constant(g, rng, shape, 0.2f); };
  Tensor x = g.input("image", {1, 3, height, width}, DType::F32);
  Conv2dParams same;
  same.pad_h = same.pad_w = 1;
  Conv2dParams down = same;
  down.stride_h = down.stride_w = 2;
  same.tile = tile;
  x = silu(conv2d(x, weight({8, 3, 3, 3}), weight({8}), same));
  x = silu(conv2d(x, weight({8, 8, 3, 3}), weight({8}), down));
  x = silu(conv2d(x, weight({8, 8, 3, 3}), weight({8}), same));
  x = upsample_nearest(x, 2);
  Tensor out = conv2d(x, weight({3, 8, 3, 3}), weight({3}), same);
  g.output("out", out);
  return out;
}

}  // namespace tessera::testing
