"""Build script for xsp's native modules.

xsp._core   C11: the span core (csrc/core), the trace file (csrc/io), the GPU source
            (csrc/gpu, when CUPTI's headers are found) and the CPython binding (csrc/python).
            Needs msgpack-c and yajl, found through pkg-config, and zlib.
xsp._bench  C++20, dev builds only (XSP_DEV=1 or XSP_BENCH=1): the benchmarks' floor callbacks and C++ loop
            (benchmarks/csrc); not part of the production library.
xsp._torch  C++20 + C: the RecordFunction shim (csrc/torch) and its tiny module init. Built
            against the torch installed in the build environment, so install with
            `pip install --no-build-isolation .` after installing torch. Skipped (with a
            warning) when torch is not importable, unless XSP_REQUIRE_TORCH=1.

Environment:
  XSP_DEV=1            warnings are errors, -O2 -g (the dev and test builds: optimised as
                       a release, so benchmarks of a dev install measure the real code)
  XSP_REQUIRE_TORCH=1  fail instead of skipping xsp._torch
  XSP_BENCH=1          also build xsp._bench without XSP_DEV (the device check)
  XSP_NO_CUPTI=1       build without level G even where CUPTI's headers exist
  XSP_MSGPACK_CFLAGS, XSP_MSGPACK_LIBS, XSP_YAJL_CFLAGS, XSP_YAJL_LIBS
                       msgpack-c's and yajl's flags where pkg-config is missing
"""
import glob
import os
import platform
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = os.environ.get("XSP_DEV") == "1"


def rel(pattern):
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, pattern)))


def pkgconfig(names, env, install):
    """Returns (cflags, libs) of the first pkg-config package found among names, or those given
    by <env>_CFLAGS / <env>_LIBS (machines without pkg-config); exits naming install (the
    Debian packages that provide it) when neither is there."""
    if os.environ.get(env + "_LIBS"):
        return (shlex.split(os.environ.get(env + "_CFLAGS", "")),
                shlex.split(os.environ[env + "_LIBS"]))
    for name in names:
        try:
            cflags = subprocess.check_output(["pkg-config", "--cflags", name], text=True)
            libs = subprocess.check_output(["pkg-config", "--libs", name], text=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        return shlex.split(cflags), shlex.split(libs)
    sys.exit("xsp: %s was not found through pkg-config (tried %s; or set %s_CFLAGS and "
             "%s_LIBS).\n%s" % (names[0], ", ".join(names), env, env, install))


WARN = ["-Wall", "-Wextra", "-Wstrict-prototypes", "-Wshadow", "-Wno-missing-field-initializers"]
OPT = ["-O2", "-g", "-Werror"] if DEV else ["-O2"]
COMMON = ["-fvisibility=hidden", "-fno-strict-aliasing"]
# TLS descriptors: the recorder's thread-local buffer pointer costs a few instructions instead
# of a __tls_get_addr call per access in a dlopen()ed module (x86-64 only).
TLS = ["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else []

mp_cflags, mp_libs = pkgconfig(
    ["msgpack-c", "msgpack"], "XSP_MSGPACK",
    "  Debian 12 / Ubuntu: apt-get install libmsgpack-dev pkg-config\n"
    "  Debian 13:          apt-get install libmsgpack-c-dev pkg-config")
# yajl: the streaming JSON parser of the Kineto reader (csrc/io/kjson.c)
yajl_cflags, yajl_libs = pkgconfig(["yajl"], "XSP_YAJL",
                                   "  Debian / Ubuntu: apt-get install libyajl-dev pkg-config")

def find_cupti_include():
    """The folders for CUPTI's headers: [the one holding cupti.h, the one holding cuda.h (which
    cupti.h includes), ...], from $CUDA_HOME, /usr/local/cuda (include/ or, in a standard
    toolkit, extras/CUPTI/include/) or the nvidia pip packages (nvidia/cuda_cupti/include for
    CUDA 12 wheels, nvidia/cu13/include for CUDA 13 ones).  [] when cupti.h is nowhere: G is
    then unavailable."""
    roots = []
    if os.environ.get("CUDA_HOME"):
        roots.append(os.environ["CUDA_HOME"])
    roots.append("/usr/local/cuda")
    cands = []
    for r in roots:
        cands += [os.path.join(r, "include"), os.path.join(r, "extras", "CUPTI", "include")]
    try:
        import importlib.util
        for pkg in ("nvidia.cuda_cupti", "nvidia.cu13", "nvidia.cuda_runtime"):
            spec = importlib.util.find_spec(pkg)
            if spec and spec.submodule_search_locations:
                for loc in spec.submodule_search_locations:
                    cands.append(os.path.join(loc, "include"))
    except Exception:  # no nvidia namespace package
        pass
    found = [c for c in cands if os.path.isfile(os.path.join(c, "cupti.h"))]
    if not found:
        return []
    cuda_h = [c for c in cands if os.path.isfile(os.path.join(c, "cuda.h"))]
    return list(dict.fromkeys(found[:1] + cuda_h))


CUPTI_INC = [] if os.environ.get("XSP_NO_CUPTI") == "1" else find_cupti_include()
GPU_SRC, GPU_ARGS, GPU_LIBS = [], [], []
if CUPTI_INC:
    GPU_SRC = rel("csrc/gpu/*.c")
    # -isystem: warnings in NVIDIA's headers are not ours to fix (dev builds use -Werror)
    GPU_ARGS = ["-DXSP_HAVE_CUPTI=1"] + [a for d in CUPTI_INC for a in ("-isystem", d)]
    GPU_LIBS = ["-ldl"]
else:
    print("xsp: warning: CUPTI headers not found ($CUDA_HOME or /usr/local/cuda: include/ or "
          "extras/CUPTI/include/; the nvidia-cuda-cupti package): building without level G")

core = Extension(
    "xsp._core",
    # every file of the CPython binding but torchmod.c, xsp._torch's module
    sources=rel("csrc/core/*.c") + rel("csrc/io/*.c")
    + [p for p in rel("csrc/python/*.c") if os.path.basename(p) != "torchmod.c"] + GPU_SRC,
    include_dirs=["csrc"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE"] + WARN + OPT + COMMON + TLS + mp_cflags
    + yajl_cflags + GPU_ARGS,
    # zlib: the JSON exporters' gzip (csrc/io/jsonw.c)
    extra_link_args=mp_libs + yajl_libs + ["-lz"] + GPU_LIBS,
)

exts = [core]


def torch_extension():
    """A maker of torch extensions (name, sources) -> Extension, or None without torch."""
    try:
        import torch  # noqa: F401
        from torch.utils import cpp_extension
    except Exception as exc:  # torch absent or broken: M/L need it at run time, not to build
        if os.environ.get("XSP_REQUIRE_TORCH") == "1":
            sys.exit("xsp: XSP_REQUIRE_TORCH=1 but torch cannot be imported: %s" % exc)
        print("xsp: warning: torch not importable, building without xsp._torch (%s)" % exc)
        return None
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return lambda name, sources: Extension(
        name,
        sources=sources,
        include_dirs=["csrc"],
        library_dirs=[torch_lib],
        libraries=["c10", "torch_cpu"],
        runtime_library_dirs=[torch_lib],
        # setuptools passes extra_compile_args to both the C and the C++ files; the shim's
        # language flags are added per file in BuildExt below.
        # -isystem: warnings in torch's headers are not ours to fix (dev builds use -Werror)
        extra_compile_args=WARN[:2] + OPT + COMMON + ["-D_GLIBCXX_USE_CXX11_ABI=%d" % abi]
        + [a for d in cpp_extension.include_paths() for a in ("-isystem", d)],
        language="c++",
    )


try:
    from setuptools.command.build_ext import build_ext
except ImportError:  # pragma: no cover
    from distutils.command.build_ext import build_ext


class BuildExt(build_ext):
    """Per-language standard flags: C files get -std=c11, C++ files -std=c++20."""

    def build_extension(self, ext):
        if ext.name in ("xsp._torch", "xsp._bench"):
            orig = self.compiler._compile

            def _compile(obj, src, ext_, cc_args, extra_postargs, pp_opts):
                std = ["-std=c++20"] if src.endswith(".cpp") else ["-std=c11", "-Wstrict-prototypes"]
                return orig(obj, src, ext_, cc_args, extra_postargs + std, pp_opts)

            self.compiler._compile = _compile
            try:
                super().build_extension(ext)
            finally:
                self.compiler._compile = orig
        else:
            super().build_extension(ext)


t = torch_extension()
if t is not None:
    exts.append(t("xsp._torch", rel("csrc/torch/shim.cpp") + rel("csrc/python/torchmod.c")))
    if DEV or os.environ.get("XSP_BENCH") == "1":
        # the benchmarks' floor callbacks and C++ loop: dev (or XSP_BENCH) builds only, never
        # in a release
        exts.append(t("xsp._bench", rel("benchmarks/csrc/bench_torch.cpp")))

setup(ext_modules=exts, cmdclass={"build_ext": BuildExt})
