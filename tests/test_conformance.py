"""`check_gate`: every shipped gate passes, and each kind of broken gate fails exactly where it is broken."""

import shutil
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml

from ega_lightning.conformance import ENERGY, OUTPUT, PROPERTIES, Shape, _Context, check_gate, gate_kind
from ega_lightning.errors import UserError
from ega_lightning.gates import KeyBias, OutputGate, causal_znorm, gate_class
from ega_lightning.gates.linear import LinearGate
from ega_lightning.model import GPT, GPTConfig

from .helpers import CONFIGS, REPO, one_fast

SHIPPED = [
    (p.stem, yaml.safe_load(p.read_text())["model"])
    for p in sorted((CONFIGS / "gate").glob("*.yaml"))
    if yaml.safe_load(p.read_text())["model"]["gate"] != "none"
    # the leak audit's diagnostic (z over the whole window) is meant to fail: see the test below
    and (yaml.safe_load(p.read_text())["model"].get("gate_options") or {}).get("znorm") != "window"
]


OUTPUT_GATES = [
    yaml.safe_load(p.read_text())["model"]["output_gate"] for p in sorted((CONFIGS / "output_gate").glob("*.yaml"))
]


@pytest.mark.parametrize(
    "model", one_fast([m for _, m in SHIPPED], [n for n, _ in SHIPPED].index("linear")), ids=[n for n, _ in SHIPPED]
)
def test_every_shipped_gate_config_passes(model):
    report = check_gate(model["gate"], model.get("gate_options"))
    kind = gate_kind(gate_class(model["gate"]))
    assert [r.name for r in report.results] == [name for name, (_, kinds) in PROPERTIES.items() if kind in kinds]
    assert report.passed, report.format()


# EGA-1 on the modern baseline and without positions; ALiBi and FoX in their papers' design (configs/sweeps/rope.yaml)
@pytest.mark.parametrize(
    ("gate", "position"), one_fast([("linear", "rope"), ("linear", "none"), ("alibi", "none"), ("fox", "none")])
)
def test_a_gate_passes_under_rope_and_without_position_embedding(gate, position):
    """Issue 56: the properties hold of the model a RoPE or position-free run builds (RoPE on the padded channel's
    true channels, cached positions, no wpe); the checked model is that model."""
    shape = Shape(position=position)
    report = check_gate(gate, shape=shape)
    assert report.passed, report.format()
    assert f"position {position}" in report.format().splitlines()[0]
    model = _Context(gate, {}, shape, 0, gate_kind(gate_class(gate))).model()
    assert model.cfg.position == position and model.wpe is None


@pytest.mark.parametrize("gate", OUTPUT_GATES)
def test_every_shipped_output_gate_passes_the_properties_of_its_kind(gate):
    report = check_gate(gate)
    assert [r.name for r in report.results] == [name for name, (_, kinds) in PROPERTIES.items() if OUTPUT in kinds]
    assert "alpha_zero_is_baseline" not in report.failed + [r.name for r in report.results]
    assert report.passed, report.format()


def test_a_torch_without_flex_attention_checks_the_other_paths(torch_without_flex):
    report = check_gate("linear")
    assert report.passed, report.format()
    # flex is gone indeed: a flex model fails as on torch 2.4
    config = GPTConfig(vocab_size=16, block_size=8, n_layer=1, n_head=2, n_embd=16, gate="linear", attention="flex")
    with torch.no_grad(), pytest.raises(ValueError, match="needs FlexAttention"):
        GPT(config)(torch.zeros(1, 8, dtype=torch.long))


def test_the_example_gate_passes_and_its_leaking_copy_fails(gate_sandbox):
    shutil.copy(REPO / "examples" / "my_gates.py", gate_sandbox)
    assert check_gate("my_gates.AbsEnergyGate").passed
    leaky = check_gate("my_gates.LeakyAbsEnergyGate")
    assert leaky.failed == ["causal", "cached_equals_recompute"]
    assert "the gate reads the future" in leaky["causal"].detail


# --- one defect each --------------------------------------------------------------------------


class WrongReceptiveField(LinearGate):
    """Reads x_j and x_{j-3} but keeps receptive_field = 1: the cache drops what it needs."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        earlier = F.pad(x, (0, 0, 3, 0))[:, : x.shape[1]]  # (B, T, C): x_{j-3}, zeros before the start
        return self.proj(x + earlier).transpose(1, 2)

    def input_projection(self) -> None:
        return None


class WrongCount(LinearGate):
    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 1)  # forgot alpha


class Bf16Energy(LinearGate):
    """Overrides forward without keeping autocast out: the projection runs in bf16."""

    def forward(self, x: torch.Tensor, projection: torch.Tensor | None = None) -> torch.Tensor:
        return self.log_gate_from_z(causal_znorm(self.energy(x)))


class LogOfNorm(LinearGate):
    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return super().energy(x) + torch.log(x.square().mean(-1))[:, None, :]  # -inf at x = 0

    def input_projection(self) -> None:
        return None


class NotOffAtAlphaZero(LinearGate):
    def log_gate_from_z(self, z: torch.Tensor) -> torch.Tensor:
        return super().log_gate_from_z(z) - 0.1 * F.softplus(z)  # a term alpha does not scale


class FusedDisagrees(LinearGate):
    """The fused path's energy (from the folded projection) is not the energy(x) the reference uses."""

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).transpose(1, 2)

    def energy_from_projection(self, p: torch.Tensor) -> torch.Tensor:
        return p.transpose(1, 2).square()


@pytest.mark.parametrize(
    "gate,failed,detail",
    one_fast(
        [
            (WrongReceptiveField, ["cached_equals_recompute"], "reads the last 4 positions but receptive_field = 1"),
            (WrongCount, ["params_per_layer"], "params_per_layer says 66, counted 68"),
            (Bf16Energy, ["fp32_under_autocast"], "part of the gate runs in bf16"),
            (LogOfNorm, ["finite_on_constant_input"], "energy is not finite for a zero input"),
            (NotOffAtAlphaZero, ["alpha_zero_is_baseline"], "at alpha = 0 the gate still changes attention"),
            # cached generation folds the projection as the fused path does: the two agree, on the wrong function
            (FusedDisagrees, ["fused_equals_reference"], "computes another function"),
        ]
    ),
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_each_defect_fails_its_property_and_only_it(gate, failed, detail):
    report = check_gate(gate)
    assert report.failed == failed, report.format()
    assert detail in report[failed[0]].detail


@pytest.mark.parametrize("gate", one_fast(["linear", "db2", "author"]))
def test_the_leak_audit_gate_is_caught_by_the_same_checker_users_get(gate):
    # z over the whole window (gate option znorm: window, the study's leak audit) reads the future
    leaky = check_gate(gate, {"znorm": "window"}, properties=["causal"])
    assert leaky.failed == ["causal"], leaky.format()
    assert check_gate(gate, {"znorm": "prefix"}, properties=["causal"]).passed


def test_a_gate_configuration_is_checked_with_its_options():
    report = check_gate("multiscale", {"scales": 3}, properties=["params_per_layer", "cached_equals_recompute"])
    assert report.passed and report["params_per_layer"].detail.startswith("documented = counted: 196 at 32x2")
    with pytest.raises(UserError, match="scales must be an integer >= 1"):
        check_gate("multiscale", {"scales": 0})
    # a value the gate cannot train with is said as such, not failed as three properties of a wrong gate
    for options in ({"tau_init": float("nan")}, {"alpha_init": float("inf")}):
        with pytest.raises(UserError, match=f"gate option {next(iter(options))} must be a finite number"):
            check_gate("linear", options)
    wide = check_gate("multiscale", {"scales": 100}, properties=["causal"])  # 2**99 tokens: all of a short window
    assert wide.passed


def test_check_gate_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_gate("linear", properties=["params_per_layer"])
    assert torch.equal(torch.rand(3), expected)


def test_the_cli_prints_one_line_per_property_and_exits_by_verdict(capsys):
    from ega_lightning.commands.check_gate import main

    # a short window: the lines and the exit status are the same at every block (the default, 128, costs ~30 s)
    assert main([f"{__name__}.WrongCount", "--block_size", "16"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in out[1:-1]] == [
        ["FAIL" if p == "params_per_layer" else "PASS", p] for p, (_, kinds) in PROPERTIES.items() if ENERGY in kinds
    ]
    assert out[-1] == "8 properties, 1 failed: params_per_layer."
    assert main(["linear", "--only", "causal", "--block_size", "16"]) == 0


def test_a_leak_that_reaches_one_position_only_is_caught():
    # the reflect padding lets position 0 read x_2; only the log-gate at position 1 moves, and only
    # when token 2 changes: a property that perturbs a sample of positions passes it
    from .hostile_gates import ReflectConvGate

    report = check_gate(ReflectConvGate, properties=["causal"])
    assert report.failed == ["causal"]
    assert report["causal"].detail.startswith("changing token 2 moved the log-gate at 1 of the 2 positions")


def test_a_wrong_energy_shape_is_one_error_naming_the_shape_expected():
    from .hostile_gates import WrongShapeGate

    with pytest.raises(UserError, match=r"returned shape \(1, 32, 2\) .* must return \(B, n_head, T\) = \(1, 2, 32\)"):
        check_gate(WrongShapeGate)


class FutureBias(KeyBias):
    """A key bias that reads the future: b_j sums x over positions >= j (a reversed cumsum)."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.proj = torch.nn.Linear(n_embd, n_head)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_head * (n_embd + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.float()).transpose(1, 2).flip(-1).cumsum(-1).flip(-1)

    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        return self(x), state


class FutureOutputGate(OutputGate):
    """An output gate whose factor at i reads x_{i+1}."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__(n_embd, n_head)
        self.proj = torch.nn.Linear(n_embd, n_head, bias=False)

    @classmethod
    def params_per_layer(cls, n_embd: int, n_head: int, **options: Any) -> int:
        return n_embd * n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x.roll(-1, dims=1))).transpose(1, 2)[..., None]


@pytest.mark.parametrize(("gate", "what"), [(FutureBias, "bias"), (FutureOutputGate, "output gate's factor")])
def test_a_key_bias_or_an_output_gate_that_reads_the_future_fails_causality(gate, what):
    report = check_gate(gate, properties=["causal"])
    assert report.failed == ["causal"]
    assert report["causal"].detail.startswith("changing token 1 moved the ")
    assert what in report["causal"].detail or "logits" in report["causal"].detail
