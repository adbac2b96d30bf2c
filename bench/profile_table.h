// The per-op table of SessionOptions::profile, shared by the benchmarks' --profile modes.
#pragma once

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/session.h"

namespace tessera::bench {

// One line per op, most time first: steps and microseconds per `unit` (a decoded token, a
// forward), microseconds per step and the op's share of all steps; then the total.
inline void print_profile(const std::map<std::string, OpProfile>& profile, double units, const char* unit) {
  std::vector<std::pair<std::string, OpProfile>> ops(profile.begin(), profile.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [name, op] : ops) total += op.seconds;
  const std::string per = std::string("us per ") + unit;
  std::printf("  %-28s %8s %12s %12s %6s\n", "op", "steps", per.c_str(), "us per step", "share");
  for (const auto& [name, op] : ops)
    std::printf("  %-28s %8.1f %12.1f %12.2f %5.1f%%\n", name.c_str(), static_cast<double>(op.steps) / units,
                op.seconds / units * 1e6, op.seconds / static_cast<double>(op.steps) * 1e6, 100 * op.seconds / total);
  std::printf("  %-28s %8s %12.1f\n", "all steps", "", total / units * 1e6);
}

}  // namespace tessera::bench
