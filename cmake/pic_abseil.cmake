# Abseil as position-independent static archives, for librayaccel.so to carry inside and hide
# (Debian ships Abseil's archives without -fPIC, so a shared object cannot link them). Built
# from Debian's source of the installed libabsl-dev, its exact version and patches, with the
# flags Debian builds it with plus -fPIC: the same code and options (inline namespace, std::
# choices) as the headers rayaccel compiles against.
#   rayaccel_pic_abseil(OUT_ARCHIVES OUT_TARGET NAMES...)
# NAMES: absl_* library names (pkg-config's); OUT_ARCHIVES empty when the source cannot be had
# (no network on a fresh machine): the caller then links Debian's shared Abseil and says so.
function(rayaccel_pic_abseil out_archives out_target)
  set(${out_archives} "" PARENT_SCOPE)
  set(src ${PROJECT_BINARY_DIR}/_deps/abseil-src)
  set(bin ${PROJECT_BINARY_DIR}/_deps/abseil-build)
  execute_process(
    COMMAND ${PROJECT_SOURCE_DIR}/cmake/fetch_debian_source.sh abseil libabsl-dev ${src}
    RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(WARNING "rayaccel: Debian's Abseil source could not be fetched (${err}); "
      "librayaccel.so links Debian's shared Abseil instead of carrying it inside")
    return()
  endif()
  file(READ ${src}/.version version)
  string(STRIP "${version}" version)
  set(archives)
  set(targets)
  foreach(name IN LISTS ARGN)
    list(APPEND archives ${bin}/lib/lib${name}.a)
    string(REGEX REPLACE "^absl_" "" target ${name})  # Abseil's targets drop the prefix
    list(APPEND targets ${target})
  endforeach()
  include(ExternalProject)
  ExternalProject_Add(rayaccel_pic_abseil
    SOURCE_DIR ${src}
    BINARY_DIR ${bin}
    CMAKE_ARGS -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17
               -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
               -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DBUILD_TESTING=OFF
               -DCMAKE_ARCHIVE_OUTPUT_DIRECTORY=${bin}/lib
    BUILD_COMMAND ${CMAKE_COMMAND} --build ${bin} --target ${targets}
    INSTALL_COMMAND ""
    BUILD_BYPRODUCTS ${archives})
  message(STATUS "rayaccel: librayaccel.so carries Abseil ${version} inside (PIC, from Debian's source)")
  set(${out_archives} ${archives} PARENT_SCOPE)
  set(${out_target} rayaccel_pic_abseil PARENT_SCOPE)
endfunction()
