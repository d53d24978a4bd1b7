"""`@ag.kernel` and `ag.KernelFunction`: the kernel object users hold, which traces, compiles,
interprets and calls.

Job: put the running half of a kernel on top of the pipeline. Tracing is the dsl's
(`argus.dsl.kernel.KernelDef`); compiling needs every stage (argus/compiler.py) and interpreting
needs the runtime's interpreter, so those methods live here, above the stages, and the dsl
imports nothing downstream of it (ARCHITECTURE.md §2; tests/unit/test_import_direction.py).

Invariant: one CompiledKernel per kernel and compile-time values (defaults filled in), built on
the first call and cached on the KernelFunction. One contract for interpret and compile: the
interpreter runs only kernels that compile's front end (trace, layouts, lowering, CUDA rendering;
argus.compiler.front_end) accepts, and a kernel it refuses is refused by both with the same
exception (tests/unit/test_random_programs.py checks it on random programs).
"""

from __future__ import annotations

from typing import Any, Callable

from argus.dsl.kernel import KernelDef


class KernelFunction(KernelDef):
    """A kernel defined with `@ag.kernel`. Trace it, compile it, interpret it, or call it."""

    def __init__(self, fn: Callable, threads: int | None = None,
                 cluster: tuple[int, int, int] = (1, 1, 1), name: str | None = None,
                 partial_outputs: tuple[str, ...] = ()):
        super().__init__(fn, threads=threads, cluster=cluster, name=name)
        # outputs the kernel writes only part of on purpose: exempt from the launch-time
        # coverage check (argus/runtime/coverage.py), which refuses the others
        self.partial_outputs = tuple(partial_outputs)
        unknown = set(self.partial_outputs) - set(self.tensor_specs)
        if unknown:
            from argus.errors import TraceError

            raise TraceError(f"kernel {self.name}: partial_outputs names "
                             f"{', '.join(sorted(unknown))}, which are not tensor parameters",
                             fix=f"name some of {', '.join(self.tensor_specs)}")
        self._compiled: dict[Any, Any] = {}
        self._verified: dict[Any, bool] = {}   # whether each compiled entry was verified
        self._front_ends: dict[Any, Any] = {}  # codegen.Source per compile-time values

    def trace(self, **constexprs: Any):
        """The traced `ir.Kernel`; partial outputs are recorded in its attrs, so that the
        verifier's store.coverage does not claim them either (argus/verify/check_stores.py)."""
        kernel = super().trace(**constexprs)
        if self.partial_outputs:
            kernel = kernel.with_attrs(partial_outputs=self.partial_outputs)
        return kernel

    def _build_key(self, **constexprs: Any) -> tuple:
        """The cache key of a built kernel: its compile-time values and the lowering choices the
        environment makes (argus/config.py build_choices: ARGUS_WGMMA_A_FENCE), so one process
        can build both fences of the same kernel to time them."""
        from argus import config

        return self.cache_key(**constexprs), config.build_choices()

    def compile(self, **constexprs: Any):
        """The CompiledKernel for these compile-time values (built once, then cached)."""
        from argus import compiler  # loaded on first use: `import argus` stays light

        from argus import config

        key = self._build_key(**constexprs)
        verified = config.verify_level() >= 1
        # a kernel built unverified (ARGUS_VERIFY=0) is not handed out to a later compile that
        # asks for verification: that one builds (and verifies) it again
        if key not in self._compiled or (verified and not self._verified.get(key, False)):
            self._compiled[key] = compiler.compile_kernel(self, **constexprs)
            self._verified[key] = verified
        return self._compiled[key]

    def built(self, **constexprs: Any):
        """The CompiledKernel `compile` would return for these compile-time values if it built
        it already in this process, else None (nothing is built here). A kernel built
        unverified is None while verification is asked (compile builds and verifies it again):
        launches that look here first (compose.launch.run under the GPU gate) must not run a
        kernel the verifier never saw."""
        from argus import config

        key = self._build_key(**constexprs)
        if config.verify_level() >= 1 and not self._verified.get(key, False):
            return None
        return self._compiled.get(key)

    def lower(self, **constexprs: Any):
        """Trace, infer layouts and lower (no verification, no compilation): the lowered
        `ir.Kernel` that `argus.verify.run(kernel_fn, lower=True)` checks."""
        from argus.compiler import lower_only

        return lower_only(self, **constexprs)

    def _split(self, kw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Keyword arguments -> (runtime scalars, compile-time values)."""
        scalars = {k: v for k, v in kw.items() if k in self.scalar_specs}
        return scalars, {k: v for k, v in kw.items() if k not in self.scalar_specs}

    def interpret(self, *arrays, **kw: Any):
        """Run the kernel in the numpy interpreter (no GPU); outputs are written in place.
        Runtime scalars (ag.Scalar parameters) go positionally in signature order or by
        keyword; other keywords are compile-time values. Compile's front end runs first (once
        per compile-time values), so a kernel compile refuses is refused here, identically."""
        from argus.runtime import coverage, interp, preconditions

        scalars, constexprs = self._split(kw)
        self.front_end(**constexprs)
        kernel = self.trace(**constexprs)
        tensors, values = interp.split_runtime_args(kernel, arrays, scalars)
        values = {**coverage.shape_values(kernel, tensors), **values}
        preconditions.check(kernel, values)      # ag.require, first: as a compiled launch
        coverage.check_launch(kernel, values, exempt=self.partial_outputs)
        return interp.run(kernel, *arrays, **scalars)

    def front_end(self, **constexprs: Any):
        """The CUDA source compile would build for these compile-time values, through the same
        stages (argus.compiler.front_end; no verifier, no NVRTC), cached like `compile`. Raises
        exactly what `compile` raises for a kernel those stages refuse."""
        from argus import compiler

        key = self._build_key(**constexprs)
        if key not in self._front_ends:
            compiled = self._compiled.get(key)
            self._front_ends[key] = (compiled.source if compiled is not None
                                     else compiler.front_end(self, **constexprs))
        return self._front_ends[key]

    def __call__(self, *args, **kw: Any):
        scalars, constexprs = self._split(kw)
        return self.compile(**constexprs)(*args, **scalars)


def kernel(fn: Callable | None = None, *, threads: int | None = None,
           cluster: tuple[int, int, int] = (1, 1, 1), name: str | None = None,
           partial_outputs: tuple[str, ...] = ()):
    """Decorate a Python function as an Argus kernel: `@ag.kernel` or
    `@ag.kernel(threads=256, cluster=(2, 1, 1))`. A launch whose stores provably leave part of
    an output unwritten is refused, except for the outputs named in `partial_outputs`."""
    if fn is None:
        return lambda f: KernelFunction(f, threads=threads, cluster=cluster, name=name,
                                        partial_outputs=partial_outputs)
    return KernelFunction(fn, threads=threads, cluster=cluster, name=name,
                          partial_outputs=partial_outputs)
