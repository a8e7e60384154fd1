// The collective entries of the Vulkan plugin's table, host-staged over MPI (vk_comm.cpp; the ABI in
// plugin.h). Built only with MPI.
#pragma once
#include "kestrel/plugin_table.hpp"

namespace kestrel_vk {

KESTREL_DECLARE_COLLECTIVE_ENTRIES;

}  // namespace kestrel_vk
