"""One rule per op per stage (ARCHITECTURE.md §7 item 3): every IR op class has an interpreter
rule, a verifier transfer rule and a CUDA rendering rule, or an exemption that says why, in
each of the three registries. Adding an op without its three rules fails here, naming the
op and the stage."""

from argus.codegen import cuda as codegen_rules
from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.runtime import interp as interp_rules
from argus.verify import transfer as verify_rules

STAGES = {"interpreter": interp_rules, "verifier": verify_rules, "codegen": codegen_rules}


def _op_classes() -> set[type]:
    tags = {cls for cls in vars(T).values()
            if isinstance(cls, type) and issubclass(cls, O.Op) and cls is not O.Op
            and getattr(cls, "NAME", "")}
    return set(O.ALL_OPS.values()) | tags


def test_every_op_has_a_rule_in_every_stage():
    missing = [f"{cls.NAME}: no {stage} rule"
               for cls in sorted(_op_classes(), key=lambda c: c.NAME)
               for stage, mod in STAGES.items()
               if cls not in mod.RULES and cls not in mod.EXEMPT
               and not (stage == "codegen" and cls in getattr(mod, "GROUP_RULES", {}))]
    assert not missing, "\n".join(missing)


def test_exemptions_say_why():
    for stage, mod in STAGES.items():
        for cls, why in mod.EXEMPT.items():
            assert isinstance(why, str) and len(why) > 10, (stage, cls)
            assert cls not in mod.RULES, f"{cls.NAME} is both ruled and exempt in {stage}"
