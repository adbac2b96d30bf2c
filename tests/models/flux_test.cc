// The FLUX.2-style transformer (loaders/flux.h) against diffusers' Flux2Transformer2DModel: goldens
// written by scripts/reference_flux.py (float64 PyTorch on the weights of flux_random_weights, see
// tests/models/golden/README.md), the latent packing and position ids against Flux2Pipeline's
// helpers, and incremental reads (nothing changed, a text edit, an image edit) against fresh
// sessions, bitwise.
#include "loaders/flux.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/session.h"
#include "tests/models/model_files.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

// Observed: 2.5e-7 (float32 kernels against float64 PyTorch); RoPE with base 10000 instead of 2000
// would be off by 7e-4.
constexpr double kRelativeTolerance = 1e-5;
constexpr float kTimestep = 0.7f;

// The golden's config: FluxConfig's defaults with two double-stream blocks (seed 1).
FluxConfig golden_config() {
  FluxConfig config;
  config.num_layers = 2;
  config.num_single_layers = 2;
  config.seed = 1;
  return config;
}

std::vector<int32_t> to_ints(const std::vector<float>& values) {
  return std::vector<int32_t>(values.begin(), values.end());
}

// A session with the golden's inputs written.
struct FluxRun {
  FluxConfig config = golden_config();
  Npy latent = read_npy("flux_latent.npy");
  Npy txt = read_npy("flux_txt.npy");
  int64_t height = latent.shape[1], width = latent.shape[2];
  int64_t image_tokens = height / 2 * width / 2, text_tokens = txt.shape[0];
  std::unique_ptr<Graph> graph =
      build_flux(config, flux_random_weights(config), image_tokens, text_tokens);

  void write_inputs(GraphSession& s, const std::vector<float>& txt_values) const {
    s.write("img", Box::full(Shape{image_tokens, config.in_channels}),
            pack_latents(latent.values, latent.shape[0], height, width));
    s.write("txt", Box::full(txt.shape), txt_values);
    s.write("timestep", Box{{0, 1}}, std::vector<float>{kTimestep});
    s.write("img_ids", Box::full(Shape{image_tokens, 4}), image_ids(height, width));
    s.write("txt_ids", Box::full(Shape{text_tokens, 4}), text_ids(text_tokens));
  }
  Box output_box() const { return Box::full(Shape{image_tokens, config.in_channels}); }
};

// The linear node reading input `name` directly (x_embedder / context_embedder).
NodeId embedder_of(const Graph& g, const char* name) {
  const NodeId input = g.find_input(name);
  for (NodeId id = 0; id < g.size(); ++id)
    if (g.node(id).kind == OpKind::Linear && g.node(id).inputs[0] == input) return id;
  FAIL("no linear reads ", name);
  return -1;
}

}  // namespace

TEST_CASE("models: flux latent packing and position ids match diffusers' Flux2Pipeline") {
  const Npy latent = read_npy("flux_latent.npy");
  const Npy packed = read_npy("flux_packed.npy");
  const int64_t c = latent.shape[0], h = latent.shape[1], w = latent.shape[2];
  REQUIRE((packed.shape == Shape{h / 2 * w / 2, 4 * c}));
  CHECK(pack_latents(latent.values, c, h, w) == packed.values);
  CHECK(unpack_latents(packed.values, c, h, w) == latent.values);
  CHECK(image_ids(h, w) == to_ints(read_npy("flux_img_ids.npy").values));
  const Npy txt = read_npy("flux_txt.npy");
  CHECK(text_ids(txt.shape[0]) == to_ints(read_npy("flux_txt_ids.npy").values));
}

TEST_CASE("models: flux rejects bad sizes and configs") {
  CHECK_THROWS_WITH_AS(pack_latents(std::vector<float>(3 * 3 * 4), 1, 3, 4),
                       doctest::Contains("[flux]"), Error);
  CHECK_THROWS_WITH_AS(pack_latents(std::vector<float>(5), 1, 2, 2), doctest::Contains("[flux]"),
                       Error);
  CHECK_THROWS_WITH_AS(unpack_latents(std::vector<float>(8), 1, 2, 2), doctest::Contains("[flux]"),
                       Error);
  CHECK_THROWS_WITH_AS(image_ids(4, 5), doctest::Contains("[flux]"), Error);
  FluxConfig config;
  const FluxWeights weights = flux_random_weights(config);
  CHECK_THROWS_WITH_AS(build_flux(config, weights, 0, 3), doctest::Contains("[flux]"), Error);
  FluxConfig bad_rope = config;
  bad_rope.axes_dims_rope = {8, 8, 8, 6};
  CHECK_THROWS_WITH_AS(flux_random_weights(bad_rope), doctest::Contains("axes_dims_rope"), Error);
  FluxConfig more_layers = config;
  more_layers.num_layers = 2;
  CHECK_THROWS_WITH_AS(build_flux(more_layers, weights, 4, 3), doctest::Contains("missing tensor"),
                       Error);
  FluxWeights wrong_shape = weights;
  wrong_shape.shapes[0].second[1] += 1;
  CHECK_THROWS_WITH_AS(build_flux(config, wrong_shape, 4, 3), doctest::Contains("has shape"),
                       Error);
}

TEST_CASE("models: flux random weights are deterministic and the golden's") {
  const FluxConfig config = golden_config();
  const FluxWeights a = flux_random_weights(config);
  const FluxWeights b = flux_random_weights(config);
  CHECK(a.values == b.values);
  FluxConfig other = config;
  other.seed = 2;
  CHECK(flux_random_weights(other).values[0] != a.values[0]);
  // Sum and sum of squares per tensor, in diffusers' state-dict order, as the script saw them.
  const Npy fingerprint = read_npy("flux_weights_fingerprint.npy");
  REQUIRE_MESSAGE((fingerprint.shape == Shape{static_cast<int64_t>(a.values.size()), 2}),
                  "the weight list changed: rerun scripts/reference_flux.py");
  for (size_t i = 0; i < a.values.size(); ++i) {
    double sum = 0, squares = 0;
    for (float v : a.values[i]) {
      sum += v;
      squares += static_cast<double>(v) * v;
    }
    INFO(a.shapes[i].first);
    CHECK(std::abs(sum - fingerprint.values[2 * i]) <= 1e-5 * (1 + std::abs(sum)));
    CHECK(std::abs(squares - fingerprint.values[2 * i + 1]) <= 1e-5 * squares);
  }
}

TEST_CASE("models: flux transformer matches diffusers' Flux2Transformer2DModel") {
  const FluxRun run;
  const Npy want = read_npy("flux_velocity.npy");
  REQUIRE((want.shape == Shape{run.image_tokens, run.config.in_channels}));
  for (const BackendKind backend : {BackendKind::Cpu, BackendKind::Reference}) {
    GraphSession s(*run.graph, SessionOptions{.backend = backend});
    run.write_inputs(s, run.txt.values);
    const std::vector<float> got = s.read<float>("velocity", run.output_box());
    const Agreement a = agreement(got, want.values);
    MESSAGE("flux ", std::string(backend == BackendKind::Cpu ? "cpu" : "reference"),
            " backend: max abs error ", a.max_abs, ", relative to max |golden| ", a.relative(),
            " (", s.stats().seconds * 1e3, " ms)");
    CHECK(a.relative() <= kRelativeTolerance);
  }
}

TEST_CASE("models: flux incremental reads equal fresh sessions bitwise") {
  const FluxRun run;
  GraphSession s(*run.graph);
  run.write_inputs(s, run.txt.values);
  const Box out = run.output_box();
  s.read<float>("velocity", out);
  const int64_t full = s.stats().elements_computed;
  const NodeId x_embedder = embedder_of(*run.graph, "img"),
               context_embedder = embedder_of(*run.graph, "txt");
  REQUIRE(s.stats().elements_per_node[static_cast<size_t>(x_embedder)] > 0);

  SUBCASE("a repeated read computes nothing") {
    s.read<float>("velocity", out);
    CHECK(s.stats().elements_computed == 0);
  }
  SUBCASE("an edit of the last text token") {
    // Joint attention lets every token see that row: all blocks after the first attention are
    // recomputed; the timestep path, the image embedding and the other text rows' projections
    // are not.
    std::vector<float> txt = run.txt.values;
    const int64_t width = run.config.joint_attention_dim, last = run.text_tokens - 1;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal;
    std::vector<float> row(static_cast<size_t>(width));
    for (float& v : row) v = normal(rng);
    std::copy(row.begin(), row.end(), txt.begin() + last * width);
    s.write("txt", Box{{last, last + 1}, {0, width}}, row);
    const std::vector<float> incremental = s.read<float>("velocity", out);
    const SessionStats& stats = s.stats();
    MESSAGE("text edit: ", stats.elements_computed, " of ", full, " elements recomputed");
    CHECK(stats.elements_per_node[static_cast<size_t>(x_embedder)] == 0);
    CHECK(stats.elements_per_node[static_cast<size_t>(context_embedder)] ==
          run.config.num_attention_heads * run.config.attention_head_dim);
    CHECK(stats.elements_computed < full);
    GraphSession fresh(*run.graph);
    run.write_inputs(fresh, txt);
    CHECK(fresh.read<float>("velocity", out) == incremental);
  }
  SUBCASE("an edit of one image token") {
    const int64_t token = run.image_tokens / 2, channels = run.config.in_channels;
    std::vector<float> img =
        pack_latents(run.latent.values, run.latent.shape[0], run.height, run.width);
    std::vector<float> row(static_cast<size_t>(channels), 0.25f);
    std::copy(row.begin(), row.end(), img.begin() + token * channels);
    s.write("img", Box{{token, token + 1}, {0, channels}}, row);
    const std::vector<float> incremental = s.read<float>("velocity", out);
    MESSAGE("image edit: ", s.stats().elements_computed, " of ", full, " elements recomputed");
    CHECK(s.stats().elements_per_node[static_cast<size_t>(x_embedder)] ==
          run.config.num_attention_heads * run.config.attention_head_dim);
    CHECK(s.stats().elements_per_node[static_cast<size_t>(context_embedder)] == 0);
    GraphSession fresh(*run.graph);
    run.write_inputs(fresh, run.txt.values);
    fresh.write("img", Box{{token, token + 1}, {0, channels}}, row);
    CHECK(fresh.read<float>("velocity", out) == incremental);
  }
}
