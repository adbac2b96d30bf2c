// A FLUX.2-style flow transformer (as diffusers' Flux2Transformer2DModel) built as a Tessera
// graph: double-stream blocks (separate image and text streams, joint attention), single-stream
// blocks (one stream, parallel attention + MLP), adaLN modulation from a timestep embedding,
// multi-axis RoPE over text and image token positions (rope_multi), 2x2 latent patchify done by
// the caller (pack_latents). Weights: real ones are not reachable, so they are seeded random,
// generated here and written as safetensors (diffusers names) for the PyTorch reference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph.h"

namespace tessera {

struct FluxConfig {
  int64_t in_channels = 128;      // packed latent channels (32 latent channels x 2 x 2)
  int64_t num_layers = 1;         // double-stream blocks
  int64_t num_single_layers = 2;  // single-stream blocks
  int64_t attention_head_dim = 32;
  int64_t num_attention_heads = 2;
  int64_t joint_attention_dim = 576;  // text conditioning width (SmolLM2-135M hidden size)
  int64_t timestep_guidance_channels = 256;
  double mlp_ratio = 3.0;
  std::vector<int64_t> axes_dims_rope = {8, 8, 8, 8};  // sums to attention_head_dim
  double rope_theta = 2000;
  double eps = 1e-6;
  uint64_t seed = 1;  // of the random weights
};

// The weights of a config, named as diffusers names them, as f32 row-major arrays.
struct FluxWeights {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // name, shape (in order)
  std::vector<std::vector<float>> values;                            // same order
};
// Deterministic in (config, seed): element i of tensor `name` is a counter-based hash of (seed,
// name, i) mapped to u in [-1, 1). Linear weights [out, in] (no biases: FLUX.2 has none) are
// u / sqrt(in); RMS norm weights (the per-head q/k norms) are 1 + u / 8.
FluxWeights flux_random_weights(const FluxConfig& config);
// Writes `weights` as a safetensors file (F32), for the reference script.
void write_flux_safetensors(const FluxWeights& weights, const std::string& path);

// The transformer over `image_tokens` packed latent tokens and `text_tokens` text tokens.
// Inputs: "img" [image_tokens, in_channels], "txt" [text_tokens, joint_attention_dim],
// "timestep" [1] (f32, in [0, 1]: diffusers multiplies by 1000 inside), "img_ids"
// [image_tokens, 4] and "txt_ids" [text_tokens, 4] (i32 positions per RoPE axis).
// Output: "velocity" [image_tokens, in_channels]. The weights become graph constants.
std::unique_ptr<Graph> build_flux(const FluxConfig& config, const FluxWeights& weights,
                                  int64_t image_tokens, int64_t text_tokens);

// 2x2 patchify of a latent [C, H, W] (H, W even) into tokens [(H/2)*(W/2), 4C] in diffusers'
// order (its _patchify_latents then _pack_latents): token y * (W/2) + x, channel c * 4 + 2 * dy
// + dx holds latent[c, 2y + dy, 2x + dx]. unpack_latents is the inverse. The position ids of
// FLUX.2 (axes t, h, w, l), row-major [tokens, 4]: image token (0, y, x, 0) for the packed grid
// y < H/2, x < W/2 of a latent of height H and width W (_prepare_latent_ids); text token i is
// (0, 0, 0, i) (_prepare_text_ids). Bad sizes (odd H or W, wrong vector sizes) throw Error.
std::vector<float> pack_latents(const std::vector<float>& latent, int64_t channels, int64_t height,
                                int64_t width);
std::vector<float> unpack_latents(const std::vector<float>& tokens, int64_t channels,
                                  int64_t height, int64_t width);
// Takes the latent's height and width (as pack_latents); gives ids of the H/2 x W/2 grid.
std::vector<int32_t> image_ids(int64_t height, int64_t width);
std::vector<int32_t> text_ids(int64_t text_tokens);

}  // namespace tessera
