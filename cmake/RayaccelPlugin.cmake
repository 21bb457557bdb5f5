# rayaccel_add_plugin(<name> SOURCES <files...> [LINK_LIBRARIES <libs...>] [OUTPUT_DIRECTORY <dir>])
#
# Builds librayaccel-<name>.so the way rayaccel loads plugins: hidden visibility, only the
# entry symbol exported (version script), no undefined symbols left for the host to provide.
# Used in tree and, through find_package(rayaccel), by vendors building out of tree.
set(_RAYACCEL_PLUGIN_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

function(rayaccel_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LINK_LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "rayaccel_add_plugin(${name}): SOURCES is required")
  endif()
  set(target rayaccel-plugin-${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME rayaccel-${name}
    PREFIX lib
    SUFFIX .so
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
  if(EXISTS ${_RAYACCEL_PLUGIN_CMAKE_DIR}/exports.map)
    set(map ${_RAYACCEL_PLUGIN_CMAKE_DIR}/exports.map)
  else()
    set(map ${_RAYACCEL_PLUGIN_CMAKE_DIR}/../plugins/common/exports.map)
  endif()
  target_link_options(${target} PRIVATE -Wl,--version-script=${map})
  # Sanitizer runtimes live in the host executable, so plugins may not be self-contained.
  if(NOT RAYACCEL_SANITIZER)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
  if(TARGET rayaccel::plugin_api)
    target_link_libraries(${target} PRIVATE rayaccel::plugin_api)
  elseif(TARGET rayaccel_plugin_api)
    target_link_libraries(${target} PRIVATE rayaccel_plugin_api)
  endif()
  if(ARG_LINK_LIBRARIES)
    target_link_libraries(${target} PRIVATE ${ARG_LINK_LIBRARIES})
  endif()
endfunction()
