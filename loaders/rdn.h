// The x2 super-resolution residual dense network (RDN, C=1, D=2, G=4, G0=64; the "esrgan-slim"
// model of @upscalerjs/default-model) as a Tessera graph, from its safetensors weights (F32,
// Keras names, kernels stored HWIO [kh, kw, in, out]; they become OIHW constants at load).
//
// All convolutions are stride 1 with zero "same" padding (k / 2) and bias:
//   fm1 = F_m1(x); f0 = F_0(fm1)
//   l1  = LFF_1(concat[f0, relu(F_1_1(f0))]) + f0;  l2 = LFF_2(concat[l1, relu(F_2_1(l1))]) + l1
//   fdf = GFF_2(GFF_1(concat[l1, l2])) + fm1
//   y   = SR(upsample_nearest_x2(UPN3(relu(UPN2(relu(UPN1(fdf)))))))
// Pixels in and out are in [0, 255] (round and clip the output for 8-bit images). Every output
// pixel depends on a window of at most 20 x 20 input pixels, so edits stay local.
//
// rdn_x2 returns a graph with input "image" [N, 3, H, W] and output "upscaled" [N, 3, 2H, 2W].
// Errors (missing file or tensor, wrong kernel shapes, bad input shape) throw tessera::Error.
#pragma once

#include <memory>
#include <string>

#include "engine/graph.h"

namespace tessera {

std::unique_ptr<Graph> rdn_x2(const std::string& safetensors_path, const Shape& image_shape);

}  // namespace tessera
