// The real convolutional networks of the model tests and their PyTorch goldens.
//
// Weights live outside the repository, in ../shared/models relative to it (or in the directory
// TESSERA_CONV_MODELS names): taesd/*.safetensors and upscaler/* as their READMEs there
// describe. Without them a test says so and passes, except under CI (CI=true), where a missing
// model fails. Goldens (tests/models/golden/*.npy) are written by scripts/reference_conv_nets.py.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/dtype.h"
#include "engine/session.h"

namespace tessera::testing {

inline std::string conv_model_path(const std::string& relative) {
  const char* dir = std::getenv("TESSERA_CONV_MODELS");
  const std::string root =
      dir != nullptr && *dir != '\0' ? dir : std::string(TESSERA_SOURCE_DIR) + "/../shared/models";
  return root + "/" + relative;
}

// True when the file is there; otherwise a skip message (or, under CI=true, a failure).
inline bool have_conv_model(const std::string& relative) {
  const std::string path = conv_model_path(relative);
  if (std::filesystem::exists(path)) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::strcmp(ci, "true") == 0) {
    FAIL_CHECK("model missing under CI: ", path, " (see tests/models/golden/README.md)");
    return false;
  }
  MESSAGE("skipping: ", path, " missing (see tests/models/golden/README.md)");
  return false;
}

// A little-endian float32 C-order .npy file (format 1.0 or 2.0), as numpy.save writes it.
struct Npy {
  Shape shape;
  std::vector<float> values;
};

inline Npy read_npy(const std::string& name) {
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/models/golden/" + name;
  std::ifstream file(path, std::ios::binary);
  REQUIRE_MESSAGE(file.good(), "cannot open ", path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  REQUIRE_MESSAGE((bytes.size() >= 12 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0), path,
                  ": not .npy");
  const int major = bytes[6];
  const size_t length_bytes = major == 1 ? 2 : 4;
  size_t header_length = 0;
  for (size_t i = 0; i < length_bytes; ++i)
    header_length |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
  const size_t data_at = 8 + length_bytes + header_length;
  REQUIRE(data_at <= bytes.size());
  const std::string header(bytes.data() + 8 + length_bytes, header_length);
  REQUIRE_MESSAGE(header.find("'descr': '<f4'") != std::string::npos, path,
                  ": not little-endian float32");
  REQUIRE_MESSAGE(header.find("'fortran_order': False") != std::string::npos, path,
                  ": not C order");
  const size_t open = header.find("'shape': (");
  REQUIRE(open != std::string::npos);
  Npy npy;
  const char* p = header.c_str() + open + 10;
  while (*p != ')') {
    char* end = nullptr;
    npy.shape.push_back(std::strtoll(p, &end, 10));
    REQUIRE(end != p);
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  npy.values.resize(static_cast<size_t>(shape_volume(npy.shape)));
  REQUIRE(bytes.size() - data_at == npy.values.size() * sizeof(float));
  std::memcpy(npy.values.data(), bytes.data() + data_at, bytes.size() - data_at);
  return npy;
}

// Largest absolute difference, and the largest difference relative to the reference's largest
// magnitude (the scale-aware error the golden tests bound).
struct Agreement {
  double max_abs = 0;
  double max_ref = 0;
  double relative() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

inline Agreement agreement(const std::vector<float>& ours, const std::vector<float>& reference) {
  Agreement a;
  REQUIRE(ours.size() == reference.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    a.max_abs = std::max(a.max_abs, std::abs(static_cast<double>(ours[i]) - reference[i]));
    a.max_ref = std::max(a.max_ref, std::abs(static_cast<double>(reference[i])));
  }
  return a;
}

}  // namespace tessera::testing
