// Compute pipelines, one per shader variant, created on first use and kept for the context's life,
// through the context's pipeline cache (vk_pipeline_cache.cpp) so later runs skip the compilation.
// Every pipeline shares one descriptor set layout: binding 0 is the parameter block (uniform) and bindings
// 1..kMaxBindings the op's buffers (storage) (see shaders/common.glsl).
#include "vk_common.hpp"
#include "vk_shaders.hpp"

namespace kestrel_vk {

void create_pipeline_layout(kestrel_context* context) {
  VkDescriptorSetLayoutBinding bindings[kMaxBindings + 1]{};
  for (uint32_t b = 0; b <= kMaxBindings; ++b) {
    bindings[b].binding = b;
    bindings[b].descriptorType = b == 0 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[b].descriptorCount = 1;
    bindings[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = kMaxBindings + 1;
  set_info.pBindings = bindings;
  check(vkCreateDescriptorSetLayout(context->device, &set_info, nullptr, &context->set_layout),
        "vkCreateDescriptorSetLayout");
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &context->set_layout;
  check(vkCreatePipelineLayout(context->device, &layout_info, nullptr, &context->pipeline_layout),
        "vkCreatePipelineLayout");
}

bool has_shader(const std::string& name) { return find_shader(name) != nullptr; }

VkPipeline pipeline(kestrel_context* context, const std::string& name) {
  std::lock_guard<std::mutex> lock(context->pipeline_mutex);
  auto found = context->pipelines.find(name);
  if (found != context->pipelines.end()) return found->second;
  const ShaderCode* code = find_shader(name);
  if (!code) fail("internal error: the Vulkan plugin was built without shader '" + name + "'", KESTREL_STATUS_INTERNAL);

  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = code->size_bytes;
  module_info.pCode = code->words;
  VkShaderModule module = VK_NULL_HANDLE;
  check(vkCreateShaderModule(context->device, &module_info, nullptr, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  // gemm_coop.comp's cooperative matrices take whole subgroups of 32, four to a workgroup: asked for
  // here (PhysicalDevice::coop_n is set only where the device can promise it).
  VkPipelineShaderStageRequiredSubgroupSizeCreateInfo warps{
      VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
  warps.requiredSubgroupSize = 32;
  if (name.find("_coop16x") != std::string::npos) {
    info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    info.stage.pNext = &warps;
  }
  info.layout = context->pipeline_layout;
  VkPipeline created = VK_NULL_HANDLE;
  VkResult status = vkCreateComputePipelines(context->device, context->pipeline_cache, 1, &info, nullptr, &created);
  vkDestroyShaderModule(context->device, module, nullptr);
  check(status, ("vkCreateComputePipelines for shader " + name).c_str());
  context->pipelines.emplace(name, created);
  return created;
}

void destroy_pipelines(kestrel_context* context) {
  for (auto& entry : context->pipelines) vkDestroyPipeline(context->device, entry.second, nullptr);
  context->pipelines.clear();
  if (context->pipeline_layout) vkDestroyPipelineLayout(context->device, context->pipeline_layout, nullptr);
  if (context->set_layout) vkDestroyDescriptorSetLayout(context->device, context->set_layout, nullptr);
  context->pipeline_layout = VK_NULL_HANDLE;
  context->set_layout = VK_NULL_HANDLE;
}

}  // namespace kestrel_vk
