// Tokenizer: vocabulary loading from GGUF metadata, special-token partitioning, decoding and
// streaming. The model-specific encoders live in tokenizer_bpe.cc and tokenizer_spm.cc.
#include "loaders/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "loaders/gguf.h"
#include "loaders/tokenizer_state.h"
#include "loaders/tokenizer_unicode.h"

namespace tessera {

void Tokenizer::State::fail(std::string_view message) const {
  throw Error(absl::StrCat("[tokenizer] ", name, ": ", std::string(message)));
}

namespace {

// Runs a metadata read, turning the GGUF layer's type errors into tokenizer errors.
template <typename F>
auto read_key(const Tokenizer::State& state, std::string_view key, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    state.fail(absl::StrCat("metadata ", std::string(key), ": ", e.what()));
  }
}

bool read_bool(const GgufFile& file, const Tokenizer::State& state, std::string_view key,
               bool fallback) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return fallback;
  return read_key(state, key, [&] { return value->as_bool(); });
}

// A token id key: absent, -1 or 0xFFFFFFFF mean "none"; anything else must be in range.
int32_t read_token_id(const GgufFile& file, const Tokenizer::State& state, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return -1;
  const int64_t id = read_key(state, key, [&] { return value->as_integer(); });
  if (id == -1 || id == 0xFFFFFFFF) return -1;
  if (id < 0 || id >= state.vocab_size()) {
    state.fail(absl::StrCat(std::string(key), " ", id, " is outside the vocabulary of ",
                            state.vocab_size(), " tokens"));
  }
  return static_cast<int32_t>(id);
}

void read_vocabulary(const GgufFile& file, Tokenizer::State& state) {
  const GgufValue* tokens = file.find("tokenizer.ggml.tokens");
  if (tokens == nullptr) state.fail("missing tokenizer.ggml.tokens");
  const auto& pieces =
      read_key(state, "tokenizer.ggml.tokens",
               [&]() -> const std::vector<std::string_view>& { return tokens->strings(); });
  if (pieces.empty()) state.fail("tokenizer.ggml.tokens is empty");
  if (pieces.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    state.fail("tokenizer.ggml.tokens has more than 2^31 - 1 tokens");
  }
  const size_t n = pieces.size();
  state.pieces.assign(pieces.begin(), pieces.end());
  state.piece_ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    state.piece_ids.try_emplace(state.pieces[i], static_cast<int32_t>(i));  // first one wins
  }

  state.types.assign(n, TokenType::Normal);
  if (const GgufValue* types = file.find("tokenizer.ggml.token_type")) {
    const auto values =
        read_key(state, "tokenizer.ggml.token_type", [&] { return types->to_vector<int32_t>(); });
    if (values.size() != n) {
      state.fail(absl::StrCat("tokenizer.ggml.token_type has ", values.size(), " entries for ", n,
                              " tokens"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (values[i] < 0 || values[i] > 6) {
        state.fail(absl::StrCat("token ", i, " has unknown token type ", values[i]));
      }
      state.types[i] = values[i] == 0 ? TokenType::Normal : static_cast<TokenType>(values[i]);
    }
  }

  if (const GgufValue* scores = file.find("tokenizer.ggml.scores")) {
    state.scores =
        read_key(state, "tokenizer.ggml.scores", [&] { return scores->to_vector<float>(); });
    if (state.scores.size() != n) {
      state.fail(absl::StrCat("tokenizer.ggml.scores has ", state.scores.size(), " entries for ", n,
                              " tokens"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(state.scores[i])) state.fail(absl::StrCat("token ", i, " has a NaN score"));
    }
  }
}

void read_special_tokens(const GgufFile& file, Tokenizer::State& state) {
  state.bos = read_token_id(file, state, "tokenizer.ggml.bos_token_id");
  state.eos = read_token_id(file, state, "tokenizer.ggml.eos_token_id");
  state.unk = read_token_id(file, state, "tokenizer.ggml.unknown_token_id");
  const int32_t eot = read_token_id(file, state, "tokenizer.ggml.eot_token_id");
  const int32_t eom = read_token_id(file, state, "tokenizer.ggml.eom_token_id");

  const bool spm = state.model == TokenizerModel::SentencePiece;
  state.add_bos = read_bool(file, state, "tokenizer.ggml.add_bos_token", spm);
  state.add_eos = read_bool(file, state, "tokenizer.ggml.add_eos_token", false);
  state.add_space_prefix = read_bool(file, state, "tokenizer.ggml.add_space_prefix", spm);
  if (state.add_bos && state.bos < 0) state.fail("add_bos_token is set but there is no BOS token");
  if (state.add_eos && state.eos < 0) state.fail("add_eos_token is set but there is no EOS token");

  // Text matched as whole tokens: control, unknown and user-defined tokens.
  for (int32_t id = 0; id < state.vocab_size(); ++id) {
    const TokenType type = state.types[id];
    const std::string& piece = state.pieces[id];
    if (piece.empty()) continue;
    if (type != TokenType::Control && type != TokenType::Unknown &&
        type != TokenType::UserDefined) {
      continue;
    }
    if (!state.special_ids.try_emplace(piece, id).second) continue;
    auto& lengths = state.special_lengths[static_cast<uint8_t>(piece[0])];
    const auto length = static_cast<uint32_t>(piece.size());
    if (std::find(lengths.begin(), lengths.end(), length) == lengths.end()) {
      lengths.push_back(length);
    }
  }
  for (auto& lengths : state.special_lengths) std::sort(lengths.rbegin(), lengths.rend());

  static constexpr std::string_view kTurnEnds[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>",
                                                   "<|eom_id|>", "<|endoftext|>", "<|end|>",
                                                   "<EOT>",      "<|return|>",    "<|call|>"};
  state.eog.assign(state.pieces.size(), false);
  for (int32_t id : {state.eos, eot, eom}) {
    if (id >= 0) state.eog[id] = true;
  }
  for (std::string_view text : kTurnEnds) {
    const int32_t id = state.find_special(text);
    if (id >= 0) state.eog[id] = true;
  }
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  auto state = std::make_shared<State>();
  state->name = file.name();
  const GgufValue* model = file.find("tokenizer.ggml.model");
  if (model == nullptr) state->fail("missing tokenizer.ggml.model");
  const std::string model_name(
      read_key(*state, "tokenizer.ggml.model", [&] { return model->as_string(); }));
  if (model_name == "gpt2") {
    state->model = TokenizerModel::BytePairGpt2;
  } else if (model_name == "llama") {
    state->model = TokenizerModel::SentencePiece;
  } else {
    state->fail(
        absl::StrCat("unsupported tokenizer model '", model_name, "' (supported: gpt2, llama)"));
  }

  read_vocabulary(file, *state);
  read_special_tokens(file, *state);
  if (state->model == TokenizerModel::BytePairGpt2) {
    load_bpe_vocab(file, *state);
  } else {
    load_spm_vocab(*state);
  }

  std::string chat_template;
  if (const GgufValue* value = file.find("tokenizer.chat_template")) {
    chat_template = read_key(*state, "tokenizer.chat_template",
                             [&] { return std::string(value->as_string()); });
  }
  std::string architecture;
  if (const GgufValue* value = file.find("general.architecture")) {
    architecture =
        read_key(*state, "general.architecture", [&] { return std::string(value->as_string()); });
  }
  state->chat_format =
      detect_chat_format(chat_template, architecture, state->default_system_prompt);
  return Tokenizer(std::move(state));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const State& s = *state_;
  std::vector<int32_t> out;
  if (add_special && s.add_bos) out.push_back(s.bos);

  bool after_special = true;
  const auto flush = [&](size_t begin, size_t end) {
    if (begin == end) return;
    const std::string_view fragment = text.substr(begin, end - begin);
    if (s.model == TokenizerModel::BytePairGpt2) {
      encode_bpe(s, fragment, out);
    } else {
      encode_spm(s, fragment, after_special, out);
    }
    after_special = false;
  };

  // Leftmost-longest match of special token text; plain text in between goes to the encoder.
  size_t fragment_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t match = -1;
    size_t match_length = 0;
    for (uint32_t length : s.special_lengths[static_cast<uint8_t>(text[pos])]) {
      if (length > text.size() - pos) continue;
      const int32_t id = s.find_special(text.substr(pos, length));
      if (id < 0) continue;
      if (!parse_special && s.types[id] != TokenType::UserDefined) continue;
      match = id;
      match_length = length;
      break;
    }
    if (match < 0) {
      ++pos;
      continue;
    }
    flush(fragment_begin, pos);
    out.push_back(match);
    after_special = true;
    pos += match_length;
    fragment_begin = pos;
  }
  flush(fragment_begin, text.size());

  if (add_special && s.add_eos) out.push_back(s.eos);
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= state_->vocab_size()) {
    throw Error(
        absl::StrCat("[tokenizer] token id ", id, " is outside [0, ", state_->vocab_size(), ")"));
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const State& s = *state_;
  std::string out;
  // With a dummy prefix, the first text token's leading space is the encoder's, not the text's.
  bool strip_space = s.add_space_prefix;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && s.is_special(id)) continue;
    const std::string& text = s.texts[id];
    if (strip_space && !s.is_special(id)) {
      strip_space = false;
      if (!text.empty() && text[0] == ' ') {
        out.append(text, 1);
        continue;
      }
    }
    out += text;
  }
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return state_->texts[id];
}

std::string_view Tokenizer::token_piece(int32_t id) const {
  check_id(id);
  return state_->pieces[id];
}

int32_t Tokenizer::token_id(std::string_view piece) const {
  return state_->find_piece(piece);
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return state_->types[id];
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return state_->is_special(id);
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < state_->vocab_size() && state_->eog[id];
}

int32_t Tokenizer::bos() const {
  return state_->bos;
}
int32_t Tokenizer::eos() const {
  return state_->eos;
}
bool Tokenizer::add_bos() const {
  return state_->add_bos;
}
bool Tokenizer::add_space_prefix() const {
  return state_->add_space_prefix;
}
int32_t Tokenizer::vocab_size() const {
  return state_->vocab_size();
}
TokenizerModel Tokenizer::model() const {
  return state_->model;
}
ChatFormat Tokenizer::chat_format() const {
  return state_->chat_format;
}

std::string Tokenizer::apply_chat_template(std::span<const ChatMessage> messages,
                                           bool add_generation_prompt) const {
  return render_chat(*state_, messages, add_generation_prompt);
}

std::string Utf8StreamBuffer::push(std::string_view bytes) {
  pending_ += bytes;
  // Find the last lead byte within the final 4 bytes; hold it back if its sequence is short.
  const size_t n = pending_.size();
  size_t cut = n;
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto byte = static_cast<uint8_t>(pending_[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte
    if (byte >= 0xC0 && unicode::utf8_length_from_lead(byte) > back) cut = n - back;
    break;
  }
  std::string ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return ready;
}

std::string Utf8StreamBuffer::flush() {
  return std::exchange(pending_, std::string());
}

std::string TokenStreamDecoder::push(int32_t id) {
  std::string text = tokenizer_.token_text(id);
  if (tokenizer_.is_special(id)) {
    return skip_special_ ? buffer_.push({}) : buffer_.push(text);
  }
  if (strip_space_) {
    strip_space_ = false;
    if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  }
  return buffer_.push(text);
}

}  // namespace tessera
