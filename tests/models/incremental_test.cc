// Edits of the real local conv nets (the RDN upscaler, the taesana encoder) recompute only the
// edited box grown by the receptive field, and give results bitwise equal to a fresh session.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "loaders/rdn.h"
#include "loaders/taesd.h"
#include "tests/models/model_files.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

std::vector<float> random_pixels(const Shape& shape, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(shape_volume(shape)));
  for (float& v : values) v = uniform(rng);
  return values;
}

// Writes `patch` (all channels) into rows [y0, y1) and columns [x0, x1) of a [1, C, H, W] image.
void paste(std::vector<float>& image, const Shape& shape, const Box& box,
           const std::vector<float>& patch) {
  size_t k = 0;
  for (int64_t c = box[1].begin; c < box[1].end; ++c)
    for (int64_t y = box[2].begin; y < box[2].end; ++y)
      for (int64_t x = box[3].begin; x < box[3].end; ++x)
        image[static_cast<size_t>((c * shape[2] + y) * shape[3] + x)] = patch[k++];
}

// The first convolution reading the input: what the edit dirties directly.
// The first conv reading `input`, or the relu after it when the conv is its only input (the
// session fuses relu(conv) into one conv2d step, whose counts go to the relu's node).
NodeId first_conv(const Graph& g, NodeId input) {
  for (NodeId id = 0; id < g.size(); ++id) {
    if (g.node(id).kind != OpKind::Conv2d || g.node(id).inputs[0] != input) continue;
    NodeId reader = -1;
    int readers = 0;
    for (NodeId r = id + 1; r < g.size(); ++r)
      for (NodeId in : g.node(r).inputs)
        if (in == id) reader = r, readers += 1;
    const bool relu = reader >= 0 && g.node(reader).kind == OpKind::Unary &&
                      g.node(reader).attrs_as<UnaryAttrs>().fn == UnaryFn::Relu;
    return readers == 1 && relu ? reader : id;
  }
  return -1;
}

struct EditRun {
  std::vector<float> edited;  // the output after the edit
  SessionStats full, edit;    // stats of the first full read and of the read after the edit
};

// Full write and read, then an edit of `box` and a read of the whole output; checks the result
// bitwise against a fresh session given the edited image at once.
EditRun run_edit(const Graph& g, const std::string& output, const Shape& in_shape, const Box& box,
                 float scale) {
  const Shape& out_shape = g.node(g.find_output(output)).shape;
  GraphSession s(g, SessionOptions{.hints = {{"image", InputHint::Kind::Edits}}});
  std::vector<float> image = random_pixels(in_shape, scale, 3);
  s.write("image", Box::full(in_shape), image);
  s.read<float>(output, Box::full(out_shape));
  EditRun run;
  run.full = s.stats();
  const std::vector<float> patch = random_pixels({1, 3, box[2].size(), box[3].size()}, scale, 4);
  s.write("image", box, patch);
  run.edited = s.read<float>(output, Box::full(out_shape));
  run.edit = s.stats();
  paste(image, in_shape, box, patch);
  GraphSession fresh(g);
  fresh.write("image", Box::full(in_shape), image);
  CHECK(run.edited == fresh.read<float>(output, Box::full(out_shape)));  // bitwise
  return run;
}

}  // namespace

TEST_CASE(
    "models: an rdn x2 edit recomputes the receptive field only, bitwise equal to a fresh run") {
  if (!have_conv_model("upscaler/rdn_x2.safetensors")) return;
  const Shape in_shape{1, 3, 40, 48};
  std::unique_ptr<Graph> g = rdn_x2(conv_model_path("upscaler/rdn_x2.safetensors"), in_shape);
  const Box edit{{0, 1}, {0, 3}, {16, 20}, {20, 25}};
  const EditRun run = run_edit(*g, "upscaled", in_shape, edit, 255.0f);
  // Nine low-resolution pixels of reach (eight 3x3 and one 5x5 convolution), x2, then SR's one.
  const int64_t rows = std::min<int64_t>(2 * 20 + 19, 80) - (2 * 16 - 19);
  const int64_t cols = std::min<int64_t>(2 * 25 + 19, 96) - (2 * 20 - 19);
  const NodeId out = g->find_output("upscaled");
  CHECK(run.edit.elements_per_node[static_cast<size_t>(out)] == 3 * rows * cols);
  const NodeId conv = first_conv(*g, g->find_input("image"));
  CHECK(run.edit.elements_per_node[static_cast<size_t>(conv)] == 64 * (4 + 2) * (5 + 2));
  MESSAGE("rdn x2 edit of 4x5 of 40x48 pixels: ", run.edit.elements_computed,
          " elements computed vs ", run.full.elements_computed, " for the full image (",
          run.edit.seconds, " s vs ", run.full.seconds, " s)");
  CHECK(run.edit.elements_computed * 3 < run.full.elements_computed);
}

TEST_CASE(
    "models: a taesana encoder edit recomputes the receptive field only, bitwise equal to a fresh "
    "run") {
  if (!have_conv_model("taesd/taesana_encoder.safetensors")) return;
  const Shape in_shape{1, 3, 128, 160};
  std::unique_ptr<Graph> g =
      taesana_encoder(conv_model_path("taesd/taesana_encoder.safetensors"), in_shape);
  const Box edit{{0, 1}, {0, 3}, {40, 48}, {64, 72}};
  const EditRun run = run_edit(*g, "latent", in_shape, edit, 1.0f);
  // The first convolution (stride 2, 3x3, padding 1) recomputes output rows o with
  // 2o - 1 < 48 and 2o + 1 >= 40, i.e. [20, 24], and likewise columns [32, 36].
  const NodeId conv = first_conv(*g, g->find_input("image"));
  CHECK(run.edit.elements_per_node[static_cast<size_t>(conv)] == 32 * 5 * 5);
  MESSAGE("taesana edit of 8x8 of 128x160 pixels: ", run.edit.elements_computed,
          " elements computed vs ", run.full.elements_computed, " for the full image (",
          run.edit.seconds, " s vs ", run.full.seconds, " s)");
  CHECK(run.edit.elements_computed * 3 < run.full.elements_computed);
}
