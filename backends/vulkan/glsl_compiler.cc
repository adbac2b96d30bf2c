#include "backends/vulkan/glsl_compiler.h"

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace tessera::vulkan {

absl::StatusOr<std::vector<uint32_t>> compile_glsl(const std::string& source) {
  static std::once_flag once;
  std::call_once(once,
                 [] { glslang_initialize_process(); });  // never finalized: the plugin stays loaded
  glslang_input_t input{};
  input.language = GLSLANG_SOURCE_GLSL;
  input.stage = GLSLANG_STAGE_COMPUTE;
  input.client = GLSLANG_CLIENT_VULKAN;
  input.client_version = GLSLANG_TARGET_VULKAN_1_0;
  input.target_language = GLSLANG_TARGET_SPV;
  input.target_language_version = GLSLANG_TARGET_SPV_1_0;
  input.code = source.c_str();
  input.default_version = 450;
  input.default_profile = GLSLANG_NO_PROFILE;
  input.messages =
      static_cast<glslang_messages_t>(GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT);
  input.resource = glslang_default_resource();
  std::unique_ptr<glslang_shader_t, void (*)(glslang_shader_t*)> shader(
      glslang_shader_create(&input), glslang_shader_delete);
  if (shader == nullptr) return absl::InternalError("[vulkan] glslang could not create a shader");
  if (!glslang_shader_preprocess(shader.get(), &input) ||
      !glslang_shader_parse(shader.get(), &input))
    return absl::InternalError(
        absl::StrCat("[vulkan] GLSL compile failed: ", glslang_shader_get_info_log(shader.get())));
  std::unique_ptr<glslang_program_t, void (*)(glslang_program_t*)> program(glslang_program_create(),
                                                                           glslang_program_delete);
  glslang_program_add_shader(program.get(), shader.get());
  if (!glslang_program_link(program.get(), input.messages))
    return absl::InternalError(
        absl::StrCat("[vulkan] GLSL link failed: ", glslang_program_get_info_log(program.get())));
  glslang_program_SPIRV_generate(program.get(), GLSLANG_STAGE_COMPUTE);
  const size_t words = glslang_program_SPIRV_get_size(program.get());
  if (words == 0) return absl::InternalError("[vulkan] glslang produced no SPIR-V");
  const uint32_t* code = glslang_program_SPIRV_get_ptr(program.get());
  return std::vector<uint32_t>(code, code + words);
}

}  // namespace tessera::vulkan
