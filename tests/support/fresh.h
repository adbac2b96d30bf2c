// Reference reads for decode tests: a fresh session over the whole prefix.
#pragma once

#include <vector>

#include "engine/session.h"

namespace tessera::testing {

// Row `row` of "logits" from a new session that is given every token at once.
inline std::vector<float> fresh_logits(const Graph& g, const std::vector<int32_t>& tokens, int64_t row, int64_t vocab) {
  GraphSession fresh(g);
  fresh.write("ids", Box{{0, static_cast<int64_t>(tokens.size())}}, tokens);
  return fresh.read<float>("logits", Box{{row, row + 1}, {0, vocab}});
}

}  // namespace tessera::testing
