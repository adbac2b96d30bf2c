// libFuzzer target: PNG bytes through the image loader. Decode as RGB and as RGBA (the colour
// channels must agree), encode what was decoded and decode it again (it must round trip
// exactly), and go through the planar float views and back (divisor 1 is exact). Any outcome
// but a tessera::Error (crash, sanitizer report, other exception, a mismatch) is a finding.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/error.h"
#include "loaders/png.h"

namespace {

using namespace tessera;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "png_fuzz: %s\n", what);
  __builtin_trap();
}

std::optional<Image> decode(std::span<const std::byte> bytes, int channels) {
  try {
    return decode_png(bytes, channels, "fuzz.png");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Pixels the IHDR chunk (first after the signature) declares, 0 when there is none. Headers the
// loader accepts may declare up to 2^28 pixels (a 1 GiB buffer, allocated before the rows are
// decoded); the fuzzer skips those above 2^24 to keep iterations fast, but still feeds it the
// ones over the loader's limit, which must be refused before any allocation.
uint64_t declared_pixels(const uint8_t* data, size_t size) {
  if (size < 24) return 0;
  auto be32 = [&](size_t at) {
    return uint32_t{data[at]} << 24 | uint32_t{data[at + 1]} << 16 | uint32_t{data[at + 2]} << 8 | data[at + 3];
  };
  return uint64_t{be32(16)} * be32(20);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint64_t pixels = declared_pixels(data, size);
  if (pixels > (uint64_t{1} << 24) && pixels <= (uint64_t{1} << 28)) return 0;
  // A heap copy of exactly the input, so a read past the end is an ASan report.
  const std::vector<uint8_t> copy(data, data + size);
  const auto bytes = std::as_bytes(std::span<const uint8_t>(copy));
  const std::optional<Image> rgb = decode(bytes, 3);
  const std::optional<Image> rgba = decode(bytes, 4);
  if (rgb.has_value() != rgba.has_value()) finding("RGB and RGBA decoding disagree on success");
  if (!rgb) return 0;
  if (rgb->width != rgba->width || rgb->height != rgba->height) finding("RGB and RGBA sizes differ");
  const size_t count = static_cast<size_t>(rgb->width * rgb->height);
  if (rgb->channels != 3 || rgba->channels != 4 || rgb->pixels.size() != count * 3 || rgba->pixels.size() != count * 4)
    finding("pixel buffers of the wrong size");
  for (size_t i = 0; i < count; ++i)
    for (size_t c = 0; c < 3; ++c)
      if (rgb->pixels[i * 3 + c] != rgba->pixels[i * 4 + c]) finding("RGB and RGBA colour channels differ");

  for (const Image* image : {&*rgb, &*rgba}) {
    try {
      const std::vector<std::byte> encoded = encode_png(*image);
      const Image again = decode_png(encoded, image->channels, "round trip");
      if (again.width != image->width || again.height != image->height || again.pixels != image->pixels)
        finding("encode then decode does not round trip");
      const Shape shape{1, image->channels, image->height, image->width};
      const std::vector<float> planar = image_to_planar(*image);
      const Image back = planar_to_image(planar, shape);
      if (back.pixels != image->pixels) finding("planar round trip differs");
    } catch (const Error& e) {
      std::fprintf(stderr, "png_fuzz: %s\n", e.what());
      finding("a decoded image cannot be encoded or viewed");
    }
  }
  return 0;
}
