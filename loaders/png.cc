#include "loaders/png.h"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>

#include "absl/strings/str_cat.h"
#include "engine/error.h"

namespace tessera {
namespace {

// Images larger than this many pixels are refused before any buffer is allocated, so a corrupt
// header cannot ask for gigabytes.
constexpr uint64_t kMaxPixels = uint64_t{1} << 28;
constexpr uint32_t kMaxSide = 1u << 16;
constexpr png_alloc_size_t kMaxChunkBytes = 8'000'000;  // libpng's own suggested bound

// State shared with libpng's callbacks. Trivially destructible on purpose: libpng leaves an
// error by longjmp, which may skip only frames without destructors to run.
struct PngIo {
  const std::byte* data = nullptr;  // reading
  size_t size = 0;
  size_t pos = 0;
  std::vector<std::byte>* out = nullptr;  // writing
  char message[256] = "unknown libpng error";
};

PngIo& io_of_error(png_structp png) {
  return *static_cast<PngIo*>(png_get_error_ptr(png));
}

void on_error(png_structp png, png_const_charp message) {
  PngIo& io = io_of_error(png);
  std::snprintf(io.message, sizeof(io.message), "%s",
                message != nullptr ? message : "libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // warnings (e.g. unknown chunks) are not failures

void on_read(png_structp png, png_bytep out, size_t count) {
  PngIo& io = *static_cast<PngIo*>(png_get_io_ptr(png));
  if (count > io.size - io.pos) png_error(png, "file is truncated");
  std::memcpy(out, io.data + io.pos, count);
  io.pos += count;
}

void on_write(png_structp png, png_bytep data, size_t count) {
  PngIo& io = *static_cast<PngIo*>(png_get_io_ptr(png));
  bool failed = false;
  try {
    const std::byte* bytes = reinterpret_cast<const std::byte*>(data);
    io.out->insert(io.out->end(), bytes, bytes + count);
  } catch (const std::bad_alloc&) {
    failed = true;
  }
  if (failed)
    png_error(png, "out of memory");  // outside the handler: longjmp must not leave a catch block
}

void on_flush(png_structp) {}

struct ReadHeader {
  uint32_t width = 0, height = 0;
  size_t row_bytes = 0;
};

// Reads the header and sets the transforms that give 8-bit `channels`-channel rows. Only libpng
// and trivially destructible state live in this frame (setjmp target). False on error, with
// the reason in the PngIo.
bool read_header(png_structp png, png_infop info, int channels, ReadHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, kMaxSide, kMaxSide);
  // libpng allocates a text chunk's declared length (up to 2^31 bytes) before reading its data,
  // so an 81-byte file could ask for gigabytes. Only the critical chunks and tRNS matter here (no
  // gamma, profile or text is used): libpng skips every other chunk without buffering it, and
  // caps what any remaining chunk handler may allocate.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_set_chunk_malloc_max(png, kMaxChunkBytes);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info),
                    height = png_get_image_height(png, info);
  const int bit_depth = png_get_bit_depth(png, info), color_type = png_get_color_type(png, info);
  if (static_cast<uint64_t>(width) * height > kMaxPixels)
    png_error(png, "image has too many pixels");
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_set_palette_to_rgb(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  } else if (bit_depth != 8) {
    png_error(png, bit_depth == 16 ? "16-bit images are not supported"
                                   : "gray images below 8 bits are not supported");
  }
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA)
    png_set_gray_to_rgb(png);
  const bool has_alpha =
      (color_type & PNG_COLOR_MASK_ALPHA) != 0 ||
      (color_type == PNG_COLOR_TYPE_PALETTE && png_get_valid(png, info, PNG_INFO_tRNS));
  if (channels == 3 && has_alpha) png_set_strip_alpha(png);
  if (channels == 4 && !has_alpha) png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != channels || png_get_bit_depth(png, info) != 8)
    png_error(png, "unsupported pixel format after conversion");
  header->width = width;
  header->height = height;
  header->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool read_rows(png_structp png, png_infop info, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

bool write_rows(png_structp png, png_infop info, uint32_t width, uint32_t height, int color_type,
                png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, width, height, 8, color_type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, info);
  return true;
}

// Frees libpng's structures on every path out of the C++ functions below.
struct ReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ReadGuard() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};
struct WriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~WriteGuard() { png_destroy_write_struct(&png, info != nullptr ? &info : nullptr); }
};

void check_channels(int channels, const std::string& name) {
  if (channels != 3 && channels != 4)
    throw Error(
        absl::StrCat("[png] ", name, ": channels must be 3 (RGB) or 4 (RGBA), got ", channels));
}

}  // namespace

Image decode_png(std::span<const std::byte> bytes, int channels, const std::string& name) {
  check_channels(channels, name);
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0)
    throw Error(absl::StrCat("[png] ", name, ": not a PNG file (bad signature)"));
  PngIo io;
  io.data = bytes.data();
  io.size = bytes.size();
  ReadGuard guard;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (guard.png == nullptr)
    throw Error(absl::StrCat("[png] ", name, ": cannot create a libpng reader"));
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr)
    throw Error(absl::StrCat("[png] ", name, ": cannot create a libpng reader"));
  png_set_read_fn(guard.png, &io, on_read);
  ReadHeader header;
  if (!read_header(guard.png, guard.info, channels, &header))
    throw Error(absl::StrCat("[png] ", name, ": ", io.message));
  Image image;
  image.width = header.width;
  image.height = header.height;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(header.height) * header.row_bytes);
  std::vector<png_bytep> rows(header.height);
  for (uint32_t y = 0; y < header.height; ++y)
    rows[y] = reinterpret_cast<png_bytep>(image.pixels.data()) +
              static_cast<size_t>(y) * header.row_bytes;
  if (!read_rows(guard.png, guard.info, rows.data()))
    throw Error(absl::StrCat("[png] ", name, ": ", io.message));
  return image;
}

Image read_png(const std::string& path, int channels) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(absl::StrCat("[png] ", path, ": cannot open: ", std::strerror(errno)));
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) throw Error(absl::StrCat("[png] ", path, ": read failed"));
  return decode_png(std::as_bytes(std::span<const char>(bytes)), channels, path);
}

std::vector<std::byte> encode_png(const Image& image) {
  check_channels(image.channels, "<encode>");
  if (image.width <= 0 || image.height <= 0 || image.width > kMaxSide || image.height > kMaxSide)
    throw Error(absl::StrCat("[png] cannot encode an image of ", image.width, "x", image.height,
                             " pixels"));
  const size_t row_bytes = static_cast<size_t>(image.width) * static_cast<size_t>(image.channels);
  if (image.pixels.size() != row_bytes * static_cast<size_t>(image.height))
    throw Error(absl::StrCat("[png] image of ", image.width, "x", image.height, "x", image.channels,
                             " holds ", image.pixels.size(), " bytes"));
  std::vector<std::byte> out;
  PngIo io;
  io.out = &out;
  WriteGuard guard;
  guard.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, on_error, on_warning);
  if (guard.png == nullptr) throw Error("[png] cannot create a libpng writer");
  guard.info = png_create_info_struct(guard.png);
  if (guard.info == nullptr) throw Error("[png] cannot create a libpng writer");
  png_set_write_fn(guard.png, &io, on_write, on_flush);
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  for (size_t y = 0; y < rows.size(); ++y)
    rows[y] = const_cast<png_bytep>(image.pixels.data() +
                                    y * row_bytes);  // libpng does not write to them
  const int color_type = image.channels == 4 ? PNG_COLOR_TYPE_RGB_ALPHA : PNG_COLOR_TYPE_RGB;
  if (!write_rows(guard.png, guard.info, static_cast<uint32_t>(image.width),
                  static_cast<uint32_t>(image.height), color_type, rows.data()))
    throw Error(absl::StrCat("[png] encoding failed: ", io.message));
  return out;
}

void write_png(const std::string& path, const Image& image) {
  const std::vector<std::byte> bytes = encode_png(image);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error(absl::StrCat("[png] ", path, ": cannot create: ", std::strerror(errno)));
  file.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  if (!file.flush()) throw Error(absl::StrCat("[png] ", path, ": write failed"));
}

std::vector<float> image_to_planar(const Image& image, float divisor) {
  const size_t plane = static_cast<size_t>(image.width * image.height);
  const size_t channels = static_cast<size_t>(image.channels);
  std::vector<float> out(plane * channels);
  for (size_t c = 0; c < channels; ++c)
    for (size_t i = 0; i < plane; ++i)
      out[c * plane + i] = static_cast<float>(image.pixels[i * channels + c]) / divisor;
  return out;
}

Image planar_to_image(std::span<const float> planar, const Shape& shape, float divisor) {
  if (shape.size() != 4 || shape[0] != 1 || (shape[1] != 3 && shape[1] != 4) || shape[2] <= 0 ||
      shape[3] <= 0 || static_cast<int64_t>(planar.size()) != shape_volume(shape))
    throw Error(absl::StrCat("[png] planar pixels of shape ", shape_string(shape), " (",
                             planar.size(), " values) are not [1, 3 or 4, H, W]"));
  Image image;
  image.channels = static_cast<int>(shape[1]);
  image.height = shape[2];
  image.width = shape[3];
  const size_t plane = static_cast<size_t>(image.width * image.height);
  const size_t channels = static_cast<size_t>(image.channels);
  image.pixels.resize(plane * channels);
  for (size_t c = 0; c < channels; ++c) {
    for (size_t i = 0; i < plane; ++i) {
      const float v = planar[c * plane + i] * divisor;
      // Clip, then round half to even (NaN becomes 0).
      const float clipped = std::isnan(v) ? 0.0f : std::clamp(v, 0.0f, 255.0f);
      image.pixels[i * channels + c] = static_cast<uint8_t>(std::nearbyint(clipped));
    }
  }
  return image;
}

}  // namespace tessera
