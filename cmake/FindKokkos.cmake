# FindKokkos: Kokkos core and KokkosKernels for the CPU plugin.
#
# Debian ships Kokkos 3.4 inside Trilinos (libtrilinos-kokkos-dev, libtrilinos-kokkos-kernels-dev), whose
# KokkosConfig.cmake is broken (TriBITS targets that point at missing files). So:
#   1. a proper Kokkos install named through Kokkos_ROOT, Kokkos_DIR or CMAKE_PREFIX_PATH is used as is
#      (for example one built with -DKokkos_ENABLE_OPENMP=ON, which makes the CPU plugin parallel);
#   2. otherwise the Trilinos layout is found by hand: headers in include/trilinos, libraries
#      libtrilinos_kokkos{core,containers,kernels}.
# Result: targets Kokkos::kokkos and Kokkos::kokkoskernels, and Kokkos_FOUND.
include(FindPackageHandleStandardArgs)

if(Kokkos_ROOT OR Kokkos_DIR OR CMAKE_PREFIX_PATH)
  find_package(Kokkos CONFIG QUIET NO_CMAKE_SYSTEM_PATH NO_SYSTEM_ENVIRONMENT_PATH)
  if(Kokkos_FOUND)
    find_package(KokkosKernels CONFIG QUIET NO_CMAKE_SYSTEM_PATH NO_SYSTEM_ENVIRONMENT_PATH)
    if(TARGET Kokkos::kokkoskernels)
      message(STATUS "Kokkos: using the install at ${Kokkos_DIR}")
      set(Kokkos_FLAVOUR "config")
      find_package_handle_standard_args(Kokkos CONFIG_MODE)
      return()
    endif()
    message(STATUS "Kokkos found at ${Kokkos_DIR} but KokkosKernels was not; trying Trilinos' copy")
  endif()
endif()

find_path(Kokkos_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(Kokkos_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
find_library(Kokkos_CONTAINERS_LIBRARY NAMES trilinos_kokkoscontainers kokkoscontainers)
find_library(Kokkos_KERNELS_LIBRARY NAMES trilinos_kokkoskernels kokkoskernels)
find_package_handle_standard_args(Kokkos
  REQUIRED_VARS Kokkos_INCLUDE_DIR Kokkos_CORE_LIBRARY Kokkos_CONTAINERS_LIBRARY Kokkos_KERNELS_LIBRARY
  FAIL_MESSAGE "Kokkos not found: install libtrilinos-kokkos-dev and libtrilinos-kokkos-kernels-dev, or point Kokkos_ROOT at a Kokkos install")

if(Kokkos_FOUND AND NOT TARGET Kokkos::kokkos)
  find_package(Threads REQUIRED)
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
  target_include_directories(Kokkos::kokkos INTERFACE ${Kokkos_INCLUDE_DIR})
  target_link_libraries(Kokkos::kokkos INTERFACE ${Kokkos_CORE_LIBRARY} ${Kokkos_CONTAINERS_LIBRARY}
                        Threads::Threads ${CMAKE_DL_LIBS})
  add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
  target_link_libraries(Kokkos::kokkoskernels INTERFACE ${Kokkos_KERNELS_LIBRARY} Kokkos::kokkos)
  set(Kokkos_FLAVOUR "trilinos")
endif()
mark_as_advanced(Kokkos_INCLUDE_DIR Kokkos_CORE_LIBRARY Kokkos_CONTAINERS_LIBRARY Kokkos_KERNELS_LIBRARY)
