// The real conv nets (loaders/taesd.h, loaders/rdn.h) against PyTorch goldens written by
// scripts/reference_conv_nets.py (float64 PyTorch on the same weights), and the upscaler on its
// own 128x128 fixture. Tolerance: every output element within 1e-4 of the golden output's
// largest magnitude (our kernels store float32 between layers; the goldens do not round).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/session.h"
#include "loaders/png.h"
#include "loaders/rdn.h"
#include "loaders/taesd.h"
#include "tests/models/model_files.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

constexpr double kRelativeTolerance = 1e-4;

using NetBuilder = std::unique_ptr<Graph> (*)(const std::string&, const Shape&);

void check_golden(const std::string& net, const std::string& weights, NetBuilder build,
                  const char* input, const char* output) {
  if (!have_conv_model(weights)) return;
  const Npy x = read_npy(net + "_input.npy");
  const Npy want = read_npy(net + "_output.npy");
  std::unique_ptr<Graph> g = build(conv_model_path(weights), x.shape);
  REQUIRE(g->node(g->find_output(output)).shape == want.shape);
  GraphSession s(*g);
  const auto start = std::chrono::steady_clock::now();
  s.write(input, Box::full(x.shape), x.values);
  const std::vector<float> got = s.read<float>(output, Box::full(want.shape));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Agreement a = agreement(got, want.values);
  MESSAGE(net, " ", shape_string(x.shape), " -> ", shape_string(want.shape), ": max abs error ",
          a.max_abs, ", relative to max |golden| ", a.relative(), " (", seconds, " s)");
  CHECK(a.relative() <= kRelativeTolerance);
}

}  // namespace

TEST_CASE("models: taef2 encoder matches PyTorch") {
  check_golden("taef2_encoder", "taesd/taef2_encoder.safetensors", taef2_encoder, "image",
               "latent");
}

TEST_CASE("models: taef2 decoder matches PyTorch") {
  check_golden("taef2_decoder", "taesd/taef2_decoder.safetensors", taef2_decoder, "latent",
               "image");
}

TEST_CASE("models: taesana encoder matches PyTorch") {
  check_golden("taesana_encoder", "taesd/taesana_encoder.safetensors", taesana_encoder, "image",
               "latent");
}

TEST_CASE("models: rdn x2 matches PyTorch") {
  check_golden("rdn_x2", "upscaler/rdn_x2.safetensors", rdn_x2, "image", "upscaled");
}

TEST_CASE("models: rdn x2 upscales its fixture to the expected image within one level") {
  if (!have_conv_model("upscaler/rdn_x2.safetensors") ||
      !have_conv_model("upscaler/fixture_128.png"))
    return;
  const Image image = read_png(conv_model_path("upscaler/fixture_128.png"), 3);
  const Image expected = read_png(conv_model_path("upscaler/fixture_128_x2_expected.png"), 3);
  REQUIRE(expected.width == 2 * image.width);
  REQUIRE(expected.height == 2 * image.height);
  const Shape in_shape{1, 3, image.height, image.width};
  const Shape out_shape{1, 3, expected.height, expected.width};
  std::unique_ptr<Graph> g = rdn_x2(conv_model_path("upscaler/rdn_x2.safetensors"), in_shape);
  GraphSession s(*g);
  const auto start = std::chrono::steady_clock::now();
  s.write("image", Box::full(in_shape), image_to_planar(image));
  const Image got = planar_to_image(s.read<float>("upscaled", Box::full(out_shape)), out_shape);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int worst = 0;
  int64_t differing = 0;
  for (size_t i = 0; i < got.pixels.size(); ++i) {
    const int d = std::abs(static_cast<int>(got.pixels[i]) - static_cast<int>(expected.pixels[i]));
    worst = std::max(worst, d);
    differing += d != 0;
  }
  MESSAGE("rdn x2 fixture 128x128 -> 256x256: max difference ", worst, " level(s), ", differing,
          " of ", got.pixels.size(), " values differ (", seconds, " s)");
  CHECK(worst <= 1);
}

TEST_CASE("models: builders reject bad input shapes and missing weights") {
  CHECK_THROWS_WITH_AS(rdn_x2("/nonexistent.safetensors", {1, 3, 8, 8}),
                       doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(rdn_x2("/nonexistent.safetensors", {1, 4, 8, 8}),
                       doctest::Contains("[rdn] image shape"), Error);
  CHECK_THROWS_WITH_AS(taef2_decoder("/nonexistent.safetensors", {1, 16, 4, 4}),
                       doctest::Contains("[taesd] latent"), Error);
  CHECK_THROWS_WITH_AS(taesana_encoder("/nonexistent.safetensors", {3, 8, 8}),
                       doctest::Contains("[taesd] image"), Error);
  if (!have_conv_model("taesd/taef2_encoder.safetensors")) return;
  // The encoder's weights are not a decoder's: the first missing tensor is named.
  CHECK_THROWS_WITH_AS(
      taef2_decoder(conv_model_path("taesd/taef2_encoder.safetensors"), {1, 32, 2, 2}),
      doctest::Contains("tensor '1.weight': no such tensor"), Error);
}
