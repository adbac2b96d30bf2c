// Tiny autoencoders of the TAESD family as Tessera graphs, from their safetensors weights
// (tensor names are the upstream nn.Sequential indices; F16 weights become f32 constants).
//
// Building blocks (all convolutions 3x3 with zero padding 1 unless noted):
//   Block(x)    = relu(conv(relu(conv(relu(conv(x))))) + x)
//   mid-block   = before a Block: x + conv1x1(relu(group_norm_4(conv1x1(x)))), 64 -> 256 -> 64
//                 channels, 1x1 convolutions without bias, group norm eps 1e-5
// Networks:
//   taef2_encoder    image [N, 3, H, W] in [0, 1] -> latent [N, 32, H/8, W/8] (8x: three stride-2
//                    convolutions; the last three Blocks carry the mid-block)
//   taef2_decoder    latent [N, 32, h, w] -> image [N, 3, 8h, 8w], roughly [0, 1] (the input goes
//                    through tanh(x / 3) * 3 first; the first three Blocks carry the mid-block)
//   taesana_encoder  image [N, 3, H, W] in [0, 1] -> latent [N, 32, H/32, W/32] (32x, convolutions
//                    and ReLU only, so every latent depends on a bounded window of pixels)
// Sizes round like PyTorch's stride-2 convolutions: out = (in - 1) / 2 + 1.
//
// Each function opens the file, checks the input shape and returns a graph with one input and
// one output, named "image" and "latent" (encoders) or "latent" and "image" (decoder). Errors
// (missing file or tensor, wrong tensor shapes, bad input shape) throw tessera::Error.
#pragma once

#include <memory>
#include <string>

#include "engine/graph.h"

namespace tessera {

std::unique_ptr<Graph> taef2_encoder(const std::string& safetensors_path, const Shape& image_shape);
std::unique_ptr<Graph> taef2_decoder(const std::string& safetensors_path,
                                     const Shape& latent_shape);
std::unique_ptr<Graph> taesana_encoder(const std::string& safetensors_path,
                                       const Shape& image_shape);

}  // namespace tessera
