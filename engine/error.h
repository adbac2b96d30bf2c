// tessera::Error: every failure caused by user input or file content (bad shapes or dtypes,
// out-of-range boxes, unknown names, corrupt files, exhausted budgets). Messages start with
// the area in brackets, e.g. "[matmul] ..." or "[session] ...".
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tessera
