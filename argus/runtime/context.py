"""The CUDA driver handle and torch's primary context: `_driver()` (cuda-bindings, imported on
first use), `check_cuda` (status checks that raise LaunchError) and `ensure_context`.

One job: the driver plumbing that both the launcher (driver.py) and the TMA descriptor encoder
(tma.py) need. It sits below both, so that neither imports the other's functions (the launcher
packs TensorMaps; the encoder calls the driver): no import circle. Nothing happens at import.
"""

from __future__ import annotations

from typing import Any

from argus.errors import LaunchError

# Explicit cache: device -> primary context (retained once, shared with torch)
_CONTEXTS: dict[int, Any] = {}


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise LaunchError(f"cuda-bindings is not importable ({exc})",
                          fix="pip install 'cuda-bindings>=13,<14'") from exc
    return driver


def _error_text(driver: Any, code: Any) -> str:
    try:
        name = driver.cuGetErrorName(code)[1]
        text = driver.cuGetErrorString(code)[1]
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        return f"{name} ({text})"
    except Exception:  # noqa: BLE001 - the error text must never mask the error itself
        return str(code)


def check_cuda(result: Any, what: str, fix: str = "") -> Any:
    """Unpack a cuda-bindings (status, *values) tuple, raising LaunchError on failure."""
    driver = _driver()
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise LaunchError(f"{what} failed: {_error_text(driver, status)}", fix=fix)
    if isinstance(result, tuple) and len(result) > 1:
        return result[1] if len(result) == 2 else result[1:]
    return None


def ensure_context(device: int) -> None:
    """Make torch's primary context of `device` current on this thread (initialising the driver
    the first time). torch must have initialised CUDA first so that we share its context."""
    driver = _driver()
    context = _CONTEXTS.get(device)
    if context is None:   # the first use of the device (every later launch skips this)
        import torch

        _require_cuda()
        torch.cuda.init()
        try:
            check_cuda(driver.cuInit(0), "cuInit")
        except LaunchError:
            raise
        except Exception as exc:  # libcuda missing: cuda-pathfinder raises its own error
            raise LaunchError(f"the CUDA driver library could not be loaded ({exc})",
                              fix="install the NVIDIA driver (libcuda.so.1)") from exc
        handle = check_cuda(driver.cuDeviceGet(device), f"cuDeviceGet({device})")
        context = _CONTEXTS[device] = check_cuda(driver.cuDevicePrimaryCtxRetain(handle),
                                                 f"cuDevicePrimaryCtxRetain({device})")
    current = check_cuda(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if current is None or int(current) != int(context):
        check_cuda(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise LaunchError("no CUDA device is visible to torch",
                          fix="run on a machine with an NVIDIA GPU and a CUDA build of torch")
