"""Every z3 check the verifier makes has a wall-clock backstop behind its resource limit:
z3's non-linear arithmetic can run for many minutes between rlimit checkpoints (a conv
kernel's store.once query ran 15 minutes in one check with a 4 s budget on 2026-12-02). The
backstop is far above the budget, so it never decides a check that respects its rlimit."""
import z3

from argus.verify import solver


class _Recorder:
    def __init__(self):
        self.params = {}

    def set(self, key, value):
        self.params[key] = value


def test_the_backstop_is_far_above_the_budget_and_never_below_its_floor():
    assert solver.backstop_ms(1) == solver.BACKSTOP_MIN_MS
    budget_ms = 4000
    assert solver.backstop_ms(solver.rlimit_of(budget_ms)) == solver.BACKSTOP_FACTOR * budget_ms
    assert solver.BACKSTOP_FACTOR >= 10


def test_a_limited_solver_carries_the_backstop():
    s = solver._limit(_Recorder(), solver.rlimit_of(1000), seed=1)
    assert s.params == {"rlimit": solver.rlimit_of(1000), "random_seed": 1,
                        "timeout": solver.backstop_ms(solver.rlimit_of(1000))}


def test_z3_takes_the_backstop():
    s = solver._limit(z3.Solver(), solver.rlimit_of(100))
    x, y = z3.Ints("x y")
    s.add(x * x == 2 * y * y, y > 0)          # non-linear: no integer solution
    assert s.check() in (z3.unsat, z3.unknown)
