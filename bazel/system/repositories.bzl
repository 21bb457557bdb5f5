"""Repositories over the system's libraries, under the names Ray's WORKSPACE gives them, so
that rayaccel builds with Bazel offline on a Debian machine. Each library's link flags come
from its pkg-config file; headers are in the compiler's system include path."""

# Ray's labels for Abseil, mapped to the pkg-config modules of Debian's libabsl-dev.
_ABSEIL = {
    "absl/container:flat_hash_map": "absl_flat_hash_map",
    "absl/container:flat_hash_set": "absl_flat_hash_set",
    "absl/status:status": "absl_status",
    "absl/status:statusor": "absl_statusor",
    "absl/strings:strings": "absl_strings",
    "absl/strings:str_format": "absl_str_format",
    "absl/time:time": "absl_time",
}

def _pkg_config_libs(ctx, module):
    result = ctx.execute(["pkg-config", "--libs", module])
    if result.return_code != 0:
        fail("pkg-config --libs %s: %s" % (module, result.stderr))
    return [flag for flag in result.stdout.strip().split(" ") if flag]

def _cc_library(name, linkopts = [], defines = []):
    return "cc_library(\n    name = %r,\n    linkopts = %r,\n    defines = %r,\n    visibility = [\"//visibility:public\"],\n)\n" % (name, linkopts, defines)

def _system_abseil_impl(ctx):
    packages = {}
    for label, module in _ABSEIL.items():
        package, name = label.split(":")
        packages.setdefault(package, []).append(_cc_library(name, _pkg_config_libs(ctx, module)))
    for package, rules in packages.items():
        ctx.file(package + "/BUILD.bazel", "".join(rules))
    ctx.file("BUILD.bazel", "")

system_abseil = repository_rule(implementation = _system_abseil_impl, local = True)

def _system_library_impl(ctx):
    linkopts = []
    for module in ctx.attr.pkg_config:
        linkopts += _pkg_config_libs(ctx, module)
    ctx.file("BUILD.bazel", _cc_library(ctx.attr.target, linkopts, ctx.attr.defines))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "target": attr.string(mandatory = True),
        "pkg_config": attr.string_list(),
        "defines": attr.string_list(),
    },
    local = True,
)

def rayaccel_system_repositories():
    # What Bazel 4's own tools load, as Bazel 4 defines it (Debian's rules_cc is too new).
    native.local_repository(name = "rules_cc", path = "bazel/bazel4/rules_cc")
    native.local_repository(name = "rules_java", path = "bazel/bazel4/rules_java")
    system_abseil(name = "com_google_absl")

    # spdlog and fmt header-only: compiled into librayaccel.so and hidden there.
    system_library(name = "com_github_spdlog", target = "spdlog", defines = ["FMT_HEADER_ONLY=1"])
    system_library(name = "hwloc", target = "hwloc", pkg_config = ["hwloc"])

    # Header-only, under the name Ray gives nlohmann-json.
    system_library(name = "nlohmann_json", target = "nlohmann_json")
    system_library(name = "boringssl", target = "crypto", pkg_config = ["libcrypto"])
    system_library(name = "ucx", target = "headers")
    system_library(name = "libfabric", target = "headers")
