#include "loaders/taesd.h"

#include "absl/strings/str_cat.h"
#include "engine/ops.h"
#include "loaders/safetensors.h"

namespace tessera {
namespace {

// Weights of one network, added to its graph as f32 constants under their upstream names.
class TaesdBuilder {
 public:
  TaesdBuilder(const std::string& path, Graph& graph)
      : file_(SafetensorsFile::open(path)), graph_(graph) {}

  // 3x3 (or 1x1: the padding follows the kernel) convolution `prefix`weight, with
  // `prefix`bias when the file has one.
  Tensor conv(Tensor x, const std::string& prefix, int64_t stride = 1) {
    Tensor weight = file_.add_constant(graph_, prefix + "weight");
    if (weight.rank() != 4)
      throw Error(absl::StrCat("[taesd] ", file_.name(), ": ", prefix,
                               "weight is not a convolution kernel"));
    const std::string bias_name = prefix + "bias";
    Tensor bias =
        file_.find(bias_name) != nullptr ? file_.add_constant(graph_, bias_name) : Tensor{};
    Conv2dParams params;
    params.stride_h = params.stride_w = stride;
    params.pad_h = weight.dim(2) / 2;
    params.pad_w = weight.dim(3) / 2;
    return conv2d(x, weight, bias, params);
  }

  Tensor block(Tensor x, int index, bool midblock) {
    const std::string p = absl::StrCat(index, ".");
    if (midblock) {
      Tensor h = conv(x, p + "pool.0.");
      h = group_norm(h, 4, constant(p + "pool.1.weight"), constant(p + "pool.1.bias"), 1e-5);
      x = x + conv(relu(h), p + "pool.3.");
    }
    Tensor h = relu(conv(x, p + "conv.0."));
    h = relu(conv(h, p + "conv.2."));
    return relu(conv(h, p + "conv.4.") + x);
  }

  Tensor constant(const std::string& name) { return file_.add_constant(graph_, name); }

 private:
  SafetensorsFile file_;
  Graph& graph_;
};

void check_input(const Shape& shape, int64_t channels, const char* what) {
  if (shape.size() != 4 || shape[0] < 1 || shape[1] != channels || shape[2] < 1 || shape[3] < 1)
    throw Error(absl::StrCat("[taesd] ", what, " shape must be [N, ", channels,
                             ", H, W] with N, H, W >= 1, got ", shape_string(shape)));
}

}  // namespace

std::unique_ptr<Graph> taef2_encoder(const std::string& safetensors_path,
                                     const Shape& image_shape) {
  check_input(image_shape, 3, "image");
  auto graph = std::make_unique<Graph>();
  TaesdBuilder b(safetensors_path, *graph);
  Tensor x = graph->input("image", image_shape, DType::F32);
  x = b.block(b.conv(x, "0."), 1, false);
  int index = 2;
  for (int stage = 0; stage < 3; ++stage) {
    x = b.conv(x, absl::StrCat(index, "."), 2);
    for (int i = 1; i <= 3; ++i) x = b.block(x, index + i, /*midblock=*/stage == 2);
    index += 4;
  }
  graph->output("latent", b.conv(x, absl::StrCat(index, ".")));
  return graph;
}

std::unique_ptr<Graph> taef2_decoder(const std::string& safetensors_path,
                                     const Shape& latent_shape) {
  check_input(latent_shape, 32, "latent");
  auto graph = std::make_unique<Graph>();
  TaesdBuilder b(safetensors_path, *graph);
  Tensor x = graph->input("latent", latent_shape, DType::F32);
  x = tanh(x / graph->scalar(3.0f)) * graph->scalar(3.0f);  // soft clamp of the latent to (-3, 3)
  x = relu(b.conv(x, "1."));
  for (int i = 3; i <= 5; ++i) x = b.block(x, i, /*midblock=*/true);
  int index = 6;  // each stage: upsample (no weights), conv, Blocks
  for (int blocks : {3, 3, 1}) {
    x = b.conv(upsample_nearest(x, 2), absl::StrCat(index + 1, "."));
    for (int i = 0; i < blocks; ++i) x = b.block(x, index + 2 + i, false);
    index += 2 + blocks;
  }
  graph->output("image", b.conv(x, absl::StrCat(index, ".")));
  return graph;
}

std::unique_ptr<Graph> taesana_encoder(const std::string& safetensors_path,
                                       const Shape& image_shape) {
  check_input(image_shape, 3, "image");
  auto graph = std::make_unique<Graph>();
  TaesdBuilder b(safetensors_path, *graph);
  Tensor x = graph->input("image", image_shape, DType::F32);
  x = relu(b.conv(x, "0.", 2));
  x = relu(b.conv(x, "2.", 2));
  x = b.block(x, 4, false);
  int index = 5;
  for (int stage = 0; stage < 3; ++stage) {
    x = b.conv(x, absl::StrCat(index, "."), 2);
    for (int i = 1; i <= 3; ++i) x = b.block(x, index + i, false);
    index += 4;
  }
  graph->output("latent", b.conv(x, absl::StrCat(index, ".")));
  return graph;
}

}  // namespace tessera
