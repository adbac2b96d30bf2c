// PNG images through libpng: 8-bit images in, 8-bit RGB or RGBA out.
//
// Reading accepts 8-bit gray, gray+alpha, RGB and RGBA, and palette images (expanded, with
// tRNS becoming alpha), interlaced or not; 16-bit and sub-8-bit gray images are rejected. The
// pixel values are the stored ones: no gamma or colour-profile conversion is applied. Gray is
// replicated to RGB; a missing alpha channel is filled with 255; an unwanted alpha channel is
// dropped (not composited). Any failure (unreadable file, bad signature, CRC error, truncated
// or corrupt data, unsupported format) throws tessera::Error "[png] <name>: <libpng's reason>".
// libpng's error longjmp never crosses C++ frames: it lands in small functions that own no C++
// objects, and the error turns into an Error after they return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace tessera {

// Row-major interleaved 8-bit pixels: pixels[(y * width + x) * channels + c].
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;  // 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;
};

// Decodes PNG bytes into `channels` (3 or 4) channels. `name` appears in error messages.
Image decode_png(std::span<const std::byte> bytes, int channels = 3,
                 const std::string& name = "<memory>");
Image read_png(const std::string& path, int channels = 3);

// Encodes an RGB or RGBA image (8-bit, no interlacing, default compression).
std::vector<std::byte> encode_png(const Image& image);
void write_png(const std::string& path, const Image& image);

// Planar float views for networks: [1, channels, height, width] with pixel / divisor per value
// (divisor 1 keeps [0, 255]; 255 gives [0, 1] as torchvision's to_tensor does), and back:
// value * divisor clipped to [0, 255] and rounded half to even (NaN becomes 0). `planar` must
// hold 1 x channels x height x width values.
std::vector<float> image_to_planar(const Image& image, float divisor = 1.0f);
Image planar_to_image(std::span<const float> planar, const Shape& shape, float divisor = 1.0f);

}  // namespace tessera
