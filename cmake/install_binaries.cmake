# Installed programs, libraries and plugins go in stripped; their debug information is kept
# beside them as <folder>/.debug/<file>.debug (component `debug`), where gdb looks through
# the binary's .gnu_debuglink. A runtime or tools install is then the code alone (the agent:
# 80 MB built, a few installed). Both halves are cut from the build tree's file at install
# time, by objcopy, so each component installs alone and the link's checksum matches.
#
#   rayaccel_install_binaries(TARGETS t... DESTINATION dir COMPONENT runtime|tools
#                             [EXPORT set])  (a shared library's namelink goes to `sdk`)
#   rayaccel_install_archives(TARGETS t... DESTINATION dir COMPONENT sdk|dev EXPORT set)
find_program(RAYACCEL_OBJCOPY NAMES objcopy ${CMAKE_OBJCOPY} REQUIRED)

function(rayaccel_install_binaries)
  cmake_parse_arguments(A "" "DESTINATION;COMPONENT;EXPORT" "TARGETS" ${ARGN})
  set(export)
  if(A_EXPORT)
    set(export EXPORT ${A_EXPORT})
  endif()
  install(TARGETS ${A_TARGETS} ${export}
          RUNTIME DESTINATION ${A_DESTINATION} COMPONENT ${A_COMPONENT}
          LIBRARY DESTINATION ${A_DESTINATION} COMPONENT ${A_COMPONENT} NAMELINK_COMPONENT sdk)
  set(links ${PROJECT_BINARY_DIR}/debuglink)
  foreach(t IN LISTS A_TARGETS)
    set(from "$<TARGET_FILE:${t}>")
    set(name "$<TARGET_FILE_NAME:${t}>")
    set(to "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${A_DESTINATION}")
    install(CODE "
      file(MAKE_DIRECTORY \"${links}\")
      execute_process(COMMAND \"${RAYACCEL_OBJCOPY}\" --only-keep-debug \"${from}\"
                              \"${links}/${name}.debug\" COMMAND_ERROR_IS_FATAL ANY)
      execute_process(COMMAND \"${RAYACCEL_OBJCOPY}\" --strip-debug --strip-unneeded
                              \"--add-gnu-debuglink=${links}/${name}.debug\" \"${to}/${name}\"
                      COMMAND_ERROR_IS_FATAL ANY)" COMPONENT ${A_COMPONENT})
    install(CODE "
      message(STATUS \"Installing: ${to}/.debug/${name}.debug\")
      file(MAKE_DIRECTORY \"${to}/.debug\")
      execute_process(COMMAND \"${RAYACCEL_OBJCOPY}\" --only-keep-debug \"${from}\"
                              \"${to}/.debug/${name}.debug\" COMMAND_ERROR_IS_FATAL ANY)"
            COMPONENT debug)
  endforeach()
endfunction()

# Static libraries for builds against rayaccel: installed without their debug information (an
# archive has no debug link), which the build tree's copies keep.
function(rayaccel_install_archives)
  cmake_parse_arguments(A "" "DESTINATION;COMPONENT;EXPORT" "TARGETS" ${ARGN})
  install(TARGETS ${A_TARGETS} EXPORT ${A_EXPORT} ARCHIVE DESTINATION ${A_DESTINATION}
          COMPONENT ${A_COMPONENT})
  foreach(t IN LISTS A_TARGETS)
    set(installed "\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${A_DESTINATION}/$<TARGET_FILE_NAME:${t}>")
    install(CODE "
      execute_process(COMMAND \"${RAYACCEL_OBJCOPY}\" --strip-debug \"${installed}\"
                      COMMAND_ERROR_IS_FATAL ANY)" COMPONENT ${A_COMPONENT})
  endforeach()
endfunction()
