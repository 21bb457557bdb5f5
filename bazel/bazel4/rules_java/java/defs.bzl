"""rules_java's entry points as Bazel 4 defines them: its native Java rules. Bazel 4's own
tools load @rules_java//java:defs.bzl even to build C++ alone; the offline build
(bazel/system/repositories.bzl) points @rules_java here. rayaccel has no Java."""

def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)
