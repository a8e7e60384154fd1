# kestrel_add_plugin(NAME SOURCES...): a backend plugin is a MODULE library named kestrel_<name>, placed
# in lib/kestrel/plugins where the engine looks for it. It sees only the plugin ABI headers.
function(kestrel_add_plugin name)
  set(target kestrel_${name})
  add_library(${target} MODULE ${ARGN})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/engine/include)
  set_target_properties(${target} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${KESTREL_PLUGIN_OUTPUT_DIR}
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  install(TARGETS ${target} LIBRARY DESTINATION ${KESTREL_PLUGIN_INSTALL_DIR})
  set_property(GLOBAL APPEND PROPERTY KESTREL_PLUGIN_TARGETS ${target})  # the Python wheel carries them too
endfunction()
