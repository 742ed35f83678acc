"""report.md's words for int8-static's fidelity floor (compress/quant/passes/fidelity_floor/):
for an artifact whose calibration SQNR fell below the floor, what it scored, which layers
got more bits and why, and what that gave. Nothing where the floor held as quantized."""
from __future__ import annotations

from compress.report.mdtext import md


def _layer(layer: dict) -> str:
    """One group that kept more bits, in words."""
    alone = (f"quantized alone, it left the outputs at {layer['alone_sqnr_db']:.1f} dB"
             if layer.get("alone_sqnr_db") is not None else
             "its cost alone was not measured")
    return f"- {md(layer['layer'])}: {layer['precision']} activations ({alone})"


def _summary(floor: dict) -> str:
    where = (f"output SQNR {floor['sqnr_db']:.1f} dB against the float model (the worst "
             f"output, {floor['check_feeds']} calibration feeds) is below the floor of "
             f"{floor['floor_db']:g} dB")
    if not floor.get("recovered"):
        return f"The quantized model's {where}; nothing was changed (`recover: false`)."
    outcome = "the floor holds" if floor["held"] else "still below the floor"
    unscored = [step for step in floor["steps"] if step.get("reason")]
    kept = (f"{len(floor['layers'])} layer(s) kept more bits" if floor["layers"] else
            "no layer kept more bits" + ("" if unscored else
                                         " (none raised the SQNR enough to pay for it)"))
    return (f"The quantized model's {where}. Its activations were given more bits one "
            f"layer at a time, those that cost the outputs most first (each layer's cost: "
            f"the outputs' SQNR with it alone quantized), then each taken back where the "
            f"floor held without it ({len(floor['steps'])} steps): {kept}, now "
            f"{floor['sqnr_db_after']:.1f} dB ({outcome}).{_unscored(unscored)}")


def _unscored(steps: list) -> str:
    """The moves whose model could not be scored, said: otherwise they read as moves that
    gained nothing."""
    if not steps:
        return ""
    return (f" {len(steps)} move(s) made a model that could not be scored, e.g. "
            f"{md(steps[0]['layer'])} to {steps[0]['to']}: {md(steps[0]['reason'])}.")


def floor_details(report: dict) -> list[str]:
    """A section per artifact whose calibration SQNR fell below int8-static's floor."""
    lines = []
    for artifact in report["artifacts"]:
        floor = (artifact.get("meta") or {}).get("fidelity_floor")
        if not floor or floor.get("sqnr_db", 0) >= floor.get("floor_db", 0):
            continue
        lines += [f"### {md(artifact['id'])}: fidelity floor {floor['floor_db']:g} dB", "",
                  _summary(floor), "", *map(_layer, floor.get("layers") or []), ""]
    return lines
