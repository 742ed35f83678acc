"""report.html's words on quality: which figure judged each output and why (fidelity
without labels), and, per quantized artifact, the layers that stayed float with their
measured time, a TFLite file's rewrites and float ops, and the fidelity floor's
recovery steps (the same records report.md says in words)."""
from __future__ import annotations

from compress.report.html_parts import escape, table
from compress.report.md_tables import output_judges


def _judges(report: dict) -> str:
    judges = output_judges(report)
    if not judges:
        return ""
    return ("<h3>Which figure judged each output</h3><p>Without labels each output is judged "
            "by the figure that fits it; the worst of them is checked against the budgets."
            "</p>" + table(["output", "judged by", "why"],
                           [[name, j["metric"], j["why"]] for name, j in judges.items()]))


def _float_layers(name: str, meta: dict) -> str:
    layers = meta.get("float_layers") or []
    if meta.get("quantized_nothing"):
        return f"<h3>{escape(name)}: nothing quantized</h3><p>{escape(meta['quantized_nothing'])}.</p>"
    if not layers:
        return ""
    rows = [[layer["op"], layer["node"], layer["time_share"], layer["why"]] for layer in layers]
    return (f"<h3>{escape(name)}: layers that stayed float</h3>"
            + table(["op", "node", "share of the file's time (measured)", "why"], rows))


def _tflite_forms(name: str, meta: dict) -> str:
    done, left = meta.get("normalised") or {}, meta.get("float_ops") or {}
    if not done and not left:
        return ""
    rows = [[f"rewritten: {key}", str(value)] for key, value in done.items()]
    rows += [["stayed float32 (mixed int8)", f"{op} x{count}"] for op, count in left.items()]
    return f"<h3>{escape(name)}: the TFLite file</h3>" + table(["what", "detail"], rows)


def _floor(name: str, meta: dict) -> str:
    """int8-static's fidelity floor where the model fell below it: the layers that kept
    more bits, each with what it cost the outputs alone (compress/report/md_floor.py)."""
    floor = meta.get("fidelity_floor") or {}
    if not floor or floor.get("sqnr_db", 0) >= floor.get("floor_db", 0):
        return ""
    after = floor.get("sqnr_db_after", floor["sqnr_db"])
    said = (f"Calibration SQNR {floor['sqnr_db']:.1f} dB, under the floor of "
            f"{floor['floor_db']:g} dB; after recovery ({len(floor.get('steps') or [])} "
            f"steps) {after:.1f} dB ({'the floor holds' if floor.get('held') else 'still under it'}).")
    rows = [[layer["layer"], layer["precision"], layer.get("alone_sqnr_db")]
            for layer in floor.get("layers") or []]
    return (f"<h3>{escape(name)}: the fidelity floor</h3><p>{escape(said)}</p>"
            + (table(["layer", "activations", "outputs' SQNR with it alone quantized (dB)"],
                     rows) if rows else ""))


def quality_section(report: dict) -> str:
    parts = [_judges(report)]
    for artifact in report["artifacts"]:
        meta, name = artifact.get("meta") or {}, artifact["id"]
        parts += [_float_layers(name, meta), _tflite_forms(name, meta), _floor(name, meta)]
    body = "".join(part for part in parts if part)
    return f"<h2>Quality: how it was judged, what stayed float</h2>{body}" if body else ""
