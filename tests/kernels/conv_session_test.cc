// End-to-end exactness of the optimised conv-net kernels inside a session: after an edit of a
// few pixels, an incremental read of small random conv nets equals bitwise a fresh session
// computing everything, on 1 and 2 threads (whose results must also agree with each other), and
// stays close to the reference backend; with convs in 4x4 Winograd tiles, asked for by the graph
// or given by the conv_tiles pass.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/session.h"
#include "tests/support/conv_net.h"

using namespace tessera;

namespace {

constexpr int64_t kHeight = 22, kWidth = 38;

Conv2dParams params_pad(int64_t pad) {
  Conv2dParams p;
  p.pad_h = p.pad_w = pad;
  return p;
}

// conv, group_norm, silu, max pool, strided conv, avg pool, upsample, conv: the other kernels
// of conv nets, on odd channel counts. Input "image" [1, 3, H, W]; output "out".
void norm_pool_net(Graph& g) {
  std::mt19937_64 rng(23);
  auto weight = [&](const Shape& shape) { return testing::random_constant(g, rng, shape, 0.3f); };
  Tensor x = g.input("image", {1, 3, kHeight, kWidth}, DType::F32);
  Conv2dParams same;
  same.pad_h = same.pad_w = 1;
  x = conv2d(x, weight({12, 3, 3, 3}), weight({12}), same);
  x = silu(group_norm(x, 4, weight({12}), weight({12}), 1e-5));
  x = pool2d(x, PoolKind::Max, 3, 1, 1);
  Conv2dParams down = same;
  down.stride_h = down.stride_w = 2;
  down.groups = 3;
  x = conv2d(x, weight({9, 4, 3, 3}), Tensor{}, down);
  x = pool2d(x, PoolKind::Avg, 2, 1, 1);
  x = upsample_nearest(x, 2);
  x = layer_norm(x, weight({x.dim(-1)}), Tensor{}, 1e-5);
  g.output("out", conv2d(x, weight({5, 9, 5, 5}), weight({5}), params_pad(2)));
}

// conv, group norm, then three 3x3 convs of 8 channels, the last to 3, on a 32x40 image (the
// pass tiles maps of 1024 outputs or more): every edit dirties everything after the group norm,
// so the conv_tiles pass gives the two 8 -> 8 convs there 4x4 tiles; the convs before the norm
// keep the receptive field.
constexpr int64_t kNormHeight = 32, kNormWidth = 40;
void norm_conv_net(Graph& g) {
  std::mt19937_64 rng(29);
  auto weight = [&](const Shape& shape) { return testing::random_constant(g, rng, shape, 0.3f); };
  Tensor x = g.input("image", {1, 3, kNormHeight, kNormWidth}, DType::F32);
  Conv2dParams same;
  same.pad_h = same.pad_w = 1;
  x = relu(conv2d(x, weight({8, 3, 3, 3}), weight({8}), same));
  x = relu(conv2d(x, weight({8, 8, 3, 3}), weight({8}), same));
  x = group_norm(x, 2, weight({8}), weight({8}), 1e-5);
  x = relu(conv2d(x, weight({8, 8, 3, 3}), weight({8}), same));
  x = relu(conv2d(x, weight({8, 8, 3, 3}), weight({8}), same) + x);
  g.output("out", conv2d(x, weight({3, 8, 3, 3}), weight({3}), same));
}

std::vector<float> random_image(std::mt19937_64& rng, int64_t count) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = u(rng);
  return v;
}

// The output of a fresh session given `image`; `elements`: what it computed.
std::vector<float> fresh_output(const Graph& g, const std::vector<float>& image, int threads,
                                BackendKind backend = BackendKind::Cpu,
                                int64_t* elements = nullptr) {
  SessionOptions options;
  options.threads = threads;
  options.backend = backend;
  GraphSession fresh(g, options);
  const Shape& in = g.node(g.inputs()[0]).shape;
  fresh.write("image", Box::full(in), image);
  std::vector<float> out = fresh.read<float>("out", Box::full(g.node(g.outputs()[0].second).shape));
  if (elements != nullptr) *elements = fresh.stats().elements_computed;
  return out;
}

// Edits a few boxes of the image one after another; after each, the incremental read must be
// bitwise the fresh session's. Returns the final output.
std::vector<float> check_edits(const Graph& g, int threads, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Shape& in = g.node(g.inputs()[0]).shape;
  const Box out_box = Box::full(g.node(g.outputs()[0].second).shape);
  std::vector<float> image = random_image(rng, shape_volume(in));
  SessionOptions options;
  options.threads = threads;
  GraphSession s(g, options);
  s.write("image", Box::full(in), image);
  std::vector<float> out = s.read<float>("out", out_box);
  for (int edit = 0; edit < 4; ++edit) {
    CAPTURE(edit);
    const int64_t h0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(in[2] - 3));
    const int64_t w0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(in[3] - 5));
    const Box box{{0, 1}, {0, 3}, {h0, h0 + 3}, {w0, w0 + 5}};
    std::vector<float> patch = random_image(rng, box.volume());
    s.write("image", box, patch);
    const TensorView view = dense_view(image.data(), DType::F32, Box::full(in));
    size_t k = 0;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = h0; h < h0 + 3; ++h)
        for (int64_t w = w0; w < w0 + 5; ++w) {
          const int64_t at[4] = {0, c, h, w};
          *view.at<float>(at) = patch[k++];
        }
    out = s.read<float>("out", out_box);
    int64_t fresh_elements = 0;
    const std::vector<float> want =
        fresh_output(g, image, threads, BackendKind::Cpu, &fresh_elements);
    CHECK(s.stats().elements_computed < fresh_elements);  // the edit recomputed only a part
    REQUIRE(std::memcmp(want.data(), out.data(), want.size() * sizeof(float)) == 0);
  }
  // Close to the reference backend end to end.
  const std::vector<float> reference = fresh_output(g, image, 1, BackendKind::Reference);
  double scale = 0;
  for (float v : reference) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < reference.size(); ++i)
    CHECK(std::fabs(out[i] - reference[i]) <= 1e-4 * scale + 1e-5);
  return out;
}

}  // namespace

TEST_CASE("kernels: conv net edits in a session equal a fresh session bitwise, 1 and 2 threads") {
  for (int net = 0; net < 4; ++net) {
    CAPTURE(net);
    Graph g;
    if (net == 0) {
      testing::conv_net(g, kHeight, kWidth);
    } else if (net == 1) {
      norm_pool_net(g);
    } else if (net == 2) {
      testing::conv_net(g, kHeight, kWidth, 11, /*tile=*/4);  // the 8 -> 8 conv in 4x4 tiles
    } else {
      norm_conv_net(g);
    }
    const std::vector<float> one = check_edits(g, 1, 61);
    const std::vector<float> two = check_edits(g, 2, 61);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("kernels: the conv_tiles pass gives 4x4 tiles to the convs every edit dirties whole") {
  Graph g;
  norm_conv_net(g);
  GraphSession s(g);
  const Shape in{1, 3, kNormHeight, kNormWidth};
  s.write("image", Box::full(in), std::vector<float>(static_cast<size_t>(shape_volume(in)), 0.5f));
  const Explanation e = s.explain("out", Box::full(g.node(g.outputs()[0].second).shape));
  std::vector<std::string> convs;
  for (const Explanation::Entry& entry : e.entries)
    if (entry.op.rfind("conv2d", 0) == 0) convs.push_back(entry.op);
  // In order: the two convs before the norm keep the receptive field, the two 8 -> 8 convs after
  // it take 4x4 tiles, the last (3 output channels) is not one the 4x4 kernel takes.
  REQUIRE(convs.size() == 5);
  for (size_t k = 0; k < convs.size(); ++k) {
    CAPTURE(convs[k]);
    CHECK((convs[k].find("tile=4") != std::string::npos) == (k == 2 || k == 3));
  }
  // An edit then recomputes everything after the norm, as it did with receptive-field rules,
  // and only part of what comes before it.
  s.read<float>("out", Box::full(g.node(g.outputs()[0].second).shape));
  s.write("image", Box{{0, 1}, {0, 3}, {4, 6}, {4, 6}}, std::vector<float>(12, 0.25f));
  const Explanation edit = s.explain("out", Box::full(g.node(g.outputs()[0].second).shape));
  std::vector<int64_t> computes;
  for (const Explanation::Entry& entry : edit.entries)
    if (entry.op.rfind("conv2d", 0) == 0) computes.push_back(entry.compute.volume());
  const int64_t whole = 8 * kNormHeight * kNormWidth;
  CHECK(computes == std::vector<int64_t>{8 * 4 * 4, 8 * 6 * 6, whole, whole, 3 * kNormHeight * kNormWidth});
}
