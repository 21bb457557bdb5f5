"""The native module, built against the installed librayaccel_cxx.so (the C++ API) that
pkg-config finds (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for a prefix of your own)."""

import os
import subprocess

import pybind11
from setuptools import Extension, setup


def pkg_config(*args):
    try:
        return subprocess.check_output(["pkg-config", *args, "rayaccel-cxx"], text=True).split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("rayaccel's Python package builds against an installed rayaccel: "
                         "pkg-config cannot find rayaccel-cxx.pc (install rayaccel, or set "
                         f"PKG_CONFIG_PATH to <prefix>/lib/pkgconfig): {e}")


def generate_messages():
    """rayaccel.v1: the wire's messages for AgentClient, from the protos installed with
    rayaccel (protoc --python_out; protoc is Debian's protobuf-compiler)."""
    protos = os.path.join(pkg_config("--variable=prefix")[0], "share", "rayaccel", "proto")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.check_call(["protoc", f"--python_out={here}", "-I", protos,
                           os.path.join(protos, "rayaccel", "v1", "snapshot.proto"),
                           os.path.join(protos, "rayaccel", "v1", "agent.proto")])
    open(os.path.join(here, "rayaccel", "v1", "__init__.py"), "a").close()


generate_messages()
libdir = pkg_config("--variable=libdir")[0]
native = Extension(
    "rayaccel._native", ["src/native.cc"],
    include_dirs=[pybind11.get_include()],
    extra_compile_args=["-std=c++17", "-fvisibility=hidden", *pkg_config("--cflags")],
    extra_link_args=[*pkg_config("--libs"), f"-Wl,-rpath,{libdir}"],
    language="c++")
setup(version=pkg_config("--modversion")[0], ext_modules=[native])
