"""The distill stage's training objective: student, teacher and the feature projections
wired up for one training run (Pair: one trainable module, so train() optimises the
student and its projections together), and the loss. `config` is the stage's Distill
settings (compress.stages.distill).
"""
from __future__ import annotations

from compress.errors import ModelError
from compress.model.stats import first_output

_PROBE_SAMPLES = 8  # a training batch this size checks shapes before any training


def _modules(model, names: list[str], role: str) -> dict:
    known = dict(model.named_modules())
    for name in names:
        if name not in known:
            some = ", ".join(n for n in list(known)[1:13])
            raise ModelError(f"distill features: the {role} has no module '{name}'; some of "
                             f"its modules: {some}")
    return {name: known[name] for name in names}


def _hook(model, names: list[str], role: str, store: dict) -> list:
    """Forward hooks that keep the latest output of each named module in `store`."""
    handles = []
    for name, module in _modules(model, names, role).items():
        def keep(_module, _inputs, output, name=name):
            store[name] = first_output(output)
        handles.append(module.register_forward_hook(keep))
    return handles


def _projection(pair, s_shape, t_shape, torch):
    """Maps a student feature onto the teacher's width (identity when they match)."""
    where = f"distill features {pair.student} -> {pair.teacher}"
    if len(s_shape) != len(t_shape) or tuple(s_shape[2:]) != tuple(t_shape[2:]):
        raise ModelError(f"{where}: the student's output {tuple(s_shape)} and the teacher's "
                         f"{tuple(t_shape)} differ in rank or spatial size; pick layers at "
                         "the same resolution")
    if s_shape[1] == t_shape[1]:
        return torch.nn.Identity(), "identity"
    if len(s_shape) == 4:
        return torch.nn.Conv2d(s_shape[1], t_shape[1], 1), f"conv1x1 {s_shape[1]}->{t_shape[1]}"
    if len(s_shape) == 2:
        return torch.nn.Linear(s_shape[1], t_shape[1]), f"linear {s_shape[1]}->{t_shape[1]}"
    raise ModelError(f"{where}: widths {s_shape[1]} and {t_shape[1]} differ; projections "
                     "exist for 2-D (N, C) and 4-D (N, C, H, W) features only")


class Pair:
    """Student, teacher and the feature projections, wired up for one training run."""

    def __init__(self, student, teacher, config, torch):
        self.student, self.teacher, self.config = student, teacher, config
        self.s_feats, self.t_feats = {}, {}
        self.handles = (
            _hook(student, [p.student for p in config.features], "student", self.s_feats)
            + _hook(teacher, [p.teacher for p in config.features], "teacher", self.t_feats))
        # One module holding student + projections, so train() optimises both and keeps
        # the best epoch of both; only `.student` is saved afterwards.
        self.trainable = torch.nn.Module()
        self.trainable.student = student
        self.trainable.projections = torch.nn.ModuleList()
        self.trainable.forward = student.forward  # the loss calls the student through it

    def probe(self, inputs: dict, torch) -> tuple[object, object, list[str]]:
        """Run both models on a training batch; build projections; return both outputs."""
        args = [torch.from_numpy(a[:_PROBE_SAMPLES]) for a in inputs.values()]
        self.student.eval()
        with torch.no_grad():
            s_out, t_out = first_output(self.student(*args)), first_output(self.teacher(*args))
        described = []
        for pair in self.config.features:
            proj, text = _projection(pair, self.s_feats[pair.student].shape,
                                     self.t_feats[pair.teacher].shape, torch)
            self.trainable.projections.append(proj)
            described.append(text)
        return s_out, t_out, described

    def close(self) -> None:
        for handle in self.handles:  # the teacher may be the shared source module
            handle.remove()


def check_outputs(s_out, t_out) -> None:
    if tuple(s_out.shape) != tuple(t_out.shape):
        raise ModelError(f"the teacher's output has shape {tuple(t_out.shape)} but the "
                         f"student's has shape {tuple(s_out.shape)} on a training batch; "
                         "both must score the same classes")
    if s_out.ndim != 2:
        raise ModelError(f"distill needs class scores shaped (batch, classes); the models "
                         f"return {tuple(s_out.shape)}")


def loss_fn(pair: Pair, alpha: float, torch):
    F = torch.nn.functional
    config, temperature = pair.config, pair.config.temperature

    def loss(model, xs, labels):
        *xs, t_out = xs  # the teacher's outputs ride along as the last "input"
        s_out = first_output(model(*xs))
        if config.features:
            with torch.no_grad():
                pair.teacher(*xs)  # fills pair.t_feats through the hooks
        # T^2 keeps the soft-target gradients on the same scale as the hard-label ones.
        total = alpha * temperature ** 2 * F.kl_div(
            F.log_softmax(s_out / temperature, 1), F.log_softmax(t_out / temperature, 1),
            reduction="batchmean", log_target=True)
        if alpha < 1 and labels is not None:
            total = total + (1 - alpha) * F.cross_entropy(s_out, labels)
        if config.features:
            feature = sum(F.mse_loss(proj(pair.s_feats[p.student]), pair.t_feats[p.teacher])
                          for p, proj in zip(config.features, model.projections))
            total = total + config.feature_weight * feature / len(config.features)
        return total
    return loss
