#include "loaders/rdn.h"

#include "absl/strings/str_cat.h"
#include "engine/ops.h"
#include "loaders/safetensors.h"

namespace tessera {
namespace {

class RdnBuilder {
 public:
  RdnBuilder(const std::string& path, Graph& graph)
      : file_(SafetensorsFile::open(path)), graph_(graph) {}

  // Keras convolution `name`: kernel HWIO -> OIHW constant, bias, stride 1, "same" padding.
  Tensor conv(Tensor x, const std::string& name) {
    const std::string kernel_name = name + "/kernel";
    const Shape& hwio = file_.tensor(kernel_name).shape;
    if (hwio.size() != 4 || hwio[0] % 2 == 0 || hwio[1] % 2 == 0)
      throw Error(absl::StrCat("[rdn] ", file_.name(), ": ", kernel_name, " of shape ",
                               shape_string(hwio), " is not an odd-sized HWIO kernel"));
    const int64_t kh = hwio[0], kw = hwio[1], in = hwio[2], out = hwio[3];
    const std::vector<float> values = file_.to_f32(kernel_name);
    std::vector<float> oihw(values.size());
    for (int64_t y = 0; y < kh; ++y)
      for (int64_t x_ = 0; x_ < kw; ++x_)
        for (int64_t i = 0; i < in; ++i)
          for (int64_t o = 0; o < out; ++o)
            oihw[static_cast<size_t>(((o * in + i) * kh + y) * kw + x_)] =
                values[static_cast<size_t>(((y * kw + x_) * in + i) * out + o)];
    Tensor weight = graph_.constant({out, in, kh, kw}, oihw);
    Tensor bias = file_.add_constant(graph_, name + "/bias");
    Conv2dParams params;
    params.pad_h = kh / 2;
    params.pad_w = kw / 2;
    return conv2d(x, weight, bias, params);
  }

 private:
  SafetensorsFile file_;
  Graph& graph_;
};

}  // namespace

std::unique_ptr<Graph> rdn_x2(const std::string& safetensors_path, const Shape& image_shape) {
  if (image_shape.size() != 4 || image_shape[0] < 1 || image_shape[1] != 3 || image_shape[2] < 1 ||
      image_shape[3] < 1)
    throw Error(absl::StrCat("[rdn] image shape must be [N, 3, H, W] with N, H, W >= 1, got ",
                             shape_string(image_shape)));
  auto graph = std::make_unique<Graph>();
  RdnBuilder b(safetensors_path, *graph);
  Tensor x = graph->input("image", image_shape, DType::F32);
  Tensor fm1 = b.conv(x, "F_m1");
  Tensor f0 = b.conv(fm1, "F_0");
  // Residual dense blocks: one 3x3 layer of G=4 channels each, fused back to 64 by a 1x1.
  Tensor l1 = b.conv(concat(std::vector<Tensor>{f0, relu(b.conv(f0, "F_1_1"))}, 1), "LFF_1") + f0;
  Tensor l2 = b.conv(concat(std::vector<Tensor>{l1, relu(b.conv(l1, "F_2_1"))}, 1), "LFF_2") + l1;
  Tensor fdf = b.conv(b.conv(concat(std::vector<Tensor>{l1, l2}, 1), "GFF_1"), "GFF_2") + fm1;
  Tensor u = b.conv(relu(b.conv(relu(b.conv(fdf, "UPN1")), "UPN2")), "UPN3");
  graph->output("upscaled", b.conv(upsample_nearest(u, 2), "SR"));
  return graph;
}

}  // namespace tessera
