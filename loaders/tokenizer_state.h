// Internal to loaders/tokenizer*: the immutable state behind a Tokenizer and the encoders
// that work on it (tokenizer_bpe.cc, tokenizer_spm.cc, tokenizer_chat.cc).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "loaders/tokenizer.h"

namespace tessera {

// The pre-tokenizer regexes, as llama.cpp groups tokenizer.ggml.pre names.
enum class PreTokenizer : uint8_t {
  Gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  SmolLm,  // every \p{N} on its own, then Gpt2 on each piece
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+ ; a word that is itself a token skips the merges.
  Llama3,
  Qwen2,  // Llama3 with \p{N} instead of \p{N}{1,3}, and merges always applied
};

struct BpeMerge {
  int32_t rank = 0;
  int32_t result = 0;  // token id of the merged piece
};

struct Tokenizer::State {
  std::string name;  // for error messages
  TokenizerModel model = TokenizerModel::BytePairGpt2;
  PreTokenizer pre = PreTokenizer::Gpt2;

  std::vector<std::string> pieces;  // vocabulary spelling
  std::vector<std::string> texts;   // decoded bytes of each token
  std::vector<TokenType> types;
  std::vector<float> scores;  // SentencePiece only
  absl::flat_hash_map<std::string, int32_t> piece_ids;

  // Byte-level BPE: (left id << 32 | right id) -> merge; the token of each byte's GPT-2 char.
  // SentencePiece: the <0xNN> token of each byte. -1 where there is none.
  absl::flat_hash_map<uint64_t, BpeMerge> merges;
  std::array<int32_t, 256> byte_tokens{};

  // Control and user-defined tokens matched in raw text, by their raw spelling. For each
  // first byte, the distinct lengths of such tokens, longest first.
  absl::flat_hash_map<std::string, int32_t> special_ids;
  std::array<std::vector<uint32_t>, 256> special_lengths;

  int32_t bos = -1;
  int32_t eos = -1;
  int32_t unk = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  std::vector<bool> eog;

  ChatFormat chat_format = ChatFormat::None;
  std::string default_system_prompt;  // ChatML: inserted when no system message comes first

  int32_t vocab_size() const { return static_cast<int32_t>(pieces.size()); }
  // Id of a vocabulary spelling / of special-token text, -1 when absent. (This Abseil's
  // heterogeneous lookup takes absl::string_view, not std::string_view.)
  int32_t find_piece(std::string_view piece) const { return find_in(piece_ids, piece); }
  int32_t find_special(std::string_view text) const { return find_in(special_ids, text); }
  bool is_special(int32_t id) const {
    return types[id] == TokenType::Control || types[id] == TokenType::Unknown;
  }
  [[noreturn]] void fail(std::string_view message) const;

 private:
  static int32_t find_in(const absl::flat_hash_map<std::string, int32_t>& map,
                         std::string_view key) {
    const auto it = map.find(absl::string_view(key.data(), key.size()));
    return it == map.end() ? -1 : it->second;
  }
};

// Appends the ids of one stretch of text that holds no special tokens. `after_special` is
// true at the start of the text and right after a special token (SentencePiece adds its
// dummy prefix space there).
void encode_bpe(const Tokenizer::State& state, std::string_view text, std::vector<int32_t>& out);
void encode_spm(const Tokenizer::State& state, std::string_view text, bool after_special,
                std::vector<int32_t>& out);

// The pre-tokenizer's words, as byte ranges of `text`, in order and covering it.
std::vector<std::string_view> pre_tokenize(PreTokenizer pre, std::string_view text);

// The GPT-2 byte-to-unicode table: the code point each byte is spelled with in a byte-level
// vocabulary.
const std::array<char32_t, 256>& gpt2_byte_to_codepoint();

// Load-time parts of byte-level BPE and SentencePiece vocabularies.
void load_bpe_vocab(const GgufFile& file, Tokenizer::State& state);
void load_spm_vocab(Tokenizer::State& state);

ChatFormat detect_chat_format(std::string_view chat_template, std::string_view architecture,
                              std::string& default_system_prompt);
std::string render_chat(const Tokenizer::State& state, std::span<const ChatMessage> messages,
                        bool add_generation_prompt);

}  // namespace tessera
