#include "loaders/flux.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <numbers>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "xxhash.h"

namespace tessera {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw Error(absl::StrCat("[flux] ", message));
}

int64_t inner_dim(const FluxConfig& c) {
  return c.num_attention_heads * c.attention_head_dim;
}
int64_t mlp_dim(const FluxConfig& c) {
  return static_cast<int64_t>(static_cast<double>(inner_dim(c)) * c.mlp_ratio);  // int() in Python
}

void check_config(const FluxConfig& c) {
  if (c.in_channels <= 0 || c.num_layers < 0 || c.num_single_layers < 0 ||
      c.attention_head_dim <= 0 || c.num_attention_heads <= 0 || c.joint_attention_dim <= 0 ||
      c.timestep_guidance_channels <= 0 || c.timestep_guidance_channels % 2 != 0 ||
      mlp_dim(c) <= 0 || !(c.eps > 0) || !(c.rope_theta > 0))
    fail("config: sizes must be positive, timestep_guidance_channels even, eps and rope_theta > 0");
  int64_t rotated = 0;
  for (int64_t d : c.axes_dims_rope) {
    if (d <= 0 || d % 2 != 0) fail("config: axes_dims_rope must be even and positive");
    rotated += d;
  }
  if (c.axes_dims_rope.size() != 4 || rotated != c.attention_head_dim)
    fail(absl::StrCat("config: axes_dims_rope must be 4 axes summing to attention_head_dim (",
                      c.attention_head_dim, "), got [", absl::StrJoin(c.axes_dims_rope, ", "),
                      "]"));
}

// splitmix64's finaliser: a well-mixed 64-bit value of a counter.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The weight tensors of a config, in diffusers' state-dict order.
std::vector<std::pair<std::string, std::vector<int64_t>>> weight_shapes(const FluxConfig& c) {
  const int64_t d = inner_dim(c), m = mlp_dim(c), hd = c.attention_head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s = {
      {"time_guidance_embed.timestep_embedder.linear_1.weight", {d, c.timestep_guidance_channels}},
      {"time_guidance_embed.timestep_embedder.linear_2.weight", {d, d}},
      {"double_stream_modulation_img.linear.weight", {6 * d, d}},
      {"double_stream_modulation_txt.linear.weight", {6 * d, d}},
      {"single_stream_modulation.linear.weight", {3 * d, d}},
      {"x_embedder.weight", {d, c.in_channels}},
      {"context_embedder.weight", {d, c.joint_attention_dim}},
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("transformer_blocks.", i, ".");
    for (const char* name : {"attn.to_q", "attn.to_k", "attn.to_v"})
      s.push_back({p + name + ".weight", {d, d}});
    s.push_back({p + "attn.norm_q.weight", {hd}});
    s.push_back({p + "attn.norm_k.weight", {hd}});
    s.push_back({p + "attn.to_out.0.weight", {d, d}});
    s.push_back({p + "attn.norm_added_q.weight", {hd}});
    s.push_back({p + "attn.norm_added_k.weight", {hd}});
    for (const char* name :
         {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"})
      s.push_back({p + name + ".weight", {d, d}});
    for (const char* ff : {"ff.", "ff_context."}) {
      s.push_back({p + ff + "linear_in.weight", {2 * m, d}});
      s.push_back({p + ff + "linear_out.weight", {d, m}});
    }
  }
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    const std::string p = absl::StrCat("single_transformer_blocks.", i, ".attn.");
    s.push_back({p + "to_qkv_mlp_proj.weight", {3 * d + 2 * m, d}});
    s.push_back({p + "norm_q.weight", {hd}});
    s.push_back({p + "norm_k.weight", {hd}});
    s.push_back({p + "to_out.weight", {d, d + m}});
  }
  s.push_back({"norm_out.linear.weight", {2 * d, d}});
  s.push_back({"proj_out.weight", {c.in_channels, d}});
  return s;
}

// Looks weights up by name and adds each once to the graph as an f32 constant.
class WeightTable {
 public:
  WeightTable(Graph& graph, const FluxWeights& weights) : graph_(graph), weights_(weights) {
    if (weights.shapes.size() != weights.values.size())
      fail("weights: shapes and values differ in count");
    for (size_t i = 0; i < weights.shapes.size(); ++i) index_[weights.shapes[i].first] = i;
  }

  Tensor operator()(const std::string& name, const std::vector<int64_t>& shape) {
    const auto it = index_.find(name);
    if (it == index_.end()) fail(absl::StrCat("weights: missing tensor ", name));
    const auto& [stored_name, stored_shape] = weights_.shapes[it->second];
    const std::vector<float>& values = weights_.values[it->second];
    int64_t volume = 1;
    for (int64_t d : shape) volume *= d;
    if (stored_shape != shape || std::ssize(values) != volume)
      fail(absl::StrCat("weights: tensor ", name, " has shape [", absl::StrJoin(stored_shape, ", "),
                        "] and ", values.size(), " values, expected [", absl::StrJoin(shape, ", "),
                        "]"));
    return graph_.constant(Shape(shape.begin(), shape.end()), values);
  }

 private:
  Graph& graph_;
  const FluxWeights& weights_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// Builds the graph of one config; method names follow diffusers' modules.
class FluxBuilder {
 public:
  FluxBuilder(Graph& graph, const FluxConfig& config, const FluxWeights& weights)
      : g_(graph), c_(config), w_(graph, weights), d_(inner_dim(config)), m_(mlp_dim(config)) {
    const auto shapes = weight_shapes(config);
    for (const auto& [name, shape] : shapes) shapes_[name] = shape;
    one_ = g_.scalar(1.0f);
  }

  Tensor linear(Tensor x, const std::string& name) {
    return tessera::linear(x, w_(name, shapes_.at(name)));
  }

  // Sinusoidal embedding of t * 1000 (diffusers' Timesteps with flip_sin_to_cos: cos half first),
  // then TimestepEmbedding (linear, silu, linear).
  Tensor timestep_embedding(Tensor timestep) {
    const int64_t half = c_.timestep_guidance_channels / 2;
    // Frequencies exp(-ln(10000) * i / half): the exponent is rounded to f32 in the order
    // diffusers computes it, the exponential taken in double and rounded once.
    std::vector<float> freqs(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float exponent =
          static_cast<float>(-std::log(10000.0)) * static_cast<float>(i) / static_cast<float>(half);
      freqs[static_cast<size_t>(i)] = static_cast<float>(std::exp(static_cast<double>(exponent)));
    }
    const Tensor t = reshape(timestep * g_.scalar(1000.0f), {1, 1});
    const Tensor angles = t * g_.constant({1, half}, freqs);
    const Tensor both[] = {cos(angles), sin(angles)};
    const Tensor projected = concat(both, -1);
    const std::string p = "time_guidance_embed.timestep_embedder.";
    return linear(silu(linear(projected, p + "linear_1.weight")), p + "linear_2.weight");
  }

  // Flux2Modulation: linear(silu(temb)) split into `sets` (shift, scale, gate) triples of [1, D].
  std::vector<Tensor> modulation(Tensor temb, const std::string& name, int sets) {
    const Tensor mod = linear(silu(temb), name);
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < 3 * sets; ++i) parts.push_back(slice(mod, -1, i * d_, (i + 1) * d_));
    return parts;
  }

  // layer_norm without affine parameters, then x * (1 + scale) + shift.
  Tensor modulate(Tensor x, Tensor shift, Tensor scale) {
    return layer_norm(x, Tensor{}, Tensor{}, c_.eps) * (one_ + scale) + shift;
  }

  // [T, D] -> [T, H, head_dim], RMS-normalised per head with the norm's weight (q and k only).
  Tensor heads(Tensor x, const std::string& norm) {
    const Tensor h = reshape(x, {x.dim(0), c_.num_attention_heads, c_.attention_head_dim});
    return norm.empty() ? h : rms_norm(h, w_(norm, shapes_.at(norm)), c_.eps);
  }

  // Joint attention over [T, H, head_dim] queries/keys/values with RoPE at `ids`: [T, D].
  Tensor attend(Tensor q, Tensor k, Tensor v, Tensor ids) {
    q = rope_multi(q, ids, c_.axes_dims_rope, c_.rope_theta);
    k = rope_multi(k, ids, c_.axes_dims_rope, c_.rope_theta);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c_.attention_head_dim));
    const Tensor o = attention(q, k, v, AttentionParams{.scale = scale, .causal = false});
    return reshape(o, {o.dim(0), d_});
  }

  // SwiGLU: silu(first half) * second half of the last axis.
  Tensor swiglu(Tensor x) {
    const int64_t half = x.dim(-1) / 2;
    return silu(slice(x, -1, 0, half)) * slice(x, -1, half, 2 * half);
  }

  Tensor feed_forward(Tensor x, const std::string& p) {
    return linear(swiglu(linear(x, p + "linear_in.weight")), p + "linear_out.weight");
  }

  // Flux2TransformerBlock: separate image (x) and text (c) streams, joint attention [c, x].
  void double_block(int64_t index, Tensor& x, Tensor& c, const std::vector<Tensor>& mi,
                    const std::vector<Tensor>& mt, Tensor ids) {
    const std::string p = absl::StrCat("transformer_blocks.", index, ".");
    const std::string a = p + "attn.";
    const Tensor nx = modulate(x, mi[0], mi[1]);
    const Tensor nc = modulate(c, mt[0], mt[1]);
    const Tensor q[] = {heads(linear(nc, a + "add_q_proj.weight"), a + "norm_added_q.weight"),
                        heads(linear(nx, a + "to_q.weight"), a + "norm_q.weight")};
    const Tensor k[] = {heads(linear(nc, a + "add_k_proj.weight"), a + "norm_added_k.weight"),
                        heads(linear(nx, a + "to_k.weight"), a + "norm_k.weight")};
    const Tensor v[] = {heads(linear(nc, a + "add_v_proj.weight"), ""),
                        heads(linear(nx, a + "to_v.weight"), "")};
    const Tensor o = attend(concat(q, 0), concat(k, 0), concat(v, 0), ids);
    const int64_t text = c.dim(0), total = o.dim(0);
    x = x + mi[2] * linear(slice(o, 0, text, total), a + "to_out.0.weight");
    x = x + mi[5] * feed_forward(modulate(x, mi[3], mi[4]), p + "ff.");
    c = c + mt[2] * linear(slice(o, 0, 0, text), a + "to_add_out.weight");
    c = c + mt[5] * feed_forward(modulate(c, mt[3], mt[4]), p + "ff_context.");
  }

  // Flux2SingleTransformerBlock: one stream, attention and MLP in parallel from one projection.
  Tensor single_block(int64_t index, Tensor h, const std::vector<Tensor>& ms, Tensor ids) {
    const std::string a = absl::StrCat("single_transformer_blocks.", index, ".attn.");
    const Tensor proj = linear(modulate(h, ms[0], ms[1]), a + "to_qkv_mlp_proj.weight");
    const Tensor q = heads(slice(proj, -1, 0, d_), a + "norm_q.weight");
    const Tensor k = heads(slice(proj, -1, d_, 2 * d_), a + "norm_k.weight");
    const Tensor v = heads(slice(proj, -1, 2 * d_, 3 * d_), "");
    const Tensor both[] = {attend(q, k, v, ids), swiglu(slice(proj, -1, 3 * d_, 3 * d_ + 2 * m_))};
    return h + ms[2] * linear(concat(both, -1), a + "to_out.weight");
  }

  // AdaLayerNormContinuous (scale first, then shift) and proj_out.
  Tensor output(Tensor x, Tensor temb) {
    const Tensor emb = linear(silu(temb), "norm_out.linear.weight");
    const Tensor scale = slice(emb, -1, 0, d_), shift = slice(emb, -1, d_, 2 * d_);
    return linear(modulate(x, shift, scale), "proj_out.weight");
  }

 private:
  Graph& g_;
  const FluxConfig& c_;
  WeightTable w_;
  absl::flat_hash_map<std::string, std::vector<int64_t>> shapes_;
  int64_t d_, m_;
  Tensor one_;
};

void check_latent_sizes(int64_t channels, int64_t height, int64_t width) {
  if (channels <= 0 || height <= 0 || width <= 0 || height % 2 != 0 || width % 2 != 0)
    fail(absl::StrCat("latent [", channels, ", ", height, ", ", width,
                      "]: channels must be positive, height and width positive and even"));
}

// Visits latent element (c, 2y + dy, 2x + dx) and its packed token index.
template <class F>
void for_each_packed(int64_t channels, int64_t height, int64_t width, F f) {
  const int64_t gh = height / 2, gw = width / 2;
  for (int64_t y = 0; y < gh; ++y)
    for (int64_t x = 0; x < gw; ++x)
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t dy = 0; dy < 2; ++dy)
          for (int64_t dx = 0; dx < 2; ++dx) {
            const int64_t token = (y * gw + x) * 4 * channels + c * 4 + dy * 2 + dx;
            const int64_t pixel = (c * height + 2 * y + dy) * width + 2 * x + dx;
            f(static_cast<size_t>(token), static_cast<size_t>(pixel));
          }
}

}  // namespace

FluxWeights flux_random_weights(const FluxConfig& config) {
  check_config(config);
  FluxWeights weights;
  weights.shapes = weight_shapes(config);
  for (const auto& [name, shape] : weights.shapes) {
    int64_t volume = 1;
    for (int64_t d : shape) volume *= d;
    const uint64_t stream = XXH64(name.data(), name.size(), config.seed);
    const bool norm = shape.size() == 1;
    const double amplitude = norm ? 0.125 : 1.0 / std::sqrt(static_cast<double>(shape.back()));
    std::vector<float> values(static_cast<size_t>(volume));
    for (int64_t i = 0; i < volume; ++i) {
      // 53 random bits -> u in [-1, 1).
      const double u =
          static_cast<double>(mix(stream ^ mix(static_cast<uint64_t>(i))) >> 11) * 0x1p-52 - 1.0;
      values[static_cast<size_t>(i)] = static_cast<float>((norm ? 1.0 : 0.0) + amplitude * u);
    }
    weights.values.push_back(std::move(values));
  }
  return weights;
}

void write_flux_safetensors(const FluxWeights& weights, const std::string& path) {
  if (weights.shapes.size() != weights.values.size())
    fail("weights: shapes and values differ in count");
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < weights.shapes.size(); ++i) {
    const uint64_t bytes = weights.values[i].size() * sizeof(float);
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"", weights.shapes[i].first,
                    "\":{\"dtype\":\"F32\",\"shape\":[",
                    absl::StrJoin(weights.shapes[i].second, ","), "],\"data_offsets\":[", offset,
                    ",", offset + bytes, "]}");
    offset += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // data section 8-byte aligned
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) fail(absl::StrCat("cannot write ", path));
  unsigned char length[8];
  for (int b = 0; b < 8; ++b)
    length[b] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * b));
  file.write(reinterpret_cast<const char*>(length), 8);
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  // Little-endian f32, as the format requires (every supported host is little-endian).
  for (const std::vector<float>& v : weights.values)
    file.write(reinterpret_cast<const char*>(v.data()),
               static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!file.flush()) fail(absl::StrCat("cannot write ", path));
}

std::unique_ptr<Graph> build_flux(const FluxConfig& config, const FluxWeights& weights,
                                  int64_t image_tokens, int64_t text_tokens) {
  check_config(config);
  if (image_tokens <= 0 || text_tokens <= 0)
    fail(absl::StrCat("image_tokens and text_tokens must be positive, got ", image_tokens, " and ",
                      text_tokens));
  auto graph = std::make_unique<Graph>();
  Graph& g = *graph;
  FluxBuilder b(g, config, weights);
  const Tensor img = g.input("img", {image_tokens, config.in_channels}, DType::F32);
  const Tensor txt = g.input("txt", {text_tokens, config.joint_attention_dim}, DType::F32);
  const Tensor timestep = g.input("timestep", {1}, DType::F32);
  const Tensor img_ids = g.input("img_ids", {image_tokens, 4}, DType::I32);
  const Tensor txt_ids = g.input("txt_ids", {text_tokens, 4}, DType::I32);

  const Tensor temb = b.timestep_embedding(timestep);
  const std::vector<Tensor> mod_img =
      b.modulation(temb, "double_stream_modulation_img.linear.weight", 2);
  const std::vector<Tensor> mod_txt =
      b.modulation(temb, "double_stream_modulation_txt.linear.weight", 2);
  const std::vector<Tensor> mod_single =
      b.modulation(temb, "single_stream_modulation.linear.weight", 1);

  Tensor x = b.linear(img, "x_embedder.weight");
  Tensor c = b.linear(txt, "context_embedder.weight");
  const Tensor id_parts[] = {txt_ids, img_ids};
  const Tensor ids = concat(id_parts, 0);  // the joint sequence is [text, image]

  for (int64_t i = 0; i < config.num_layers; ++i) b.double_block(i, x, c, mod_img, mod_txt, ids);
  const Tensor streams[] = {c, x};
  Tensor h = concat(streams, 0);
  for (int64_t i = 0; i < config.num_single_layers; ++i) h = b.single_block(i, h, mod_single, ids);
  h = slice(h, 0, text_tokens, text_tokens + image_tokens);
  g.output("velocity", b.output(h, temb));
  return graph;
}

std::vector<float> pack_latents(const std::vector<float>& latent, int64_t channels, int64_t height,
                                int64_t width) {
  check_latent_sizes(channels, height, width);
  if (std::ssize(latent) != channels * height * width)
    fail(absl::StrCat("pack_latents: ", latent.size(), " values for a latent [", channels, ", ",
                      height, ", ", width, "]"));
  std::vector<float> tokens(latent.size());
  for_each_packed(channels, height, width,
                  [&](size_t token, size_t pixel) { tokens[token] = latent[pixel]; });
  return tokens;
}

std::vector<float> unpack_latents(const std::vector<float>& tokens, int64_t channels,
                                  int64_t height, int64_t width) {
  check_latent_sizes(channels, height, width);
  if (std::ssize(tokens) != channels * height * width)
    fail(absl::StrCat("unpack_latents: ", tokens.size(), " values for a latent [", channels, ", ",
                      height, ", ", width, "]"));
  std::vector<float> latent(tokens.size());
  for_each_packed(channels, height, width,
                  [&](size_t token, size_t pixel) { latent[pixel] = tokens[token]; });
  return latent;
}

std::vector<int32_t> image_ids(int64_t height, int64_t width) {
  check_latent_sizes(1, height, width);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(height / 2 * width / 2 * 4));
  for (int64_t y = 0; y < height / 2; ++y)
    for (int64_t x = 0; x < width / 2; ++x)
      ids.insert(ids.end(), {0, static_cast<int32_t>(y), static_cast<int32_t>(x), 0});
  return ids;
}

std::vector<int32_t> text_ids(int64_t text_tokens) {
  if (text_tokens < 0) fail(absl::StrCat("text_ids: negative token count ", text_tokens));
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(text_tokens * 4));
  for (int64_t i = 0; i < text_tokens; ++i)
    ids.insert(ids.end(), {0, 0, 0, static_cast<int32_t>(i)});
  return ids;
}

}  // namespace tessera
