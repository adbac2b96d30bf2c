// ggml block formats: geometry, and each reference dequantiser on hand-packed blocks whose
// expected values are computed here from the documented formula. Scales are small dyadic
// numbers, so every expected value is exact in float and the comparisons are exact.
#include "loaders/quant.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/error.h"

using namespace tessera;

namespace {

// f16 bit patterns used as block scales.
constexpr uint16_t kHalfQuarter = 0x3400;   // 0.25
constexpr uint16_t kHalfHalf = 0x3800;      // 0.5
constexpr uint16_t kHalfOne = 0x3C00;       // 1
constexpr uint16_t kHalfTwo = 0x4000;       // 2
constexpr uint16_t kHalfMinusOne = 0xBC00;  // -1
constexpr uint16_t kHalfMinusTwo = 0xC000;  // -2

void put16(std::vector<uint8_t>& block, size_t at, uint16_t value) {
  block[at] = static_cast<uint8_t>(value & 0xFF);
  block[at + 1] = static_cast<uint8_t>(value >> 8);
}

std::vector<float> dequantize(GgmlType type, const std::vector<uint8_t>& bytes, int64_t n) {
  REQUIRE(static_cast<int64_t>(bytes.size()) == ggml_row_size(type, n));
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  dequantize_row(type, bytes.data(), out.data(), n);
  return out;
}

void check_equal(const std::vector<float>& actual, const std::vector<float>& expected) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    CAPTURE(i);
    CHECK(actual[i] == expected[i]);
  }
}

// Legacy 32-element nibble packing: byte i holds element i (low) and element i + 16 (high).
void pack_nibbles(uint8_t* qs, const int* q) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((q[i] & 15) | ((q[i + 16] & 15) << 4));
}

// Bit e of the u32 at `qh` is bit 4 of element e.
void pack_high_bits(uint8_t* qh, const int* q) {
  uint32_t bits = 0;
  for (int e = 0; e < 32; ++e) bits |= static_cast<uint32_t>((q[e] >> 4) & 1) << e;
  std::memcpy(qh, &bits, 4);
}

// Q4_K / Q5_K scale bytes for 6-bit scales sc[8] and mins m[8].
void pack_k_scales(uint8_t* s, const int* sc, const int* m) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

constexpr int kSc[8] = {1, 63, 17, 40, 33, 62, 5, 48};  // exercises the top two bits
constexpr int kMin[8] = {0, 63, 20, 7, 35, 16, 61, 32};

}  // namespace

TEST_CASE("loaders: ggml block geometry and row sizes") {
  struct Expect {
    GgmlType type;
    int64_t block_size, block_bytes;
  };
  for (const Expect& e :
       {Expect{GgmlType::F32, 1, 4}, Expect{GgmlType::F16, 1, 2}, Expect{GgmlType::BF16, 1, 2},
        Expect{GgmlType::Q4_0, 32, 18}, Expect{GgmlType::Q4_1, 32, 20},
        Expect{GgmlType::Q5_0, 32, 22}, Expect{GgmlType::Q5_1, 32, 24},
        Expect{GgmlType::Q8_0, 32, 34}, Expect{GgmlType::Q4_K, 256, 144},
        Expect{GgmlType::Q5_K, 256, 176}, Expect{GgmlType::Q6_K, 256, 210},
        Expect{GgmlType::Q2_K, 256, 84}, Expect{GgmlType::Q3_K, 256, 110}}) {
    CAPTURE(ggml_type_name(e.type));
    CHECK(ggml_block_size(e.type) == e.block_size);
    CHECK(ggml_block_bytes(e.type) == e.block_bytes);
    CHECK(ggml_row_size(e.type, 4 * e.block_size) == 4 * e.block_bytes);
  }
  CHECK(ggml_row_size(GgmlType::Q4_K, 512) == 288);
  CHECK(ggml_row_size(GgmlType::F16, 7) == 14);
  CHECK(ggml_row_size(GgmlType::Q8_0, 0) == 0);
  CHECK_THROWS_WITH_AS(ggml_row_size(GgmlType::Q8_0, 33),
                       doctest::Contains("[quant] q8_0 row of 33"), Error);
  CHECK_THROWS_WITH_AS(ggml_row_size(GgmlType::F32, -1), doctest::Contains("[quant]"), Error);
  CHECK_THROWS_WITH_AS(ggml_row_size(GgmlType::Q8_0, INT64_MAX / 32 * 32),
                       doctest::Contains("overflows"), Error);
  CHECK(ggml_type_traits(4) == nullptr);   // retired Q4_2
  CHECK(ggml_type_traits(31) == nullptr);  // retired Q4_0_4_4
  CHECK(ggml_type_traits(12) != nullptr);
  CHECK(std::string(ggml_type_name(GgmlType::Q4_K)) == "q4_K");
  CHECK(ggml_type_dtype(GgmlType::BF16) == DType::BF16);
  CHECK(ggml_type_dtype(GgmlType::Q8_0) == DType::Q8_0);
  CHECK(ggml_type_dtype(GgmlType::Q6_K) == DType::Q6_K);
  CHECK_FALSE(ggml_type_dtype(GgmlType::Q2_K).has_value());
  CHECK(ggml_can_dequantize(GgmlType::Q6_K));
  CHECK_FALSE(ggml_can_dequantize(GgmlType::Q2_K));
}

TEST_CASE("loaders: dequantize rejects unsupported types and partial blocks") {
  std::vector<uint8_t> bytes(1024);
  std::vector<float> out(256);
  CHECK_THROWS_WITH_AS(dequantize_row(GgmlType::Q2_K, bytes.data(), out.data(), 256),
                       "[quant] no dequantiser for ggml type q2_K", Error);
  CHECK_THROWS_WITH_AS(dequantize_row(GgmlType::Q4_0, bytes.data(), out.data(), 31),
                       doctest::Contains("[quant]"), Error);
  CHECK_THROWS_WITH_AS(dequantize_row(static_cast<GgmlType>(4), bytes.data(), out.data(), 32),
                       "[quant] unknown ggml type 4", Error);
}

TEST_CASE("loaders: dequantize f32, f16 and bf16") {
  const std::vector<float> f32 = {1.0f, -0.0f, 3.25e-20f, -7.5f};
  std::vector<uint8_t> bytes(16);
  std::memcpy(bytes.data(), f32.data(), 16);
  check_equal(dequantize(GgmlType::F32, bytes, 4), f32);

  const std::vector<uint16_t> halves = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000, 0x3555, 0x83FF};
  const std::vector<float> halves_expected = {1.0f,
                                              -2.0f,
                                              std::ldexp(1.0f, -24),
                                              65504.0f,
                                              -0.0f,
                                              std::ldexp(1.0f + 0x155 / 1024.0f, -2),
                                              -std::ldexp(1023.0f, -24)};
  bytes.assign(halves.size() * 2, 0);
  for (size_t i = 0; i < halves.size(); ++i) put16(bytes, 2 * i, halves[i]);
  std::vector<float> got = dequantize(GgmlType::F16, bytes, static_cast<int64_t>(halves.size()));
  check_equal(got, halves_expected);
  CHECK(std::signbit(got[4]));
  bytes.assign(2, 0);
  put16(bytes, 0, 0xFC00);
  CHECK(std::isinf(dequantize(GgmlType::F16, bytes, 1)[0]));

  const std::vector<uint16_t> bf = {0x3F80, 0xC040, 0x0001, 0x4049};
  const std::vector<float> bf_expected = {1.0f, -3.0f, std::ldexp(1.0f, -133),
                                          std::ldexp(1.0f + 0x49 / 128.0f, 1)};
  bytes.assign(8, 0);
  for (size_t i = 0; i < bf.size(); ++i) put16(bytes, 2 * i, bf[i]);
  check_equal(dequantize(GgmlType::BF16, bytes, 4), bf_expected);
}

TEST_CASE("loaders: dequantize q8_0") {
  std::vector<uint8_t> bytes(2 * 34);
  std::vector<float> expected(64);
  put16(bytes, 0, kHalfHalf);
  put16(bytes, 34, kHalfMinusTwo);
  for (int j = 0; j < 32; ++j) {
    const int q0 = j - 3;        // -3 .. 28
    const int q1 = 100 - 7 * j;  // 100 .. -117
    bytes[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q0));
    bytes[34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q1));
    expected[j] = 0.5f * static_cast<float>(q0);
    expected[32 + j] = -2.0f * static_cast<float>(q1);
  }
  check_equal(dequantize(GgmlType::Q8_0, bytes, 64), expected);
}

TEST_CASE("loaders: dequantize q4_0 and q4_1") {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (e * 5 + 1) % 16;
  std::vector<uint8_t> bytes(18);
  put16(bytes, 0, kHalfTwo);
  pack_nibbles(&bytes[2], q);
  std::vector<float> expected(32);
  for (int e = 0; e < 32; ++e) expected[e] = 2.0f * static_cast<float>(q[e] - 8);
  check_equal(dequantize(GgmlType::Q4_0, bytes, 32), expected);

  bytes.assign(20, 0);
  put16(bytes, 0, kHalfQuarter);
  put16(bytes, 2, kHalfMinusOne);
  pack_nibbles(&bytes[4], q);
  for (int e = 0; e < 32; ++e) expected[e] = 0.25f * static_cast<float>(q[e]) - 1.0f;
  check_equal(dequantize(GgmlType::Q4_1, bytes, 32), expected);
}

TEST_CASE("loaders: dequantize q5_0 and q5_1") {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (e * 7 + 3) % 32;
  std::vector<uint8_t> bytes(22);
  put16(bytes, 0, kHalfHalf);
  pack_high_bits(&bytes[2], q);
  pack_nibbles(&bytes[6], q);
  std::vector<float> expected(32);
  for (int e = 0; e < 32; ++e) expected[e] = 0.5f * static_cast<float>(q[e] - 16);
  check_equal(dequantize(GgmlType::Q5_0, bytes, 32), expected);

  for (int e = 0; e < 32; ++e) q[e] = 31 - e;
  bytes.assign(24, 0);
  put16(bytes, 0, kHalfOne);
  put16(bytes, 2, kHalfHalf);
  pack_high_bits(&bytes[4], q);
  pack_nibbles(&bytes[8], q);
  for (int e = 0; e < 32; ++e) expected[e] = static_cast<float>(q[e]) + 0.5f;
  check_equal(dequantize(GgmlType::Q5_1, bytes, 32), expected);
}

TEST_CASE("loaders: dequantize q4_k and q5_k") {
  // Q4_K: d, dmin, 12 scale bytes, 128 nibble bytes; chunk c of 32 bytes holds sub-blocks 2c
  // (low nibbles) and 2c + 1 (high nibbles).
  std::vector<uint8_t> bytes(144);
  put16(bytes, 0, kHalfHalf);
  put16(bytes, 2, kHalfQuarter);
  pack_k_scales(&bytes[4], kSc, kMin);
  std::vector<float> expected(256);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32, q = (e * 5 + 3) % 16;
    bytes[16 + 32 * (sub / 2) + l] |= static_cast<uint8_t>(sub % 2 == 0 ? q : q << 4);
    expected[e] = 0.5f * static_cast<float>(kSc[sub] * q) - 0.25f * static_cast<float>(kMin[sub]);
  }
  check_equal(dequantize(GgmlType::Q4_K, bytes, 256), expected);

  // Q5_K: as Q4_K plus 32 qh bytes after the scales; bit `sub` of qh[l] is bit 4.
  bytes.assign(176, 0);
  put16(bytes, 0, kHalfHalf);
  put16(bytes, 2, kHalfQuarter);
  pack_k_scales(&bytes[4], kSc, kMin);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32, l = e % 32, q = (e * 11 + 5) % 32;
    bytes[48 + 32 * (sub / 2) + l] |= static_cast<uint8_t>(sub % 2 == 0 ? (q & 15) : (q & 15) << 4);
    bytes[16 + l] |= static_cast<uint8_t>((q >> 4) << sub);
    expected[e] = 0.5f * static_cast<float>(kSc[sub] * q) - 0.25f * static_cast<float>(kMin[sub]);
  }
  check_equal(dequantize(GgmlType::Q5_K, bytes, 256), expected);
}

TEST_CASE("loaders: dequantize q6_k") {
  // 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d. Element e = 128 h + 32 k + l (k < 4):
  // low 4 bits in ql[64 h + l + 32 (k % 2)] (low nibble for k < 2, else high), high 2 bits in
  // qh[32 h + l] at bit 2 k; scale scales[e / 16].
  const int scales[16] = {1, -2, 3, -4, 5, -6, 7, -8, 16, -32, 64, -128, 127, 0, 9, -9};
  std::vector<uint8_t> bytes(210);
  for (int i = 0; i < 16; ++i)
    bytes[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(scales[i]));
  put16(bytes, 208, kHalfQuarter);
  std::vector<float> expected(256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32, q = (e * 37 + 11) % 64;
    bytes[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>(k < 2 ? (q & 15) : (q & 15) << 4);
    bytes[128 + 32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    expected[e] = 0.25f * static_cast<float>(scales[e / 16] * (q - 32));
  }
  check_equal(dequantize(GgmlType::Q6_K, bytes, 256), expected);
}
