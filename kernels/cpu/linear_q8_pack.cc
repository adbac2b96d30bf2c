// Packing GGUF rows into the integer linear's 16-row panels, stored in quads (linear_q8.h).
#include "kernels/cpu/linear_q8.h"

#include <algorithm>
#include <cstring>

namespace tessera::cpu::q8 {

namespace {

// One GGUF block as integers: q[e] the element's unsigned integer value (Q8_0: w + 128), the
// block's f16 scale bits d (and m / dmin), and the K-quants' integer sub-scales and mins.
struct Unpacked {
  uint8_t q[256];
  uint16_t d = 0, m = 0;
  int8_t scale[16];
  uint8_t min[8];
};

void unpack_block(DType dtype, const uint8_t* w, Unpacked& u) {
  switch (dtype) {
    case DType::Q8_0:
      u.d = u16_at(w);
      for (int e = 0; e < 32; ++e) u.q[e] = static_cast<uint8_t>(static_cast<int8_t>(w[2 + e]) + 128);
      return;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: {
      // Q4_1 and Q5_1 have m after d; Q5_0 and Q5_1 then qh (bit j: bit 4 of element j); then
      // the nibbles.
      const bool has_m = dtype == DType::Q4_1 || dtype == DType::Q5_1;
      const bool five = dtype == DType::Q5_0 || dtype == DType::Q5_1;
      const int at = has_m ? 4 : 2;
      u.d = u16_at(w);
      if (has_m) u.m = u16_at(w + 2);
      uint32_t qh = 0;
      if (five) std::memcpy(&qh, w + at, 4);
      const uint8_t* nibbles = w + at + (five ? 4 : 0);
      for (int j = 0; j < 16; ++j) {
        u.q[j] = static_cast<uint8_t>((nibbles[j] & 0x0F) | (((qh >> j) & 1) << 4));
        u.q[j + 16] = static_cast<uint8_t>((nibbles[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      // Q5_K holds 32 bytes of fifth bits (bit s of byte l: element 32 s + l) before the nibbles.
      const bool five = dtype == DType::Q5_K;
      u.d = u16_at(w);
      u.m = u16_at(w + 2);
      int scale[8], min[8];
      k_scale_min(w + 4, scale, min);
      for (int s = 0; s < 8; ++s) {
        u.scale[s] = static_cast<int8_t>(scale[s]);
        u.min[s] = static_cast<uint8_t>(min[s]);
        const uint8_t* chunk = w + (five ? 48 : 16) + 32 * (s / 2);
        for (int l = 0; l < 32; ++l)
          u.q[32 * s + l] = static_cast<uint8_t>(((chunk[l] >> (4 * (s % 2))) & 0x0F) |
                                                 (five ? ((w[16 + l] >> s) & 1) << 4 : 0));
      }
      return;
    }
    case DType::Q6_K: {
      u.d = u16_at(w + 208);
      for (int j = 0; j < 16; ++j) u.scale[j] = static_cast<int8_t>(w[192 + j]);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = w + 64 * half;
        const uint8_t* qh = w + 128 + 32 * half;
        uint8_t* q = u.q + 128 * half;
        for (int l = 0; l < 32; ++l) {
          q[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
          q[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
          q[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
          q[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
      }
      return;
    }
    default:
      return;
  }
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Nibble vectors of `elements` values of row r in a block's integer part `ints`: vector c, byte
// 4r + i = q[8c + i] | q[8c + 4 + i] << 4.
void put_nibbles(DType dtype, uint8_t* ints, int r, const uint8_t* q, int elements) {
  for (int c = 0; c < elements / 8; ++c)
    for (int i = 0; i < 4; ++i)
      ints[nibble_vector_at(dtype, c) + 4 * r + i] =
          static_cast<uint8_t>((q[8 * c + i] & 0x0F) | ((q[8 * c + 4 + i] & 0x0F) << 4));
}

// Fifth bits of `elements` values of row r: bit 4r + i of the 8 bytes of part t = bit 4 of
// q[4t + i].
// (Row r's four bits of a part are one nibble of its byte r / 2.)
void put_bit4(DType dtype, uint8_t* ints, int r, const uint8_t* q, int elements) {
  for (int t = 0; t < elements / 4; ++t) {
    const int nibble = ((q[4 * t] >> 4) & 1) | ((q[4 * t + 1] >> 3) & 2) | ((q[4 * t + 2] >> 2) & 4) | ((q[4 * t + 3] >> 1) & 8);
    ints[bit4_part_at(dtype, t) + r / 2] |= static_cast<uint8_t>(nibble << (4 * (r % 2)));
  }
}

// Row r's block in its panel: integer part at `ints`, scale part at `scales` (linear_q8.h).
void put_block(DType dtype, const Unpacked& u, int r, uint8_t* ints, uint8_t* scales) {
  switch (dtype) {
    case DType::Q8_0:
      put16(scales + 2 * r, u.d);
      for (int t = 0; t < 8; ++t)
        for (int i = 0; i < 4; ++i) ints[64 * t + 4 * r + i] = u.q[4 * t + i];
      return;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
      put16(scales + 2 * r, u.d);
      if (dtype == DType::Q4_1 || dtype == DType::Q5_1) put16(scales + 32 + 2 * r, u.m);
      put_nibbles(dtype, ints, r, u.q, 32);
      if (dtype == DType::Q5_0 || dtype == DType::Q5_1) put_bit4(dtype, ints, r, u.q, 32);
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      put16(scales + 2 * r, u.d);
      put16(scales + 32 + 2 * r, u.m);
      for (int s = 0; s < 8; ++s) {
        scales[64 + 16 * s + r] = static_cast<uint8_t>(u.scale[s]);
        scales[192 + 16 * s + r] = u.min[s];
      }
      put_nibbles(dtype, ints, r, u.q, 256);
      if (dtype == DType::Q5_K) put_bit4(dtype, ints, r, u.q, 256);
      return;
    case DType::Q6_K:
      put16(scales + 2 * r, u.d);
      for (int j = 0; j < 16; ++j) scales[32 + 16 * j + r] = static_cast<uint8_t>(u.scale[j]);
      put_nibbles(dtype, ints, r, u.q, 256);
      for (int h = 0; h < 16; ++h)
        for (int i = 0; i < 4; ++i) {
          uint8_t bits = 0;
          for (int m = 0; m < 4; ++m) bits = static_cast<uint8_t>(bits | (((u.q[16 * h + 4 * m + i] >> 4) & 3) << (2 * m)));
          ints[high_vector_at(h) + 4 * r + i] = bits;
        }
      return;
    default:
      return;
  }
}

}  // namespace

int64_t quad_bytes(DType dtype, int64_t panels, int64_t k) {
  const int64_t block = dtype_block_size(dtype);
  if (panel_int_bytes(dtype) == 0 || block <= 0 || k % block != 0) return 0;
  return k / block * quad_block_stride(dtype, panels);
}

int64_t packed_bytes(DType dtype, int64_t n, int64_t k) {
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows, rest = panels % kQuadPanels;
  return panels / kQuadPanels * quad_bytes(dtype, kQuadPanels, k) + (rest != 0 ? quad_bytes(dtype, rest, k) : 0);
}

void pack_panel(DType dtype, const uint8_t* rows, int64_t row_bytes, int64_t first_lane, int64_t count, int64_t k,
                uint8_t* quad, int64_t panels, int64_t g) {
  const int64_t blocks = k / dtype_block_size(dtype), block_bytes = dtype_block_bytes(dtype);
  const Quad view = quad_view(dtype, quad, panels);
  uint8_t* scales = quad + g * panel_scale_bytes(dtype);
  uint8_t* ints = quad + view.ints_at + g * panel_int_bytes(dtype);
  Unpacked u;
  for (int64_t r = 0; r < count; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      unpack_block(dtype, rows + r * row_bytes + b * block_bytes, u);
      put_block(dtype, u, static_cast<int>(first_lane + r), ints + b * view.block_stride, scales + b * view.block_stride);
    }
}

void pack_weight(DType dtype, const uint8_t* w, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t row_bytes = dtype_bytes(dtype, k), full_quad = quad_bytes(dtype, kQuadPanels, k);
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  std::memset(dst, 0, static_cast<size_t>(packed_bytes(dtype, n, k)));
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t quad = p / kQuadPanels, in_quad = std::min(kQuadPanels, panels - quad * kQuadPanels);
    pack_panel(dtype, w + p * kPanelRows * row_bytes, row_bytes, 0, std::min(kPanelRows, n - p * kPanelRows), k,
               dst + quad * full_quad, in_quad, p % kQuadPanels);
  }
}

}  // namespace tessera::cpu::q8
