"""One training step (labkit.rig.step) underlies every loop: the loops agree with it, and no other optimizer steps."""

import ast
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from labkit.offload.budget import budgeted_step
from labkit.offload.trace import trace_step
from labkit.rig.model import GPTConfig
from labkit.rig.step import PHASES, Loop, StepHooks, forward_backward, optimizer_step, training_step
from labkit.rig.train import TrainConfig, Trainer

LABKIT = Path(__file__).resolve().parents[1] / "labkit"
STEP = LABKIT / "rig" / "step.py"
TINY = GPTConfig(vocab_size=64, seq_len=16, n_layer=2, n_head=2, d_model=32)
OPTIMIZER = re.compile(r"^(o|opt|opts|optim|optimi[sz]ers?)$|_opt$|^opt_|optimi[sz]er", re.IGNORECASE)


def _last_name(node: ast.AST) -> str | None:
    """The identifier an expression ends with: ``opt``, ``self.optimizer``, ``opts[0]``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _names_optimizer(node: ast.AST, loop_vars: set[str]) -> bool:
    name = _last_name(node)
    return name is not None and (bool(OPTIMIZER.search(name)) or name in loop_vars)


def optimizer_steps(source: str) -> list[int]:
    """Lines of ``X.step(...)`` calls that step an optimizer: X names one (``opt``, ``self.optimizer``,
    ``opts[k]``, a loop variable over optimizers) or an argument does (``scaler.step(opt)``).

    A ``step`` method's own call of the optimizer it wraps (``MasterWeightAdamW.step`` calling
    ``self.inner.step()``) is the optimizer, not a loop, and is left out; so are a pipeline schedule's
    ``sched.step(x)``, a trainer's ``trainer.step()`` and a simulator's steps, whose receivers name no optimizer.
    """
    tree = ast.parse(source)
    loop_vars = {t.id for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))
                 for t in ast.walk(n.target) if isinstance(t, ast.Name) and OPTIMIZER.search(ast.unparse(n.iter))}
    inside_step_method: set[int] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "step":
                inside_step_method |= {id(n) for n in ast.walk(fn)}
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step" \
                and id(n) not in inside_step_method:
            if _names_optimizer(n.func.value, loop_vars) or any(_names_optimizer(a, loop_vars) for a in n.args):
                lines.append(n.lineno)
    return sorted(lines)


def test_the_detector_finds_optimizer_steps_and_nothing_else():
    src = """
opt.step()
self.optimizer.step()
trainer.optimizer.step()
opts[1].step()
for o in opts:
    o.step()
scaler.step(optimizer)
sched.step(x, target=y)
trainer.step()
scheduler.step()
timeline.step(3)
class Wrapper:
    def step(self):
        self.inner.step()
        self.optimizer.step()
"""
    assert optimizer_steps(src) == [2, 3, 4, 5, 7, 8]


def test_no_optimizer_steps_outside_the_one_training_step():
    found = {str(p.relative_to(LABKIT)): optimizer_steps(p.read_text())
             for p in sorted(LABKIT.rglob("*.py")) if p != STEP}
    assert {p: lines for p, lines in found.items() if lines} == {}
    assert len(optimizer_steps(STEP.read_text())) == 2  # optimizer.step() and scaler.step(optimizer): the one place


def _hand_loop(cfg: TrainConfig, steps: int) -> tuple[list[float], list[torch.Tensor]]:
    """The textbook loop, written out here only to check the rig's step against it."""
    t = Trainer(cfg)
    losses = []
    for i in range(steps):
        t.model.train()
        with t.forward_context():
            loss = t.compute_loss(t.data(i))
        loss.backward()
        t.optimizer.step()
        t.optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in t.model.parameters()]


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_trainer_step_is_the_textbook_step_bit_for_bit(precision):
    cfg = TrainConfig(model=TINY, batch_size=2, precision=precision)
    losses, params = _hand_loop(cfg, 3)
    t = Trainer(cfg)
    assert t.run(3) == losses
    assert all(torch.equal(a, b) for a, b in zip(params, t.model.parameters(), strict=True))
    assert t.steps_done == 3


def test_hooks_run_at_the_phase_boundaries_in_order():
    t, events = Trainer(TrainConfig(model=TINY, batch_size=2)), []

    def grads_ready(loss):
        events.append(("after_backward", all(p.grad is not None for p in t.model.parameters())))

    hooks = StepHooks(phase=lambda name: events.append(("phase", name)),
                      after_forward=lambda loss: events.append(("after_forward", loss.grad_fn is not None)),
                      after_backward=grads_ready,
                      after_optimizer=lambda: events.append(("after_optimizer", t.model.lm_head.weight.grad is None)))
    loss = training_step(t, 5, hooks)
    assert events == [("phase", "forward"), ("phase", "backward"), ("after_forward", True), ("after_backward", True),
                      ("phase", "optimizer"), ("after_optimizer", True)]
    assert [e[1] for e in events if e[0] == "phase"] == list(PHASES)
    assert isinstance(loss, float) and t.steps_done == 6


def test_keep_grads_leaves_the_last_gradients_and_forward_backward_does_not_update():
    net = nn.Linear(4, 1)
    x, y = torch.ones(3, 4), torch.zeros(3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loop = Loop(net, opt, lambda i: (x, y), loss=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]))
    before = net.weight.detach().clone()
    forward_backward(loop, 0)
    assert torch.equal(net.weight, before) and net.weight.grad is not None
    optimizer_step(opt)
    assert not torch.equal(net.weight, before) and net.weight.grad is None
    training_step(loop, 1, keep_grads=True)
    assert net.weight.grad is not None and loop.steps_done == 2


class _MLP(nn.Module):
    """A model that is not the tiny GPT: ``forward(x)`` only, its loss from a function."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 16)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _mlp_trainer(precision: str) -> Trainer:
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    return Trainer(model=_MLP(), data=(x, y), precision=precision, blocks="layers",
                   loss=lambda m, b: nn.functional.mse_loss(m(b[0]).float(), b[1]))


def test_trace_and_budget_run_any_model_under_its_autocast():
    traced = {e.dtype for e in trace_step(_mlp_trainer("bf16-autocast")).entries}
    assert "bfloat16" in traced  # the Linear inputs autocast saved in bf16
    assert {e.dtype for e in trace_step(_mlp_trainer("fp32")).entries} == {"float32"}
    for precision in ("bf16-autocast", "fp32"):  # the budget counts what the trace saw, all alive when forward ends
        counter = budgeted_step(_mlp_trainer(precision), None)
        assert counter.peak - counter.states == trace_step(_mlp_trainer(precision)).total_bytes > 0
