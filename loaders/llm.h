// Causal language models built with the engine API from GGUF files: the Llama family (GQA,
// RoPE, RMSNorm, SwiGLU; e.g. SmolLM2) and Gemma-3 (interleaved sliding-window and global
// layers with their own RoPE bases, QK-norm, sandwich norms, GeGLU, scaled embeddings, tied
// output). Hyper-parameters come from the file's metadata, so other sizes of the same families
// load too. Weights are used in place from the file mapping (quantised rows are dequantised
// inside the linear and gather kernels).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/graph.h"
#include "engine/ops.h"
#include "engine/session.h"
#include "loaders/gguf.h"

namespace tessera {

enum class LlmArch { Llama, Gemma3 };

struct LlmConfig {
  LlmArch arch = LlmArch::Llama;
  std::string arch_name;
  int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int64_t context_length = 0;  // training context from the file
  double rms_eps = 1e-5;
  double rope_base = 10000;        // global layers
  double rope_base_local = 10000;  // sliding-window layers (Gemma-3)
  int64_t rope_dims = 0;
  RopeMode rope_mode = RopeMode::Interleaved;
  int64_t sliding_window = 0;        // 0: none
  int64_t sliding_pattern = 0;       // Gemma-3: every n-th layer is global, the others slide
  double attention_scale = 1.0;
  double embedding_scale = 1.0;
  double final_softcap = 0.0;
  bool tied_output = true;

  bool is_sliding(int64_t layer) const {
    return sliding_window > 0 && sliding_pattern > 0 && (layer + 1) % sliding_pattern != 0;
  }
};

// Reads the hyper-parameters of a supported architecture; throws Error ("[llm] ...") for an
// unsupported architecture or missing keys.
LlmConfig read_llm_config(const GgufFile& file);

struct LlmOptions {
  // Element type of the K/V cache (the kept attention keys and values): f32, or f16 (half the
  // memory, and half the bytes a decode step reads at long contexts; keys and values are
  // rounded to half precision once, and attention reads them exactly, as llama.cpp's default
  // f16 cache does), or q8_0 (a quarter of f32's memory: keys and values quantised to blocks of
  // 32 once, and attention quantises each query row the same way for integer dot products, as
  // llama.cpp's q8_0 cache does; the head dim must be a multiple of 32). Anything else throws
  // Error.
  DType kv_dtype = DType::F32;
};

// A model graph over a fixed context capacity. Input "ids" [capacity] i32 holds the token ids
// (row t = position t); output "logits" [capacity, vocab] f32, and output "hidden"
// [capacity, dim] f32, the final normalised hidden states (the conditioning a text encoder
// gives; reading it never computes the output projection). Writing token t and reading
// logits row t is one decode step; the K/V cache is the kept values of the attention inputs.
class LlmModel {
 public:
  // Opens the file and builds the graph. Throws Error on a bad file or unsupported model.
  static std::unique_ptr<LlmModel> load(const std::string& path, int64_t capacity, LlmOptions options = {});

  const LlmConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }
  const Graph& graph() const { return graph_; }
  int64_t capacity() const { return capacity_; }
  const LlmOptions& options() const { return options_; }
  Tensor logits() const { return logits_; }
  Tensor hidden() const { return hidden_; }
  // The attention inputs K and V of each layer (the K/V cache), of dtype options().kv_dtype.
  const std::vector<Tensor>& keys() const { return keys_; }
  const std::vector<Tensor>& values() const { return values_; }

  // A session with the cache policy this model wants: the hint that ids are appended makes the
  // policy keep the attention's K and V inputs (what later tokens read) and make everything else
  // transient (a decode step only ever needs one new row of it).
  // Without a pool or budget in `options`, sessions share the model's pool (its weights are
  // copied into huge-page memory once).
  std::unique_ptr<GraphSession> new_session(SessionOptions options = {}) const;
  const std::shared_ptr<MemoryPool>& pool() const { return pool_; }

 private:
  LlmModel(GgufFile file, int64_t capacity, LlmOptions options);
  void build();
  Tensor weight(const std::string& name);

  GgufFile file_;
  std::shared_ptr<MemoryPool> pool_ = MemoryPool::create();
  LlmConfig config_;
  int64_t capacity_ = 0;
  LlmOptions options_;
  Graph graph_;
  Tensor logits_, hidden_;
  std::vector<Tensor> keys_, values_;
};

}  // namespace tessera
