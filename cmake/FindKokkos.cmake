# FindKokkos: Kokkos core for the CPU plugin (its matrix products call the BLAS library directly).
#
# Debian ships Kokkos 3.4 inside Trilinos (libtrilinos-kokkos-dev), whose KokkosConfig.cmake is broken
# (TriBITS targets that point at missing files). So:
#   1. a proper Kokkos install named through Kokkos_ROOT, Kokkos_DIR or CMAKE_PREFIX_PATH is used as is
#      (for example one built with -DKokkos_ENABLE_OPENMP=ON, which makes the CPU plugin parallel);
#   2. otherwise the Trilinos layout is found by hand: headers in include/trilinos, libraries
#      libtrilinos_kokkos{core,containers}.
# Result: target Kokkos::kokkos, and Kokkos_FOUND.
include(FindPackageHandleStandardArgs)

if(Kokkos_ROOT OR Kokkos_DIR OR CMAKE_PREFIX_PATH)
  find_package(Kokkos CONFIG QUIET NO_CMAKE_SYSTEM_PATH NO_SYSTEM_ENVIRONMENT_PATH)
  if(Kokkos_FOUND)
    message(STATUS "Kokkos: using the install at ${Kokkos_DIR}")
    set(Kokkos_FLAVOUR "config")
    find_package_handle_standard_args(Kokkos CONFIG_MODE)
    return()
  endif()
endif()

find_path(Kokkos_INCLUDE_DIR Kokkos_Core.hpp PATH_SUFFIXES trilinos)
find_library(Kokkos_CORE_LIBRARY NAMES trilinos_kokkoscore kokkoscore)
find_library(Kokkos_CONTAINERS_LIBRARY NAMES trilinos_kokkoscontainers kokkoscontainers)
find_package_handle_standard_args(Kokkos
  REQUIRED_VARS Kokkos_INCLUDE_DIR Kokkos_CORE_LIBRARY Kokkos_CONTAINERS_LIBRARY
  FAIL_MESSAGE "Kokkos not found: install libtrilinos-kokkos-dev, or point Kokkos_ROOT at a Kokkos install")

if(Kokkos_FOUND AND NOT TARGET Kokkos::kokkos)
  find_package(Threads REQUIRED)
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
  target_include_directories(Kokkos::kokkos INTERFACE ${Kokkos_INCLUDE_DIR})
  target_link_libraries(Kokkos::kokkos INTERFACE ${Kokkos_CORE_LIBRARY} ${Kokkos_CONTAINERS_LIBRARY}
                        Threads::Threads ${CMAKE_DL_LIBS})
  set(Kokkos_FLAVOUR "trilinos")
endif()
mark_as_advanced(Kokkos_INCLUDE_DIR Kokkos_CORE_LIBRARY Kokkos_CONTAINERS_LIBRARY)
