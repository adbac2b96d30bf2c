// Chat formats, hand-written after the templates they stand for (no Jinja engine).
#include "absl/strings/str_cat.h"
#include "engine/error.h"
#include "loaders/tokenizer_state.h"
#include "loaders/tokenizer_unicode.h"

namespace tessera {
namespace {

// Jinja's `trim` (Python str.strip()): Unicode whitespace plus the separators \x1c-\x1f.
std::string_view trim(std::string_view text) {
  size_t begin = text.size();
  size_t end = 0;
  for (size_t pos = 0; pos < text.size();) {
    const unicode::Utf8Char ch = unicode::decode_utf8(text, pos);
    const bool space = (ch.cp >= 0x1C && ch.cp <= 0x1F) ||
                       (ch.cp != unicode::kInvalid &&
                        unicode::classify(ch.cp) == unicode::CodepointClass::Whitespace);
    if (!space) {
      begin = std::min(begin, pos);
      end = pos + ch.length;
    }
    pos += ch.length;
  }
  return begin >= end ? std::string_view() : text.substr(begin, end - begin);
}

// The literal system prompt a ChatML template writes when the conversation has none, e.g.
// {{ '<|im_start|>system\nYou are ...<|im_end|>\n' }}; empty when there is no such literal.
std::string find_default_system_prompt(std::string_view chat_template) {
  for (std::string_view marker : {"'<|im_start|>system\n", "'<|im_start|>system\\n"}) {
    const size_t hit = chat_template.find(marker);
    if (hit == std::string_view::npos) continue;
    const size_t begin = hit + marker.size();
    const size_t end = chat_template.find("<|im_end|>", begin);
    if (end == std::string_view::npos) continue;
    const std::string_view prompt = chat_template.substr(begin, end - begin);
    // Anything that is not plain text (an expression, a quote) is not a fixed prompt.
    if (prompt.find_first_of("'\"{}\\") != std::string_view::npos) continue;
    return std::string(prompt);
  }
  return {};
}

std::string render_chatml(const Tokenizer::State& state, std::span<const ChatMessage> messages,
                          bool add_generation_prompt) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (i == 0 && message.role != "system" && !state.default_system_prompt.empty()) {
      absl::StrAppend(&out, "<|im_start|>system\n", state.default_system_prompt, "<|im_end|>\n");
    }
    absl::StrAppend(&out, "<|im_start|>", message.role, "\n", message.content, "<|im_end|>\n");
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string first_user_prefix;
  if (!messages.empty() && messages[0].role == "system") {
    first_user_prefix = absl::StrCat(messages[0].content, "\n\n");
    messages = messages.subspan(1);
  }
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if ((message.role == "user") != (i % 2 == 0)) {
      throw Error(absl::StrCat("[tokenizer] chat message ", i, " has role '", message.role,
                               "': Gemma roles must alternate user/assistant/user/..."));
    }
    const std::string role = message.role == "assistant" ? std::string("model") : message.role;
    absl::StrAppend(&out, "<start_of_turn>", role, "\n", i == 0 ? first_user_prefix : std::string(),
                    std::string(trim(message.content)), "<end_of_turn>\n");
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

ChatFormat detect_chat_format(std::string_view chat_template, std::string_view architecture,
                              std::string& default_system_prompt) {
  default_system_prompt.clear();
  if (!chat_template.empty()) {
    if (chat_template.find("<|im_start|>") != std::string_view::npos) {
      default_system_prompt = find_default_system_prompt(chat_template);
      return ChatFormat::ChatMl;
    }
    if (chat_template.find("<start_of_turn>") != std::string_view::npos) return ChatFormat::Gemma;
    return ChatFormat::None;
  }
  // Gemma GGUFs often ship without a template; the turn format is fixed for the family.
  if (architecture.substr(0, 5) == "gemma") return ChatFormat::Gemma;
  return ChatFormat::None;
}

std::string render_chat(const Tokenizer::State& state, std::span<const ChatMessage> messages,
                        bool add_generation_prompt) {
  switch (state.chat_format) {
    case ChatFormat::ChatMl:
      return render_chatml(state, messages, add_generation_prompt);
    case ChatFormat::Gemma:
      return render_gemma(messages, add_generation_prompt);
    case ChatFormat::None:
      break;
  }
  throw Error(absl::StrCat("[tokenizer] ", state.name,
                           ": no supported chat template (implemented: ChatML, Gemma turns)"));
}

}  // namespace tessera
