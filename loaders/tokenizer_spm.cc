// SentencePiece-style BPE (llama.cpp's llm_tokenizer_spm, sentencepiece's bpe_model):
// merge the adjacent pair whose concatenation is a normal token with the highest score,
// leftmost on ties, until none is left; symbols with no token fall back to <0xNN> bytes.
#include <queue>

#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "loaders/tokenizer_state.h"
#include "loaders/tokenizer_unicode.h"

namespace tessera {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> NN, or -1.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int high = hex_digit(piece[3]);
  const int low = hex_digit(piece[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0;;) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) {
      out.append(text.substr(pos));
      return out;
    }
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
}

// Pieces that merges may produce and that stand for themselves in the output.
bool is_text_piece(TokenType type) {
  return type == TokenType::Normal || type == TokenType::UserDefined || type == TokenType::Unused;
}

struct Symbol {
  size_t start;
  size_t length;  // 0 once merged into the left neighbour
  int32_t prev;
  int32_t next;
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  size_t length;  // combined length when queued; stale if the symbols changed since
  // Highest score first; leftmost first among equal scores.
  bool operator<(const Candidate& other) const {
    return score != other.score ? score < other.score : left > other.left;
  }
};

void emit_symbol(const Tokenizer::State& state, std::string_view piece, std::vector<int32_t>& out) {
  const int32_t id = state.find_piece(piece);
  if (id >= 0 && is_text_piece(state.types[id])) {
    out.push_back(id);
    return;
  }
  bool all_bytes = true;
  for (char c : piece) all_bytes = all_bytes && state.byte_tokens[static_cast<uint8_t>(c)] >= 0;
  if (all_bytes) {
    for (char c : piece) out.push_back(state.byte_tokens[static_cast<uint8_t>(c)]);
  } else if (state.unk >= 0) {
    out.push_back(state.unk);
  } else {
    state.fail(
        absl::StrCat("no token, byte token or unknown token for '", std::string(piece), "'"));
  }
}

}  // namespace

void load_spm_vocab(Tokenizer::State& state) {
  if (state.scores.empty()) state.fail("missing tokenizer.ggml.scores");
  state.byte_tokens.fill(-1);
  state.texts.resize(state.pieces.size());
  for (size_t id = 0; id < state.pieces.size(); ++id) {
    const std::string& piece = state.pieces[id];
    switch (state.types[id]) {
      case TokenType::Byte: {
        const int byte = parse_byte_piece(piece);
        if (byte < 0) {
          state.fail(absl::StrCat("byte token ", id, " '", piece, "' is not of the form <0xNN>"));
        }
        if (state.byte_tokens[byte] < 0) state.byte_tokens[byte] = static_cast<int32_t>(id);
        state.texts[id] = std::string(1, static_cast<char>(byte));
        break;
      }
      case TokenType::Control:
      case TokenType::Unknown:
        state.texts[id] = piece;
        break;
      default:
        state.texts[id] = replace_all(piece, kSpace, " ");
        break;
    }
  }
}

void encode_spm(const Tokenizer::State& state, std::string_view text, bool after_special,
                std::vector<int32_t>& out) {
  std::string normalized;
  if (state.add_space_prefix && after_special) normalized = kSpace;
  normalized += replace_all(text, " ", kSpace);
  const std::string_view view = normalized;

  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < view.size();) {
    const size_t length = unicode::decode_utf8(view, pos).length;
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, length, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += length;
  }

  std::priority_queue<Candidate> agenda;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t length = symbols[left].length + symbols[right].length;
    const int32_t id = state.find_piece(view.substr(symbols[left].start, length));
    if (id < 0 || !is_text_piece(state.types[id])) return;
    agenda.push({state.scores[id], left, right, length});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i, i + 1);

  while (!agenda.empty()) {
    const Candidate c = agenda.top();
    agenda.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) continue;
    left.length = c.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    emit_symbol(state, view.substr(symbols[i].start, symbols[i].length), out);
  }
}

}  // namespace tessera
