#include "loaders/quant.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "kernels/quant.h"

namespace tessera {
namespace {


constexpr int kQK = 32;     // elements per block of the legacy formats
constexpr int kQK_K = 256;  // elements per super-block of the k-quants
using namespace quant;

// Sizes follow ggml's type_traits (and gguf-py's GGML_QUANT_SIZES).
constexpr std::array<GgmlTypeTraits, 34> kTraits = {{
    {GgmlType::F32, "f32", 1, 4, dequantize_f32},
    {GgmlType::F16, "f16", 1, 2, dequantize_f16},
    {GgmlType::Q4_0, "q4_0", kQK, 2 + 16, dequantize_q4_0},
    {GgmlType::Q4_1, "q4_1", kQK, 2 + 2 + 16, dequantize_q4_1},
    {GgmlType::Q5_0, "q5_0", kQK, 2 + 4 + 16, dequantize_q5_0},
    {GgmlType::Q5_1, "q5_1", kQK, 2 + 2 + 4 + 16, dequantize_q5_1},
    {GgmlType::Q8_0, "q8_0", kQK, 2 + 32, dequantize_q8_0},
    {GgmlType::Q8_1, "q8_1", kQK, 4 + 4 + 32, nullptr},
    {GgmlType::Q2_K, "q2_K", kQK_K, 2 + 2 + kQK_K / 16 + kQK_K / 4, nullptr},
    {GgmlType::Q3_K, "q3_K", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + 12, nullptr},
    {GgmlType::Q4_K, "q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2, dequantize_q4_k},
    {GgmlType::Q5_K, "q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 8 + kQK_K / 2, dequantize_q5_k},
    {GgmlType::Q6_K, "q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2, dequantize_q6_k},
    {GgmlType::Q8_K, "q8_K", kQK_K, 4 + kQK_K + kQK_K / 8, nullptr},
    {GgmlType::IQ2_XXS, "iq2_xxs", kQK_K, 2 + kQK_K / 4, nullptr},
    {GgmlType::IQ2_XS, "iq2_xs", kQK_K, 2 + kQK_K / 4 + kQK_K / 32, nullptr},
    {GgmlType::IQ3_XXS, "iq3_xxs", kQK_K, 2 + kQK_K / 4 + kQK_K / 8, nullptr},
    {GgmlType::IQ1_S, "iq1_s", kQK_K, 2 + kQK_K / 8 + kQK_K / 16, nullptr},
    {GgmlType::IQ4_NL, "iq4_nl", kQK, 2 + 16, nullptr},
    {GgmlType::IQ3_S, "iq3_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 8 + kQK_K / 32 + 4, nullptr},
    {GgmlType::IQ2_S, "iq2_s", kQK_K, 2 + kQK_K / 4 + kQK_K / 16, nullptr},
    {GgmlType::IQ4_XS, "iq4_xs", kQK_K, 2 + 2 + kQK_K / 2 + kQK_K / 64, nullptr},
    {GgmlType::I8, "i8", 1, 1, nullptr},
    {GgmlType::I16, "i16", 1, 2, nullptr},
    {GgmlType::I32, "i32", 1, 4, nullptr},
    {GgmlType::I64, "i64", 1, 8, nullptr},
    {GgmlType::F64, "f64", 1, 8, nullptr},
    {GgmlType::IQ1_M, "iq1_m", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32, nullptr},
    {GgmlType::BF16, "bf16", 1, 2, dequantize_bf16},
    {GgmlType::TQ1_0, "tq1_0", kQK_K, 2 + 4 * 13, nullptr},
    {GgmlType::TQ2_0, "tq2_0", kQK_K, 2 + 64, nullptr},
    {GgmlType::MXFP4, "mxfp4", kQK, 1 + 16, nullptr},
    {GgmlType::NVFP4, "nvfp4", 64, 4 + 32, nullptr},
    {GgmlType::Q1_0, "q1_0", 128, 2 + 16, nullptr},
}};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const GgmlTypeTraits& traits : kTraits) {
    if (static_cast<uint32_t>(traits.type) == id) return &traits;
  }
  return nullptr;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr)
    throw Error(absl::StrCat("[quant] unknown ggml type ", static_cast<uint32_t>(type)));
  return *traits;
}

int64_t ggml_row_size(GgmlType type, int64_t n) {
  const GgmlTypeTraits& traits = ggml_traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    throw Error(absl::StrCat("[quant] ", traits.name, " row of ", n,
                             " elements is not a whole number of ", traits.block_size,
                             "-element blocks"));
  }
  const int64_t blocks = n / traits.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / traits.block_bytes) {
    throw Error(
        absl::StrCat("[quant] ", traits.name, " row of ", n, " elements overflows int64 bytes"));
  }
  return blocks * traits.block_bytes;
}

std::optional<DType> ggml_type_dtype(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return DType::F32;
    case GgmlType::F16:
      return DType::F16;
    case GgmlType::BF16:
      return DType::BF16;
    case GgmlType::I32:
      return DType::I32;
    case GgmlType::I64:
      return DType::I64;
    case GgmlType::Q8_0:
      return DType::Q8_0;
    case GgmlType::Q4_0:
      return DType::Q4_0;
    case GgmlType::Q4_1:
      return DType::Q4_1;
    case GgmlType::Q5_0:
      return DType::Q5_0;
    case GgmlType::Q5_1:
      return DType::Q5_1;
    case GgmlType::Q4_K:
      return DType::Q4_K;
    case GgmlType::Q5_K:
      return DType::Q5_K;
    case GgmlType::Q6_K:
      return DType::Q6_K;
    default:
      return std::nullopt;
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const GgmlTypeTraits& traits = ggml_traits(type);
  if (traits.dequantize_block == nullptr) {
    throw Error(absl::StrCat("[quant] no dequantiser for ggml type ", traits.name));
  }
  ggml_row_size(type, n);  // validates n
  const auto* block = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / traits.block_size; ++i) {
    traits.dequantize_block(block, dst + i * traits.block_size);
    block += traits.block_bytes;
  }
}

}  // namespace tessera
