// Tokenizers built from the vocabulary embedded in a GGUF file (tokenizer.ggml.* metadata):
//
// - byte-level BPE (tokenizer.ggml.model "gpt2", e.g. SmolLM2): text is split by special
//   tokens, then by the pre-tokenizer named in tokenizer.ggml.pre (hand-written matchers for
//   the GPT-2 regex, "smollm" = GPT-2 after isolating every \p{N}, and the Llama-3 / Qwen2
//   regexes), each word's bytes are spelled through the GPT-2 byte-to-unicode table and merged
//   by rank (tokenizer.ggml.merges).
// - SentencePiece-style BPE (tokenizer.ggml.model "llama", e.g. Gemma-3): spaces become
//   U+2581 "▁" (plus a leading one when tokenizer.ggml.add_space_prefix, default true), then
//   adjacent symbols are merged greedily, highest tokenizer.ggml.scores first, leftmost on
//   ties, into normal tokens; characters with no token fall back to <0xNN> byte tokens.
//
// In both, user-defined tokens (token type 4) are matched as whole pieces in the raw text,
// leftmost-longest; control tokens (type 3, e.g. <|im_start|>, <start_of_turn>) only when
// encode() is asked to parse special text. Results match Hugging Face transformers on the
// goldens in tests/llm/golden, except where transformers' GGUF conversion departs from the
// models' own tokenizers (see tokenizer_golden_test.cc); there we follow the originals and
// llama.cpp.
//
// A Tokenizer owns a copy of what it needs (the GgufFile may be closed afterwards), is
// immutable and cheap to copy (shared state), and is safe to use from several threads.
// Malformed vocabularies and invalid arguments throw tessera::Error "[tokenizer] ...".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class GgufFile;

// tokenizer.ggml.token_type values (0, "undefined", is read as Normal).
enum class TokenType : uint8_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

enum class TokenizerModel : uint8_t {
  BytePairGpt2,   // "gpt2"
  SentencePiece,  // "llama"
};

// The hand-written chat formats (there is no Jinja engine).
enum class ChatFormat : uint8_t {
  None,    // no template, or one that is not recognised: apply_chat_template throws
  ChatMl,  // "<|im_start|>{role}\n{content}<|im_end|>\n" (SmolLM2, Qwen)
  Gemma,   // "<start_of_turn>{user|model}\n{content}<end_of_turn>\n" (Gemma 2/3)
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model, pre, tokens, token_type, scores, merges, *_token_id,
  // add_bos_token, add_eos_token, add_space_prefix}, tokenizer.chat_template and
  // general.architecture. Throws Error "[tokenizer] <file>: ..." on anything missing,
  // inconsistent or unsupported.
  static Tokenizer from_gguf(const GgufFile& file);

  // Token ids of `text` (any bytes; invalid UTF-8 is encoded byte-wise). add_special: put BOS
  // first when the model's add_bos flag is set (and EOS last when add_eos is). parse_special:
  // control-token text such as "<|im_start|>" becomes that token; otherwise it is plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes the ids stand for. skip_special drops control and unknown tokens. Throws Error
  // for ids outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Decoded bytes of one token (control tokens give their text). A byte-level or <0xNN>
  // token may hold part of a UTF-8 sequence: use TokenStreamDecoder to stream text.
  std::string token_text(int32_t id) const;
  // The token as spelled in the vocabulary ("Ġworld", "▁world", "<0x0A>", "<|im_end|>").
  std::string_view token_piece(int32_t id) const;
  // Id of a vocabulary spelling, -1 when there is none.
  int32_t token_id(std::string_view piece) const;
  TokenType token_type(int32_t id) const;
  // Control and unknown tokens: what decode(skip_special = true) drops.
  bool is_special(int32_t id) const;

  int32_t bos() const;  // -1 when the model has none
  int32_t eos() const;  // -1 when the model has none
  bool add_bos() const;
  // SentencePiece dummy prefix: encode puts a space before text that starts the input or
  // follows a special token; decode and TokenStreamDecoder drop the first text token's
  // leading space.
  bool add_space_prefix() const;
  // End of generation: EOS, EOT/EOM ids from the metadata, and control or user-defined tokens
  // spelled like a turn end ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", ...).
  bool is_eog(int32_t id) const;
  int32_t vocab_size() const;
  TokenizerModel model() const;

  ChatFormat chat_format() const;
  // The prompt text for `messages` as the model's chat template renders it, without the BOS
  // token (encode with add_special = true, parse_special = true adds it). ChatML inserts the
  // template's default system prompt when the first message is not a system message; Gemma
  // folds a leading system message into the first user turn and trims contents. Throws Error
  // for ChatFormat::None or messages the template rejects (Gemma: roles must alternate
  // user/assistant after the optional system message).
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const;

  struct State;  // defined in loaders/tokenizer_state.h

 private:
  explicit Tokenizer(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  void check_id(int32_t id) const;

  std::shared_ptr<const State> state_;
};

// Buffers bytes until they end on a UTF-8 sequence boundary, so that streamed text never
// splits a character. Bytes that can never become valid UTF-8 are passed through as is.
class Utf8StreamBuffer {
 public:
  // Returns everything up to the last complete character; keeps an incomplete tail.
  std::string push(std::string_view bytes);
  // Returns whatever is buffered (possibly an incomplete sequence) and empties the buffer.
  std::string flush();
  bool empty() const { return pending_.empty(); }

 private:
  std::string pending_;
};

// Streams generated tokens as text: token_text per id, control tokens dropped when
// skip_special, output cut on UTF-8 character boundaries. Keeps a reference to `tokenizer`.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer),
        skip_special_(skip_special),
        strip_space_(tokenizer.add_space_prefix()) {}

  std::string push(int32_t id);  // text now complete (may be empty)
  std::string flush() { return buffer_.flush(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool strip_space_;
  Utf8StreamBuffer buffer_;
};

}  // namespace tessera
