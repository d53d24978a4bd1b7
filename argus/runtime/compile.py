"""Compile CUDA C++ to an sm_90a cubin (plus PTX and a resource report), cached by content hash.

One job: `compile_cuda(source, kernel_names) -> Binary`. NVRTC (from cuda-bindings) is the
compiler; nvcc is the fallback when NVRTC cannot be loaded. The device header
argus/codegen/device/*.cuh is always available to `#include "argus_sm90.cuh"` (handed to NVRTC
in memory, so no -I path and no system CUDA headers are involved).

Invariants:
  * The cache key covers everything that determines the output: the source, every in-memory
    header, a fingerprint of each include dir, the options, the arch, the kernel names and the
    exact compiler build. A hit (memory or disk) returns without invoking NVRTC or nvcc.
  * A failed compile raises CompileError quoting the offending source (or PTX) lines with line
    numbers; nothing is cached for it.
  * ptxas always runs verbosely (`--ptxas-options=-v`) so the report (registers, spills, stack,
    static smem) is part of every Binary.

Options: `-arch=<arch> -std=c++17` always; `--use_fast_math` and `-lineinfo` on request. We do
not pass `-default-device`: generated code marks every function `__device__` explicitly, and
keeping NVRTC and nvcc on the same source semantics matters more than saving the keyword.
Without includes NVRTC provides the CUDA math API (expf, logf, erff, tanhf, sqrtf, fmaxf, ...),
the intrinsics (__expf, __fdividef, __shfl_xor_sync, atomics, __ldg, ...) and vector types
(float2, uint4), but no INFINITY / FLT_MAX macros and no __half / __nv_bfloat16 types: the
device header supplies ag::inf_f32() and ag::bf16 / ag::f16 instead.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.errors import CompileError
from argus.runtime import cache
from argus.runtime.resources import KernelResources, cubin_resources, kernel_resources
from argus.runtime.toolkit import NvrtcInfo, ToolNotFound, find_tool, load_nvrtc, tool_version

DEFAULT_ARCH = "sm_90a"
_KEY_VERSION = 1

# Counters for tests and reports (how many real compiles vs cache hits happened).
_STATS = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "seconds": 0}  # seconds: compiling
# Explicit in-process cache: key -> Binary.
_MEMO: dict[str, Binary] = {}


@dataclass(frozen=True)
class Binary:
    """A compiled module: cubin (empty for a compute_XX PTX-only target), PTX, compiler log and
    the ptxas resource report of each requested kernel."""

    cubin: bytes = field(repr=False)
    ptx: str = field(repr=False)
    log: str = field(repr=False)
    arch: str
    kernels: tuple[str, ...]
    symbols: tuple[tuple[str, str], ...]        # (requested name, symbol in the cubin)
    resources: tuple[KernelResources, ...]
    source_hash: str                            # sha256 of the source text alone
    key: str                                    # the cache key (everything that shaped it)
    compiler: str                               # e.g. "nvrtc 13.0 (libnvrtc.so.13.0.88)"
    options: tuple[str, ...]
    from_cache: bool = field(default=False, compare=False)

    def symbol(self, kernel: str) -> str:
        """The symbol to look up in the loaded module for `kernel`."""
        for name, symbol in self.symbols:
            if name == kernel:
                return symbol
        raise KeyError(f"kernel {kernel!r} is not in this binary; it has {list(self.kernels)}")

    def resource(self, kernel: str) -> KernelResources:
        """The ptxas report for `kernel`; where the compiler log lacks it (seen on the H200 host
        for some binaries, cause not found), what the cubin itself records when that proves
        there are no spills (resources.cubin_resources). KeyError for PTX-only binaries."""
        for res in self.resources:
            if res.name == kernel:
                return res
        symbol = dict(self.symbols).get(kernel)
        found = cubin_resources(self.cubin, kernel, symbol) if symbol and self.cubin else None
        if found is not None:
            return found
        raise KeyError(f"no ptxas report for kernel {kernel!r} (arch {self.arch}; symbols "
                       f"{dict(self.symbols)}, reports for "
                       f"{[r.name for r in self.resources]}, log of {len(self.log)} chars)")


def compile_stats() -> dict[str, float]:
    """Counts of real compiles and of memory / disk cache hits in this process, and the
    seconds spent compiling."""
    return dict(_STATS)


def clear_memory_cache() -> None:
    """Forget in-process results (the disk cache is untouched)."""
    _MEMO.clear()


def device_header_dir() -> Path:
    """Folder of the NVRTC-clean device headers (argus/codegen/device). A path, not an import:
    the runtime does not import codegen."""
    return Path(__file__).resolve().parent.parent / "codegen" / "device"


def device_headers() -> dict[str, str]:
    """name -> text of every device header, handed to NVRTC as in-memory headers."""
    paths = sorted(device_header_dir().glob("*.cuh"))
    return {p.name: p.read_text(encoding="utf-8") for p in paths}


def _sha256(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def _dir_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every file under an include dir: a header edited in
    place changes the key without us having to know which headers the source includes."""
    rows = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = Path(root) / name
            try:
                st = full.stat()
            except OSError:
                continue
            rows.append((str(full.relative_to(path)), st.st_size, st.st_mtime_ns))
    return sorted(rows)


def _arch_number(arch: str) -> str:
    match = re.fullmatch(r"(?:sm|compute)_(\d+[a-z]?)", arch)
    if not match:
        raise CompileError(f"unknown target architecture {arch!r}",
                           fix="use an NVIDIA arch name such as 'sm_90a' (H100/H200)")
    return match.group(1)


# --------------------------------------------------------------------------------------------
# Error reports
# --------------------------------------------------------------------------------------------

_SOURCE_DIAG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error")
_PTX_DIAG = re.compile(r"ptxas.*?, line (?P<line>\d+); error")
_NAME_MAP = re.compile(r'name expression was: "\s*(?P<name>[^"]*)"')


def _quote(text: str, line: int, context: int = 2) -> str:
    lines = text.splitlines()
    lo, hi = max(1, line - context), min(len(lines), line + context)
    width = len(str(hi))
    rows = []
    for number in range(lo, hi + 1):
        mark = ">" if number == line else " "
        rows.append(f"  {mark} {number:>{width}} | {lines[number - 1]}")
    return "\n".join(rows)


def format_compile_error(log: str, files: Mapping[str, str], ptx: str | None = None,
                         max_quotes: int = 8) -> str:
    """The compiler log followed by the offending lines of each erroring file (or of the PTX for
    ptxas errors), with line numbers. `files` maps the names the log uses to their text."""
    quotes: list[str] = []
    seen: set[tuple[str, int]] = set()
    for raw in log.splitlines():
        if len(quotes) >= max_quotes:
            break
        if m := _SOURCE_DIAG.match(raw.strip()):
            name, line = m.group("file").strip(), int(m.group("line"))
            text = files.get(name) or files.get(Path(name).name)
            if text is not None and (name, line) not in seen and 0 < line <= len(text.splitlines()):
                seen.add((name, line))
                quotes.append(f"{name}:{line}:\n{_quote(text, line)}")
        elif (m := _PTX_DIAG.search(raw)) and ptx:
            line = int(m.group("line"))
            if ("<ptx>", line) not in seen and 0 < line <= len(ptx.splitlines()):
                seen.add(("<ptx>", line))
                quotes.append(f"generated PTX line {line} (ptxas rejected inline asm):\n"
                              f"{_quote(ptx, line)}")
    text = log.strip()
    if quotes:
        text += "\n\noffending lines:\n" + "\n".join(quotes)
    return text


def _raise_compile_error(backend: str, filename: str, arch: str, log: str,
                         files: Mapping[str, str], ptx: str | None) -> None:
    missing = sorted({m.group("name").strip() for m in _NAME_MAP.finditer(log)})
    if missing:
        raise CompileError(
            f"{backend}: kernel(s) {', '.join(missing)} requested from {filename} are not "
            f"defined there:\n{log.strip()}",
            fix="define them as __global__ functions with exactly these names "
                "(extern \"C\", or the C++ name with template arguments)")
    raise CompileError(
        f"{backend} could not compile {filename} for {arch}:\n"
        + format_compile_error(log, files, ptx))


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Output:
    cubin: bytes
    ptx: str
    log: str
    symbols: dict[str, str]


def _nvrtc_check(result: Any, what: str, nvrtc: Any) -> Any:
    code = result[0]
    if int(code) != 0:
        err = nvrtc.nvrtcGetErrorString(code)
        message = err[1].decode() if isinstance(err, tuple) and len(err) > 1 else str(code)
        raise CompileError(f"NVRTC {what} failed: {message}")
    return result[1] if len(result) > 1 else None


def _nvrtc_bytes(nvrtc: Any, prog: Any, size_fn: Any, get_fn: Any, what: str) -> bytes:
    size = _nvrtc_check(size_fn(prog), what, nvrtc)
    if not size:
        return b""
    buf = b" " * size
    _nvrtc_check(get_fn(prog, buf), what, nvrtc)
    return buf


def _nvrtc_compile(info: NvrtcInfo, source: str, filename: str, headers: Mapping[str, str],
                   options: Sequence[str], kernel_names: Sequence[str], arch: str) -> _Output:
    nvrtc = info.module
    names = list(headers)
    prog = _nvrtc_check(
        nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), len(names),
                                 [headers[n].encode() for n in names], [n.encode() for n in names]),
        "nvrtcCreateProgram", nvrtc)
    try:
        for name in kernel_names:
            _nvrtc_check(nvrtc.nvrtcAddNameExpression(prog, name.encode()),
                         f"nvrtcAddNameExpression({name})", nvrtc)
        opts = [o.encode() for o in options]
        result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _nvrtc_bytes(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog,
                           "nvrtcGetProgramLog").decode(errors="replace").rstrip("\x00 \n")
        # PTX exists even when ptxas (run inside NVRTC for sm_XX targets) rejected it.
        try:
            ptx = _nvrtc_bytes(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX,
                               "nvrtcGetPTX").decode(errors="replace").rstrip("\x00")
        except CompileError:
            ptx = ""
        if int(result[0]) != 0:
            files = dict(headers, **{filename: source})
            _raise_compile_error(f"NVRTC {info.version[0]}.{info.version[1]}", filename, arch,
                                 log, files, ptx or None)
        cubin = _nvrtc_bytes(nvrtc, prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN,
                             "nvrtcGetCUBIN")
        symbols = {}
        for name in kernel_names:
            lowered = _nvrtc_check(nvrtc.nvrtcGetLoweredName(prog, name.encode()),
                                   f"nvrtcGetLoweredName({name})", nvrtc)
            symbols[name] = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
        return _Output(cubin, ptx, log, symbols)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")


def _symbols_from_ptx(ptx: str, kernel_names: Sequence[str], filename: str) -> dict[str, str]:
    entries = _ENTRY.findall(ptx)
    symbols = {}
    for name in kernel_names:
        if name in entries:
            symbols[name] = name
            continue
        plain = re.sub(r"<.*", "", name).split("::")[-1]
        candidates = [e for e in entries if f"{len(plain)}{plain}" in e]
        if len(candidates) != 1:
            raise CompileError(
                f"nvcc: cannot find the symbol of kernel {name!r} in {filename}; entries are "
                f"{entries}", fix="declare the kernel extern \"C\" so its symbol is its name")
        symbols[name] = candidates[0]
    return symbols


def _nvcc_compile(nvcc: str, source: str, filename: str, headers: Mapping[str, str],
                  options: Sequence[str], kernel_names: Sequence[str], arch: str) -> _Output:
    number = _arch_number(arch)
    with tempfile.TemporaryDirectory(prefix="argus-nvcc-") as tmp:
        for name, text in headers.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        src = Path(tmp) / filename
        src.write_text(source, encoding="utf-8")
        base = [nvcc, f"-I{tmp}", *options]
        logs = []
        ptx_path, cubin_path = Path(tmp) / "out.ptx", Path(tmp) / "out.cubin"
        steps = [[*base, "-ptx", f"-arch=compute_{number}", "-o", str(ptx_path), str(src)]]
        if arch.startswith("sm_"):
            steps.append([*base, "-cubin", "-gencode", f"arch=compute_{number},code={arch}",
                          "-Xptxas", "-v", "-o", str(cubin_path), str(src)])
        ptx = ""
        for cmd in steps:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            log = (proc.stdout + proc.stderr).replace(tmp + os.sep, "")
            logs.append(log)
            if ptx_path.exists() and not ptx:
                ptx = ptx_path.read_text(encoding="utf-8", errors="replace")
            if proc.returncode != 0:
                files = dict(headers, **{filename: source})
                _raise_compile_error(f"nvcc ({nvcc})", filename, arch, log, files, ptx or None)
        cubin = cubin_path.read_bytes() if cubin_path.exists() else b""
    return _Output(cubin, ptx, "\n".join(logs).strip(), _symbols_from_ptx(ptx, kernel_names,
                                                                           filename))


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------

def _record(binary: Binary) -> dict[str, Any]:
    data = dataclasses.asdict(binary)
    data["cubin"] = base64.b64encode(binary.cubin).decode("ascii")
    data.pop("from_cache")
    return data


def _from_record(record: dict[str, Any]) -> Binary:
    return Binary(
        cubin=base64.b64decode(record["cubin"]),
        ptx=record["ptx"],
        log=record["log"],
        arch=record["arch"],
        kernels=tuple(record["kernels"]),
        symbols=tuple((a, b) for a, b in record["symbols"]),
        resources=tuple(KernelResources(**r) for r in record["resources"]),
        source_hash=record["source_hash"],
        key=record["key"],
        compiler=record["compiler"],
        options=tuple(record["options"]),
        from_cache=True,
    )


def compile_cuda(
    source: str,
    kernel_names: Sequence[str],
    *,
    arch: str = DEFAULT_ARCH,
    options: Sequence[str] = (),
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    headers: Mapping[str, str] | None = None,
    fast_math: bool = False,
    lineinfo: bool = False,
    compiler: str = "auto",
    use_cache: bool = True,
    filename: str = "argus_kernel.cu",
) -> Binary:
    """Compile `source` for `arch` and return the cubin, PTX and per-kernel resource report.

    kernel_names: the __global__ functions to expose (extern "C" names, or C++ names such as
    "gemm<128>" which NVRTC lowers). headers: extra in-memory headers (name -> text) besides
    the device header. compiler: "auto" (NVRTC, else nvcc), "nvrtc" or "nvcc".
    Raises CompileError with the log and the offending source lines quoted.
    """
    if isinstance(kernel_names, str):
        kernel_names = [kernel_names]
    kernel_names = list(kernel_names)
    _arch_number(arch)
    all_headers = dict(device_headers(), **dict(headers or {}))
    flags = ["-std=c++17"]
    if fast_math:
        flags.append("--use_fast_math")
    if lineinfo:
        flags.append("-lineinfo")
    flags += [f"-I{Path(d)}" for d in include_dirs]
    flags += list(options)

    backend, info, nvcc = _select_backend(compiler)
    if backend == "nvrtc":
        assert info is not None
        # The major.minor version alone does not tell 13.0.48 from 13.0.88: add the library's size.
        lib = Path(info.library)
        size = lib.stat().st_size if lib.exists() else 0
        compiler_id = f"nvrtc {info.version[0]}.{info.version[1]} ({lib.name}, {size} bytes)"
        all_options = [f"-arch={arch}", *flags]
        if arch.startswith("sm_"):
            all_options.append("--ptxas-options=-v")
    else:
        assert nvcc is not None
        compiler_id = f"nvcc {tool_version(nvcc)}"
        all_options = flags

    key = _sha256(json.dumps({
        "v": _KEY_VERSION,
        "source": _sha256(source),
        "headers": {name: _sha256(text) for name, text in sorted(all_headers.items())},
        "include_dirs": [[str(d), _dir_fingerprint(Path(d))] for d in include_dirs],
        "options": all_options,
        "arch": arch,
        "kernels": kernel_names,
        "compiler": compiler_id,
        "filename": filename,
    }, sort_keys=True))

    if use_cache:
        if key in _MEMO:
            _STATS["memory_hits"] += 1
            if not cache.exists(key):
                # compiled or loaded under another ARGUS_CACHE_DIR (a prebuild into a fresh
                # folder, a test): write the record where this process's readers now look, or
                # a later process misses it (one stat per compile-time hit, none per launch)
                cache.store(key, _record(_MEMO[key]))
            return _MEMO[key]
        record = cache.load(key)
        if record is not None:
            try:
                binary = _from_record(record)
            except (KeyError, TypeError, ValueError):
                binary = None
            if binary is not None:
                _STATS["disk_hits"] += 1
                _MEMO[key] = binary
                return binary

    _STATS["compiles"] += 1
    started = time.perf_counter()
    if backend == "nvrtc":
        out = _nvrtc_compile(info, source, filename, all_headers, all_options, kernel_names, arch)
    else:
        out = _nvcc_compile(nvcc, source, filename, all_headers, all_options, kernel_names, arch)
    _STATS["seconds"] += time.perf_counter() - started

    binary = Binary(
        cubin=out.cubin,
        ptx=out.ptx,
        log=out.log,
        arch=arch,
        kernels=tuple(kernel_names),
        symbols=tuple(out.symbols.items()),
        resources=kernel_resources(out.log, out.symbols),
        source_hash=_sha256(source),
        key=key,
        compiler=compiler_id,
        options=tuple(all_options),
    )
    if use_cache:
        cache.store(key, _record(binary))
        _MEMO[key] = binary
    return binary


def _select_backend(compiler: str) -> tuple[str, NvrtcInfo | None, str | None]:
    if compiler not in ("auto", "nvrtc", "nvcc"):
        raise CompileError(f"unknown compiler {compiler!r}", fix="use 'auto', 'nvrtc' or 'nvcc'")
    nvrtc_error: ToolNotFound | None = None
    if compiler in ("auto", "nvrtc"):
        try:
            return "nvrtc", load_nvrtc(), None
        except ToolNotFound as exc:
            nvrtc_error = exc
            if compiler == "nvrtc":
                raise CompileError(f"NVRTC is unavailable: {exc}") from exc
    nvcc = find_tool("nvcc")
    if nvcc is None:
        reason = f"NVRTC is unavailable ({nvrtc_error}) and " if nvrtc_error else ""
        raise CompileError(
            f"{reason}nvcc was not found on PATH, in CUDA_HOME/CUDA_PATH or /usr/local/cuda",
            fix="pip install 'cuda-bindings>=13,<14' 'nvidia-cuda-nvrtc>=13,<14', "
                "or install a CUDA 13 toolkit and put its bin/ on PATH")
    return "nvcc", None, nvcc
