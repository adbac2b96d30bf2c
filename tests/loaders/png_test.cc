// PNG reading and writing through libpng: round trips, format conversions, and corrupt or
// truncated files raising tessera::Error "[png] ..." (never a crash, never a longjmp escape).
#include "loaders/png.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"

using namespace tessera;

namespace {

// L 3x2, written by PIL.
const std::vector<uint8_t> kGray = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x00, 0x00, 0x00, 0xb8,
    0x1f, 0x39, 0xc6, 0x00, 0x00, 0x00, 0x10, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x64,
    0x30, 0x32, 0x62, 0x98, 0x76, 0xe2, 0x3f, 0x00, 0x06, 0x87, 0x02, 0xc3, 0xed, 0xb4, 0x13,
    0xac, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};
// LA 3x2, written by PIL.
const std::vector<uint8_t> kGrayAlpha = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x08, 0x04, 0x00, 0x00, 0x00, 0x37, 0x7d, 0xae,
    0x91, 0x00, 0x00, 0x00, 0x16, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x64, 0xf8, 0x6f, 0x74,
    0xce, 0xe8, 0x1c, 0xc3, 0xb4, 0xcc, 0x13, 0xe6, 0xff, 0x19, 0x00, 0x29, 0xc8, 0x05, 0xfe, 0x38,
    0xda, 0x4c, 0x89, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};
// P 3x2, written by PIL.
const std::vector<uint8_t> kPalette = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
    0x52, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x02, 0x03, 0x00, 0x00, 0x00, 0xe0,
    0x1a, 0x8e, 0x89, 0x00, 0x00, 0x00, 0x09, 0x50, 0x4c, 0x54, 0x45, 0xff, 0x00, 0x00, 0x00,
    0xff, 0x00, 0x00, 0x00, 0xff, 0x2d, 0x4a, 0xcd, 0x8a, 0x00, 0x00, 0x00, 0x03, 0x74, 0x52,
    0x4e, 0x53, 0xff, 0x80, 0x00, 0x7f, 0x6d, 0x68, 0x78, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44,
    0x41, 0x54, 0x78, 0x9c, 0x63, 0x90, 0x60, 0x98, 0x00, 0x00, 0x00, 0xdc, 0x00, 0xa9, 0x6c,
    0xe7, 0xc0, 0x23, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};
// I;16 3x2, written by PIL.
const std::vector<uint8_t> kGray16 = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x10, 0x00, 0x00, 0x00, 0x00, 0xe8, 0x8f, 0xe5,
    0x85, 0x00, 0x00, 0x00, 0x16, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x60, 0x60, 0x7e,
    0xf1, 0xff, 0x3f, 0x23, 0x03, 0x2b, 0x03, 0x23, 0x03, 0x23, 0x00, 0x1a, 0x52, 0x02, 0xf2, 0xc6,
    0xb1, 0xbe, 0xfd, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};
// 1 3x2, written by PIL.
const std::vector<uint8_t> kGray1 = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
    0x44, 0x52, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x01, 0x00, 0x00, 0x00,
    0x00, 0xb5, 0x0f, 0x5b, 0xb7, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78,
    0x9c, 0x63, 0x48, 0x60, 0x72, 0x00, 0x00, 0x01, 0x68, 0x00, 0xa3, 0xfe, 0xd6, 0x02,
    0xec, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

std::span<const std::byte> as_span(const std::vector<uint8_t>& bytes) {
  return std::as_bytes(std::span<const uint8_t>(bytes));
}

Image random_image(int64_t width, int64_t height, int channels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Image image;
  image.width = width;
  image.height = height;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(width * height * channels));
  for (uint8_t& p : image.pixels) p = static_cast<uint8_t>(rng());
  return image;
}

std::vector<uint8_t> to_bytes(const std::vector<std::byte>& bytes) {
  std::vector<uint8_t> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = static_cast<uint8_t>(bytes[i]);
  return out;
}

}  // namespace

TEST_CASE("loaders: png round trips RGB and RGBA, in memory and through a file") {
  for (int channels : {3, 4}) {
    CAPTURE(channels);
    const Image image = random_image(13, 7, channels, 5 + static_cast<uint64_t>(channels));
    const std::vector<std::byte> bytes = encode_png(image);
    const Image back = decode_png(bytes, channels);
    CHECK(back.width == 13);
    CHECK(back.height == 7);
    CHECK(back.channels == channels);
    CHECK(back.pixels == image.pixels);
    const std::string path = "/tmp/tessera_png_" + std::to_string(::getpid()) + ".png";
    write_png(path, image);
    CHECK(read_png(path, channels).pixels == image.pixels);
    std::remove(path.c_str());
  }
}

TEST_CASE("loaders: png converts between RGB and RGBA, gray, gray+alpha and palettes") {
  const Image rgba = random_image(4, 3, 4, 9);
  const Image rgb = decode_png(encode_png(rgba), 3);  // alpha dropped, not composited
  for (size_t i = 0; i < 12; ++i)
    for (size_t c = 0; c < 3; ++c) CHECK(rgb.pixels[i * 3 + c] == rgba.pixels[i * 4 + c]);
  const Image filled = decode_png(encode_png(rgb), 4);  // alpha filled with 255
  for (size_t i = 0; i < 12; ++i) CHECK(filled.pixels[i * 4 + 3] == 255);

  const std::vector<uint8_t> gray = {0, 50, 100, 150, 200, 255};
  const Image g = decode_png(as_span(kGray), 3);
  REQUIRE(g.pixels.size() == 18);
  for (size_t i = 0; i < 6; ++i)
    for (size_t c = 0; c < 3; ++c) CHECK(g.pixels[i * 3 + c] == gray[i]);
  const Image ga = decode_png(as_span(kGrayAlpha), 4);
  REQUIRE(ga.pixels.size() == 24);
  for (size_t i = 0; i < 6; ++i) {
    CHECK(ga.pixels[i * 4] == gray[i]);
    CHECK(ga.pixels[i * 4 + 2] == gray[i]);
    CHECK(ga.pixels[i * 4 + 3] == 255 - gray[i]);
  }
  // Palette red, green, blue with tRNS alpha 255, 128, 0; indices [[0, 1, 2], [2, 1, 0]].
  const Image p = decode_png(as_span(kPalette), 4);
  CHECK(p.pixels == std::vector<uint8_t>{255, 0, 0,   255, 0, 255, 0, 128, 0,   0, 255, 0,
                                         0,   0, 255, 0,   0, 255, 0, 128, 255, 0, 0,   255});
  CHECK(decode_png(as_span(kPalette), 3).pixels.size() == 18);
}

TEST_CASE("loaders: png rejects unsupported formats and bad arguments") {
  CHECK_THROWS_WITH_AS(decode_png(as_span(kGray16), 3, "g16.png"),
                       "[png] g16.png: 16-bit images are not supported", Error);
  CHECK_THROWS_WITH_AS(decode_png(as_span(kGray1), 3), doctest::Contains("below 8 bits"), Error);
  CHECK_THROWS_WITH_AS(decode_png(as_span(kGray), 2), doctest::Contains("channels must be 3"),
                       Error);
  Image bad = random_image(2, 2, 3, 1);
  bad.pixels.pop_back();
  CHECK_THROWS_WITH_AS(encode_png(bad), doctest::Contains("holds 11 bytes"), Error);
  bad.width = 0;
  CHECK_THROWS_AS(encode_png(bad), Error);
  CHECK_THROWS_WITH_AS(read_png("/nonexistent/x.png"),
                       doctest::Contains("[png] /nonexistent/x.png: cannot open"), Error);
  CHECK_THROWS_WITH_AS(write_png("/nonexistent/x.png", random_image(2, 2, 3, 1)),
                       doctest::Contains("cannot create"), Error);
}

TEST_CASE("loaders: png truncated at every offset, or with a corrupt chunk, is an error") {
  const std::vector<uint8_t> bytes = to_bytes(encode_png(random_image(6, 5, 4, 3)));
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    CAPTURE(cut);
    const std::vector<uint8_t> part(bytes.begin(),
                                    bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    CHECK_THROWS_WITH_AS(decode_png(as_span(part), 4, "t.png"), doctest::Contains("[png] t.png: "),
                         Error);
  }
  std::vector<uint8_t> wrong = bytes;
  wrong[1] = 'Q';
  CHECK_THROWS_WITH_AS(decode_png(as_span(wrong), 3), doctest::Contains("not a PNG file"), Error);
  wrong = bytes;
  wrong[16] ^= 0x01;  // image width inside IHDR: its CRC no longer matches
  CHECK_THROWS_WITH_AS(decode_png(as_span(wrong), 3), doctest::Contains("CRC"), Error);
  wrong = bytes;
  wrong[bytes.size() - 20] ^= 0x40;  // inside IDAT
  CHECK_THROWS_AS(decode_png(as_span(wrong), 3), Error);
}

TEST_CASE("loaders: png random corruption never crashes") {
  const std::vector<uint8_t> good = to_bytes(encode_png(random_image(9, 8, 3, 4)));
  const uint64_t seed = 77;
  std::mt19937_64 rng(seed);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i)
      bytes[8 + rng() % (bytes.size() - 8)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      const Image image = decode_png(as_span(bytes), 3);
      CHECK(image.pixels.size() == static_cast<size_t>(image.width * image.height * 3));
    } catch (const Error& e) {
      ++rejected;
      CHECK_MESSAGE(std::string(e.what()).rfind("[png] ", 0) == 0,
                    "seed " << seed << ": " << e.what());
    }
  }
  MESSAGE("png random corruption: " << rejected << " of 2000 rejected (seed " << seed << ")");
  CHECK(rejected > 1000);
}

TEST_CASE("loaders: png planar float views divide, clip and round") {
  const Image image = random_image(5, 4, 3, 8);
  const std::vector<float> planar = image_to_planar(image, 255.0f);
  CHECK(planar[0] == static_cast<float>(image.pixels[0]) / 255.0f);
  CHECK(planar[20] == static_cast<float>(image.pixels[1]) / 255.0f);  // channel 1 of pixel 0
  CHECK(planar_to_image(planar, {1, 3, 4, 5}, 255.0f).pixels == image.pixels);
  const Image clipped =
      planar_to_image(std::vector<float>{-3, 0.5f, 1.5f, 2.5f, 254.6f, 300, NAN, 7}, {1, 4, 1, 2});
  CHECK(clipped.pixels == std::vector<uint8_t>{0, 2, 255, 0, 0, 2, 255, 7});  // half to even
  CHECK_THROWS_AS(planar_to_image(planar, {1, 3, 4, 4}), Error);
}
