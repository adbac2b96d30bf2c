#include "loaders/llm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/ops.h"

namespace tessera {

namespace {

std::string key(const LlmConfig& c, const char* suffix) { return c.arch_name + "." + suffix; }

int64_t int_or(const GgufFile& f, const std::string& k, int64_t fallback) {
  return f.find(k) != nullptr ? f.get_integer(k) : fallback;
}

double float_or(const GgufFile& f, const std::string& k, double fallback) {
  const GgufValue* v = f.find(k);
  if (v == nullptr) return fallback;
  return v->type() == GgufValueType::F64 ? v->as_f64() : v->as_f32();
}

int64_t require_positive(const GgufFile& f, const std::string& k) {
  if (f.find(k) == nullptr) throw Error("[llm] missing metadata key " + k);
  const int64_t v = f.get_integer(k);
  if (v <= 0) throw Error(absl::StrCat("[llm] metadata ", k, " must be positive, got ", v));
  return v;
}

}  // namespace

LlmConfig read_llm_config(const GgufFile& file) {
  LlmConfig c;
  if (file.find("general.architecture") == nullptr) throw Error("[llm] missing general.architecture");
  c.arch_name = std::string(file.get_string("general.architecture"));
  if (c.arch_name == "llama") {
    c.arch = LlmArch::Llama;
  } else if (c.arch_name == "gemma3") {
    c.arch = LlmArch::Gemma3;
  } else {
    throw Error("[llm] unsupported architecture '" + c.arch_name + "' (supported: llama, gemma3)");
  }
  c.layers = require_positive(file, key(c, "block_count"));
  c.dim = require_positive(file, key(c, "embedding_length"));
  c.ffn = require_positive(file, key(c, "feed_forward_length"));
  c.heads = require_positive(file, key(c, "attention.head_count"));
  c.kv_heads = int_or(file, key(c, "attention.head_count_kv"), c.heads);
  c.head_dim = int_or(file, key(c, "attention.key_length"), c.dim / c.heads);
  c.context_length = int_or(file, key(c, "context_length"), 2048);
  c.rms_eps = float_or(file, key(c, "attention.layer_norm_rms_epsilon"), 1e-5);
  c.rope_base = float_or(file, key(c, "rope.freq_base"), 10000.0);
  c.rope_dims = int_or(file, key(c, "rope.dimension_count"), c.head_dim);
  const GgufTensor& embedding = file.tensor("token_embd.weight");
  if (embedding.dims.size() != 2)
    throw Error(absl::StrCat("[llm] token_embd.weight must have 2 dims, has ", embedding.dims.size()));
  c.vocab = int_or(file, key(c, "vocab_size"), embedding.shape()[0]);
  c.tied_output = file.find_tensor("output.weight") == nullptr;
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.arch == LlmArch::Llama) {
    // llama.cpp's converter permutes Q and K rows so that rotation pairs are adjacent.
    c.rope_mode = RopeMode::Interleaved;
  } else {
    c.rope_mode = RopeMode::HalfSplit;
    // Gemma-3 facts the file does not carry: local layers use base 10000, and five sliding
    // layers alternate with one global layer.
    c.rope_base_local = 10000.0;
    c.sliding_window = int_or(file, key(c, "attention.sliding_window"), 0);
    c.sliding_pattern = 6;
    c.embedding_scale = std::sqrt(static_cast<double>(c.dim));
    c.final_softcap = float_or(file, key(c, "final_logit_softcapping"), 0.0);
  }
  if (c.head_dim <= 0) throw Error(absl::StrCat("[llm] attention.key_length must be positive, got ", c.head_dim));
  checked_mul("llm", "head_count * key_length", c.heads, c.head_dim);
  if (c.rope_dims < 0) throw Error(absl::StrCat("[llm] rope.dimension_count must be >= 0, got ", c.rope_dims));
  if (c.sliding_window < 0)
    throw Error(absl::StrCat("[llm] attention.sliding_window must be >= 0, got ", c.sliding_window));
  if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0)
    throw Error(absl::StrCat("[llm] ", c.heads, " heads are not a multiple of ", c.kv_heads, " kv heads"));
  if (c.rope_dims % 2 != 0 || c.rope_dims > c.head_dim)
    throw Error(absl::StrCat("[llm] rope dimension ", c.rope_dims, " invalid for head size ", c.head_dim));
  if (embedding.shape() != Shape{c.vocab, c.dim})
    throw Error(absl::StrCat("[llm] token_embd.weight is ", shape_string(embedding.shape()), ", expected [",
                             c.vocab, ", ", c.dim, "]"));
  return c;
}

LlmModel::LlmModel(GgufFile file, int64_t capacity, LlmOptions options)
    : file_(std::move(file)), config_(read_llm_config(file_)), capacity_(capacity), options_(options) {}

std::unique_ptr<LlmModel> LlmModel::load(const std::string& path, int64_t capacity, LlmOptions options) {
  if (capacity <= 0) throw Error(absl::StrCat("[llm] capacity must be positive, got ", capacity));
  if (options.kv_dtype != DType::F32 && options.kv_dtype != DType::F16 && options.kv_dtype != DType::Q8_0)
    throw Error(absl::StrCat("[llm] K/V cache dtype must be f32, f16 or q8_0, got ", dtype_name(options.kv_dtype)));
  std::unique_ptr<LlmModel> model(new LlmModel(GgufFile::open(path), capacity, options));
  if (options.kv_dtype == DType::Q8_0 && model->config_.head_dim % 32 != 0)
    throw Error(absl::StrCat("[llm] a q8_0 K/V cache needs a head dim that is a multiple of 32, got ",
                             model->config_.head_dim));
  model->build();
  return model;
}

Tensor LlmModel::weight(const std::string& name) {
  const GgufTensor& t = file_.tensor(name);
  std::optional<DType> dtype = ggml_type_dtype(t.type);
  if (!dtype) throw Error("[llm] tensor " + name + " has unsupported type " + ggml_type_name(t.type));
  return graph_.constant_external(t.shape(), *dtype, t.data, file_.owner());
}

void LlmModel::build() {
  const LlmConfig& c = config_;
  const int64_t T = capacity_;
  const bool gemma = c.arch == LlmArch::Gemma3;
  Graph& g = graph_;
  Tensor ids = g.input("ids", {T}, DType::I32);
  Tensor positions = arange(g, T, 0, 1, DType::I32);
  Tensor embedding = weight("token_embd.weight");
  Tensor x = gather(embedding, ids);
  if (c.embedding_scale != 1.0) x = x * g.scalar(static_cast<float>(c.embedding_scale));
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const std::string p = absl::StrCat("blk.", layer, ".");
    const bool sliding = c.is_sliding(layer);
    Tensor h = rms_norm(x, weight(p + "attn_norm.weight"), c.rms_eps);
    // The three projections before their reshapes: their steps run back to back and their
    // packed weights lie back to back, one stream for the hardware prefetcher.
    Tensor q = linear(h, weight(p + "attn_q.weight"));
    Tensor k = linear(h, weight(p + "attn_k.weight"));
    Tensor v = linear(h, weight(p + "attn_v.weight"));
    q = reshape(q, {T, c.heads, c.head_dim});
    k = reshape(k, {T, c.kv_heads, c.head_dim});
    v = reshape(v, {T, c.kv_heads, c.head_dim});
    if (gemma) {
      q = rms_norm(q, weight(p + "attn_q_norm.weight"), c.rms_eps);
      k = rms_norm(k, weight(p + "attn_k_norm.weight"), c.rms_eps);
    }
    const double base = sliding ? c.rope_base_local : c.rope_base;
    q = rope(q, positions, c.rope_dims, base, c.rope_mode);
    k = rope(k, positions, c.rope_dims, base, c.rope_mode);
    if (options_.kv_dtype != DType::F32) {
      k = cast(k, options_.kv_dtype);
      v = cast(v, options_.kv_dtype);
    }
    AttentionParams params;
    params.scale = c.attention_scale;
    params.window = sliding ? c.sliding_window : 0;
    Tensor a = attention(q, k, v, params);
    keys_.push_back(k);
    values_.push_back(v);
    Tensor o = linear(reshape(a, {T, c.heads * c.head_dim}), weight(p + "attn_output.weight"));
    if (gemma) o = rms_norm(o, weight(p + "post_attention_norm.weight"), c.rms_eps);
    x = x + o;
    h = rms_norm(x, weight(p + "ffn_norm.weight"), c.rms_eps);
    Tensor gate = linear(h, weight(p + "ffn_gate.weight"));
    Tensor up = linear(h, weight(p + "ffn_up.weight"));
    Tensor f = linear((gemma ? gelu(gate, true) : silu(gate)) * up, weight(p + "ffn_down.weight"));
    if (gemma) f = rms_norm(f, weight(p + "post_ffw_norm.weight"), c.rms_eps);
    x = x + f;
  }
  x = rms_norm(x, weight("output_norm.weight"), c.rms_eps);
  hidden_ = x;
  g.output("hidden", hidden_);
  logits_ = linear(x, c.tied_output ? embedding : weight("output.weight"));
  if (c.final_softcap > 0) {
    Tensor cap = g.scalar(static_cast<float>(c.final_softcap));
    logits_ = tanh(logits_ / cap) * cap;
  }
  g.output("logits", logits_);
}

std::unique_ptr<GraphSession> LlmModel::new_session(SessionOptions options) const {
  // Tokens are appended: the policy derives that K and V (which later rows read) are worth
  // keeping and every other node (read one new row at a time) is transient.
  options.hints.push_back(InputHint{"ids", InputHint::Kind::Append});
  // Sessions of one model share its pool (and so its huge-page weight copies) unless told
  // otherwise.
  if (options.pool == nullptr && options.cache_budget_bytes < 0) options.pool = pool_;
  return std::make_unique<GraphSession>(graph_, options);
}

}  // namespace tessera
