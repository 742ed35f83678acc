"""Channel equalization through hard-swish into depthwise convolutions
(compress/quant/swish/equalize.py) as an INT8 pass: on the quantized graph the check
kept, every op still integer; ONNX only. Unset (`equalize_hard_swish`), the equalized
file is judged alone against the one kept before, by the check's rule: its ranges come
from the calibration feeds, so it must win by the margin; true: always kept; false: off."""
from __future__ import annotations

import os

from compress.quant.passes.base import GRAPH, Int8Pass, Needs, register_pass

NOTHING = ("found no hard-swish (HardSwish, HardSigmoid*x, x*Clip(x+3,0,6)/6) feeding a "
           "depthwise convolution")


def _off(settings) -> bool:
    """Not made: turned off, or a zero point that must stay where it is (symmetric
    activations, QNN's types), which widening the product's range moves."""
    return settings.equalize_hard_swish is False or settings.symmetric_activations \
        or settings.qnn


def channel_ranges(float_model, names: list[str], feeds: list[dict]) -> tuple[dict, list]:
    """{tensor: (per-channel lowest, per-channel highest)} over `feeds`, and the float
    model's outputs on each feed, from one run."""
    from compress.quant.float_pass import add_channel_range
    from compress.quant.float_probe import tensor_values
    outputs = [o.name for o in float_model.graph.output]
    ranges, found = {}, []
    for values in tensor_values(float_model, names + outputs, feeds, os.cpu_count() or 1):
        found.append([values[name] for name in outputs])
        for name in names:
            add_channel_range(ranges, name, values[name])
    return ranges, found


class _Onnx:
    record = "hard_swish_equalization"

    def channel_tensors(self, float_model) -> list[str]:
        """The tensors whose per-channel ranges the sites will ask for, known before
        quantize_static runs (the calibrating run takes them)."""
        from compress.quant.swish.sites import float_tensors
        return float_tensors(float_model)

    def apply(self, run) -> dict:
        """Equalize the sites of the QDQ model at run.target. The per-channel ranges and
        the float outputs the equalized file is scored against come from the calibrating
        run, where it took both, or else from a float run over the chosen feeds. Where
        the model has no such site, a record that says so (and a note where the setting
        asked for the pass: on by default, it would be one on most models)."""
        import onnx

        from compress.quant.swish import equalize as swish_equalize
        from compress.quant.swish.sites import find_sites
        qdq = onnx.load(str(run.target))
        sites = find_sites(qdq)
        if not sites:
            if run.settings.equalize_hard_swish:   # asked for: silence would read as done
                run.ctx.progress.note(f"int8-static: equalize_hard_swish changed nothing: it "
                                      f"{NOTHING}")
            return {"sites": 0, "said": NOTHING}
        names = [n for s in sites for n in (s.x, s.y)]
        known, feeds = run.known, run.chosen_feeds()
        taken = (known is not None and known.outputs is not None
                 and set(names) <= set(known.channels))
        checked = HARD_SWISH.checked(run.settings)
        with run.ctx.progress.task(f"equalizing {len(sites)} hard-swish -> depthwise convolution "
                                   f"pair(s){', kept if it lowers the error' * checked}",
                                   None):
            ranges, outputs = ((known.channels, known.outputs) if taken else
                               channel_ranges(onnx.load(str(run.source)), names, feeds))
            before = qdq.SerializeToString()
            meta = swish_equalize.equalize(qdq, ranges)
            after = qdq.SerializeToString()
            judged = run.judged(HARD_SWISH, before, after, feeds, outputs) if checked else None
        kept = judged is None or judged.kept == HARD_SWISH.label
        if kept:
            run.target.write_bytes(after)
        return {**meta, "kept": kept,
                **({"calibration_sqnr_db": judged.scores} if judged else {})}


HARD_SWISH = register_pass(Int8Pass(
    name="hard_swish", when=GRAPH, label="equalized", after=("sequential_correction",),
    on=lambda settings: not _off(settings), backends={"onnx": _Onnx()},
    needs=lambda settings: Needs(channels=True), fitted=True,
    checked=lambda settings: settings.equalize_hard_swish is None))
# Never refuses the tensor-by-tensor path (`asked` unset): that path keeps convolutions in
# float, where hard-swish equalization has no site to rewrite.
