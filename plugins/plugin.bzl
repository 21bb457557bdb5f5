"""rayaccel_plugin: librayaccel-<name>.so, as rayaccel loads plugins (the Bazel twin of CMake's
rayaccel_add_plugin): hidden visibility, the entry point alone exported, nothing undefined."""

def rayaccel_plugin(name, srcs, deps = [], copts = [], **kwargs):
    native.cc_binary(
        name = "librayaccel-%s.so" % name,
        srcs = srcs,
        copts = copts,
        linkshared = True,
        additional_linker_inputs = ["//plugins:common/exports.map"],
        linkopts = [
            "-Wl,--version-script=$(location //plugins:common/exports.map)",
            "-Wl,--no-undefined",
        ],
        deps = deps,
        **kwargs
    )
