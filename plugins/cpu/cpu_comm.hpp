// The collective entries of the CPU plugin's table, over MPI (cpu_comm.cpp; see the ABI in plugin.h).
#pragma once
#include "kestrel/plugin_table.hpp"

namespace kestrel_cpu {

KESTREL_DECLARE_COLLECTIVE_ENTRIES;

}  // namespace kestrel_cpu
