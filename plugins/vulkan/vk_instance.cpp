// The Vulkan instance and its physical devices: every VkPhysicalDevice with a compute queue is a
// Kestrel device. KESTREL_VULKAN_VALIDATION=1 enables VK_LAYER_KHRONOS_validation when installed.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kestrel/plugin_env.hpp"
#include "vk_common.hpp"

namespace kestrel_vk {

namespace {

// Plain pointers, never destroyed by static destructors: the host may call shutdown() from its own
// static destructors, after this library's have run (a unique_ptr would then hold a dangling handle).
std::mutex& instance_mutex = *new std::mutex;
Instance* the_instance = nullptr;

bool has_extension(const std::vector<VkExtensionProperties>& extensions, const char* name) {
  for (const auto& e : extensions)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

bool validation_layer_installed() {
  uint32_t count = 0;
  vkEnumerateInstanceLayerProperties(&count, nullptr);
  std::vector<VkLayerProperties> layers(count);
  vkEnumerateInstanceLayerProperties(&count, layers.data());
  for (const auto& layer : layers)
    if (std::strcmp(layer.layerName, "VK_LAYER_KHRONOS_validation") == 0) return true;
  return false;
}

// The N of the f16 x f16 + f32 -> f32 cooperative matrices (16 x N x 16, subgroup scope) gemm_coop.comp
// has variants for that the device offers, 16 preferred; 0 when it offers neither.
uint32_t cooperative_matrix_n(VkInstance instance, VkPhysicalDevice handle) {
  auto properties_of = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!properties_of) return 0;
  uint32_t count = 0;
  properties_of(handle, &count, nullptr);
  std::vector<VkCooperativeMatrixPropertiesNV> shapes(count, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  properties_of(handle, &count, shapes.data());
  uint32_t best = 0;
  for (const VkCooperativeMatrixPropertiesNV& m : shapes)
    if (m.MSize == 16 && m.KSize == 16 && (m.NSize == 16 || m.NSize == 8) && m.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        m.BType == VK_COMPONENT_TYPE_FLOAT16_NV && m.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        m.DType == VK_COMPONENT_TYPE_FLOAT32_NV && m.scope == VK_SCOPE_SUBGROUP_NV)
      best = std::max(best, m.NSize);
  return best;
}

PhysicalDevice describe(VkInstance instance, VkPhysicalDevice handle, uint32_t instance_version) {
  PhysicalDevice d;
  d.handle = handle;
  vkGetPhysicalDeviceProperties(handle, &d.properties);
  vkGetPhysicalDeviceMemoryProperties(handle, &d.memory);
  uint32_t count = 0;
  vkEnumerateDeviceExtensionProperties(handle, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  vkEnumerateDeviceExtensionProperties(handle, nullptr, &count, extensions.data());
  d.has_memory_budget = has_extension(extensions, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

  VkPhysicalDeviceFeatures features{};
  vkGetPhysicalDeviceFeatures(handle, &features);
  d.has_int64 = features.shaderInt64 == VK_TRUE;
  d.has_float64 = features.shaderFloat64 == VK_TRUE;

  // Subgroup size and driver name through the 1.1/1.2 property chains, where the device has them.
  const uint32_t device_version = std::min(d.properties.apiVersion, instance_version);
  if (device_version >= VK_API_VERSION_1_1) {
    // f16 and bf16 are stored, not computed, in 16 bits: shaders load float16_t (bf16: uint16_t bits)
    // into floats and store them back (shaders/common.glsl), so 16-bit storage suffices and
    // shaderFloat16 is asked for only by the cooperative-matrix GEMM below. Devices without it declare neither. The alternative, two halves packed per 32-bit word
    // (unpackHalf2x16/packHalf2x16), would need an atomic read-modify-write for every strided store,
    // since two invocations may write the two halves of one word; not worth it for the few devices
    // that lack 16-bit storage.
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceFeatures2 features2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features2.pNext = &storage16;
    vkGetPhysicalDeviceFeatures2(handle, &features2);
    d.has_16bit_storage = storage16.storageBuffer16BitAccess == VK_TRUE && !kestrel::plugin_env::flag("KESTREL_VULKAN_DISABLE_F16");

    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    const bool want_driver =
        device_version >= VK_API_VERSION_1_2 || has_extension(extensions, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    subgroup.pNext = want_driver ? &driver : nullptr;
    VkPhysicalDeviceProperties2 properties2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    properties2.pNext = &subgroup;
    vkGetPhysicalDeviceProperties2(handle, &properties2);
    d.subgroup_size = subgroup.subgroupSize;
    constexpr VkSubgroupFeatureFlags kFolds =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT;
    d.subgroup_folds = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                       (subgroup.supportedOperations & kFolds) == kFolds &&
                       !kestrel::plugin_env::flag("KESTREL_VULKAN_DISABLE_SUBGROUPS");
    if (want_driver && driver.driverName[0]) d.driver = driver.driverName;

    // Tensor cores for f16 products: gemm_coop.comp needs float16_t arithmetic (shaderFloat16), the
    // Vulkan memory model (the extension's scopes) and exactly 4 full subgroups of 32 in its 128
    // invocations, which only a pipeline that requires full subgroups of that size is promised
    // (computeFullSubgroups and subgroupSizeControl, Vulkan 1.3; see vk_pipelines.cpp).
    const bool basic_subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                 (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    if (device_version >= VK_API_VERSION_1_3 && d.has_16bit_storage && basic_subgroups &&
        has_extension(extensions, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
        !kestrel::plugin_env::flag("KESTREL_VULKAN_DISABLE_COOPMAT")) {
      VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
      VkPhysicalDeviceVulkan12Features v12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
      VkPhysicalDeviceVulkan13Features v13{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
      coop.pNext = &v12;
      v12.pNext = &v13;
      VkPhysicalDeviceFeatures2 wanted{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
      wanted.pNext = &coop;
      vkGetPhysicalDeviceFeatures2(handle, &wanted);
      VkPhysicalDeviceSubgroupSizeControlProperties sizes{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
      VkPhysicalDeviceProperties2 size_properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
      size_properties.pNext = &sizes;
      vkGetPhysicalDeviceProperties2(handle, &size_properties);
      const bool warps_of_32 = v13.subgroupSizeControl && v13.computeFullSubgroups &&
                               (sizes.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                               sizes.minSubgroupSize <= 32 && sizes.maxSubgroupSize >= 32;
      if (coop.cooperativeMatrix && v12.shaderFloat16 && v12.vulkanMemoryModel && warps_of_32)
        d.coop_n = cooperative_matrix_n(instance, handle);
    }
  }

  uint32_t families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(handle, &families, nullptr);
  std::vector<VkQueueFamilyProperties> family_props(families);
  vkGetPhysicalDeviceQueueFamilyProperties(handle, &families, family_props.data());
  // Prefer a compute-only family (async compute on discrete GPUs), else any family with compute.
  for (int pass = 0; pass < 2 && !d.has_compute_queue; ++pass)
    for (uint32_t f = 0; f < families; ++f) {
      const VkQueueFlags flags = family_props[f].queueFlags;
      if (!(flags & VK_QUEUE_COMPUTE_BIT) || family_props[f].queueCount == 0) continue;
      if (pass == 0 && (flags & VK_QUEUE_GRAPHICS_BIT)) continue;
      d.compute_queue_family = f;
      d.has_compute_queue = true;
      d.timestamp_valid_bits = family_props[f].timestampValidBits;
      break;
    }
  return d;
}

std::unique_ptr<Instance> create_instance() {
  auto result = std::make_unique<Instance>();
  uint32_t loader_version = VK_API_VERSION_1_0;
  vkEnumerateInstanceVersion(&loader_version);
  if (loader_version < VK_API_VERSION_1_1)
    fail("the Vulkan loader supports only Vulkan 1.0; Kestrel needs 1.1. Update the Vulkan loader (libvulkan1)",
         KESTREL_STATUS_UNAVAILABLE);
  result->api_version = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kestrel";
  app.pEngineName = "kestrel";
  app.apiVersion = result->api_version;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  const char* validation_layer = "VK_LAYER_KHRONOS_validation";
  if (kestrel::plugin_env::flag("KESTREL_VULKAN_VALIDATION")) {
    result->validation = validation_layer_installed();
    result->validation_missing = !result->validation;
    if (result->validation) {
      info.enabledLayerCount = 1;
      info.ppEnabledLayerNames = &validation_layer;
    }
  }
  VkResult status = vkCreateInstance(&info, nullptr, &result->handle);
  if (status != VK_SUCCESS)
    fail(std::string("vkCreateInstance failed (") + result_name(status) +
             "): no Vulkan driver is installed or it cannot start. Install one (e.g. mesa-vulkan-drivers) "
             "or check VK_ICD_FILENAMES",
         KESTREL_STATUS_UNAVAILABLE);

  uint32_t count = 0;
  vkEnumeratePhysicalDevices(result->handle, &count, nullptr);
  std::vector<VkPhysicalDevice> handles(count);
  vkEnumeratePhysicalDevices(result->handle, &count, handles.data());
  for (VkPhysicalDevice handle : handles) {
    PhysicalDevice d = describe(result->handle, handle, result->api_version);
    if (d.has_compute_queue && d.properties.apiVersion >= VK_API_VERSION_1_1 &&
        d.properties.limits.maxPerStageDescriptorStorageBuffers >= uint32_t(kMaxBindings))
      result->devices.push_back(d);
  }
  return result;
}

std::string version_text(uint32_t version) {
  return std::to_string(VK_API_VERSION_MAJOR(version)) + "." + std::to_string(VK_API_VERSION_MINOR(version));
}

void copy_string(char* dst, size_t size, const std::string& src) {
  std::strncpy(dst, src.c_str(), size - 1);
  dst[size - 1] = '\0';
}

}  // namespace

Instance& instance() {
  std::lock_guard<std::mutex> lock(instance_mutex);
  if (!the_instance) the_instance = create_instance().release();
  return *the_instance;
}

void destroy_instance() {
  std::lock_guard<std::mutex> lock(instance_mutex);
  if (the_instance && the_instance->handle) vkDestroyInstance(the_instance->handle, nullptr);
  delete the_instance;
  the_instance = nullptr;
}

const PhysicalDevice& physical_device(int32_t index) {
  Instance& inst = instance();
  if (index < 0 || index >= static_cast<int32_t>(inst.devices.size()))
    fail("no device vulkan:" + std::to_string(index) + "; `kestrel devices` lists the Vulkan devices (" +
         std::to_string(inst.devices.size()) + " found)");
  return inst.devices[index];
}

uint32_t dtype_mask(const PhysicalDevice& device) {
  uint32_t mask = (1u << KESTREL_DTYPE_F32) | (1u << KESTREL_DTYPE_I32);
  if (device.has_int64) mask |= 1u << KESTREL_DTYPE_I64;
  if (device.has_16bit_storage) mask |= (1u << KESTREL_DTYPE_F16) | (1u << KESTREL_DTYPE_BF16);
  return mask;
}

void fill_properties(const PhysicalDevice& d, kestrel_device_properties* props) {
  copy_string(props->name, sizeof(props->name), d.properties.deviceName);
  switch (d.properties.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: props->kind = KESTREL_DEVICE_KIND_DISCRETE_GPU; break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: props->kind = KESTREL_DEVICE_KIND_INTEGRATED_GPU; break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: props->kind = KESTREL_DEVICE_KIND_SOFTWARE; break;
    default: props->kind = KESTREL_DEVICE_KIND_DISCRETE_GPU; break;  // virtual GPUs and others
  }
  // Device-local heaps are what the device "holds"; with none flagged (rare), count every heap.
  auto heap_counts = [&](uint32_t heap, bool any) {
    return any || (d.memory.memoryHeaps[heap].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT);
  };
  bool any_local = false;
  for (uint32_t h = 0; h < d.memory.memoryHeapCount; ++h) any_local |= heap_counts(h, false);
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  if (d.has_memory_budget) {
    VkPhysicalDeviceMemoryProperties2 memory2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
    memory2.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(d.handle, &memory2);
  }
  props->memory_total = props->memory_free = 0;
  for (uint32_t h = 0; h < d.memory.memoryHeapCount; ++h) {
    if (!heap_counts(h, !any_local)) continue;
    props->memory_total += d.memory.memoryHeaps[h].size;
    // Without VK_EXT_memory_budget the driver cannot say what is in use: report the heap size.
    props->memory_free += d.has_memory_budget
                              ? (budget.heapBudget[h] > budget.heapUsage[h] ? budget.heapBudget[h] - budget.heapUsage[h] : 0)
                              : d.memory.memoryHeaps[h].size;
  }
  char ids[48];
  std::snprintf(ids, sizeof(ids), "vendor 0x%04x device 0x%04x", d.properties.vendorID, d.properties.deviceID);
  copy_string(props->arch, sizeof(props->arch), std::string(ids) + ", subgroup " + std::to_string(d.subgroup_size));
  // Vulkan has no portable count of compute units; a software device runs on the host's threads.
  props->compute_units = d.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU
                             ? static_cast<int32_t>(std::thread::hardware_concurrency())
                             : 0;
  std::string runtime = "Vulkan " + version_text(d.properties.apiVersion);
  if (!d.driver.empty()) runtime += " (" + d.driver + ")";
  runtime += ", subgroup " + std::to_string(d.subgroup_size) + (d.subgroup_folds ? " (folds reductions)" : "");
  if (d.coop_n) runtime += ", f16 cooperative matrices 16x" + std::to_string(d.coop_n) + "x16";
  copy_string(props->runtime, sizeof(props->runtime), runtime);
  props->dtype_mask = dtype_mask(d);
}

}  // namespace kestrel_vk
