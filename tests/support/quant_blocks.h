// Test support: random but well-formed quantised weight rows (scale fields set to sane f16
// values, everything else random), for every block-quantised dtype.
#pragma once

#include <cstring>
#include <random>
#include <vector>

#include "engine/dtype.h"

namespace tessera::testing {

inline std::vector<uint8_t> random_quantized(DType dtype, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const int64_t block_bytes = dtype_block_bytes(dtype);
  const int64_t blocks = rows * cols / dtype_block_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * block_bytes));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  auto put_half = [&](uint8_t* p, float v) {
    uint16_t h = float_to_half(v);
    std::memcpy(p, &h, 2);
  };
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* b = bytes.data() + i * block_bytes;
    switch (dtype) {
      case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: put_half(b, scale(rng)); break;
      case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
        put_half(b, scale(rng));
        put_half(b + 2, scale(rng));
        break;
      case DType::Q6_K: put_half(b + 208, scale(rng)); break;
      default: break;
    }
  }
  return bytes;
}

inline constexpr DType kQuantizedDTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                            DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

}  // namespace tessera::testing
