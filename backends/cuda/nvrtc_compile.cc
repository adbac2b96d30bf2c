#include "backends/cuda/nvrtc_compile.h"

#include <nvrtc.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::cuda {

absl::StatusOr<std::string> compile_to_ptx(const std::string& source, const std::string& name, const std::string& arch) {
  nvrtcProgram program = nullptr;
  if (nvrtcResult r = nvrtcCreateProgram(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
      r != NVRTC_SUCCESS)
    return absl::InternalError(absl::StrCat("[cuda] nvrtcCreateProgram: ", nvrtcGetErrorString(r)));
  const std::string gpu = "--gpu-architecture=" + arch;
  const char* options[] = {gpu.c_str(), "--fmad=false", "--std=c++17"};
  const nvrtcResult built = nvrtcCompileProgram(program, 3, options);
  std::string log;
  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    nvrtcGetProgramLog(program, log.data());
  }
  if (built != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    return absl::InternalError(absl::StrCat("[cuda] compiling ", name, " failed: ", nvrtcGetErrorString(built), "\n", log));
  }
  size_t size = 0;
  nvrtcGetPTXSize(program, &size);
  std::string ptx(size, '\0');
  nvrtcGetPTX(program, ptx.data());
  nvrtcDestroyProgram(&program);
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return absl::StrCat(major, ".", minor);
}

}  // namespace tessera::cuda
