"""Refactoring check (not a speed benchmark): do predictions stay bit-identical?

    python benchmarks/predict_parity.py record  --out /tmp/before.json [--n 1000] [--seed 7]
    python benchmarks/predict_parity.py compare /tmp/before.json

``record`` draws random deployments over every zoo model and GPU (parallel degrees,
batch, lengths, workload kind, fusions, overlap SMs, clock, weight dtype, routing skew)
until ``--n`` of them predict (feasible or not), and writes each configuration with its
full prediction, or its one-line error. ``compare`` re-predicts the recorded
configurations with the code checked out now and reports every difference. Only the
stable public API is used (``predict``, ``Deployment``, ``Workload``), so a file recorded
before a restructure can be compared after it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from typing import Any

from energylens.deployment import Deployment, Workload
from energylens.predict import predict

FUSIONS = ("attention", "qkv", "gate_up", "act", "norm_residual")


def _routing(skew: float) -> Any:
    try:
        from energylens.cost.moe import Routing
    except ImportError:  # pragma: no cover - layout after a move
        from energylens.cost.routing import Routing  # type: ignore[no-redef]
    return Routing(kind="zipf", skew=skew) if skew > 0 else Routing()


def _names() -> tuple[list[str], list[str]]:
    from energylens.hardware import list_gpus

    try:
        from energylens.zoo import list_models
    except ImportError:  # pragma: no cover - layout after a move
        from energylens.model import list_models  # type: ignore[no-redef]
    return [m.name for m in list_models()], [g.name for g in list_gpus()]


def _draw(rng: random.Random, models: list[str], gpus: list[str]) -> dict[str, Any]:
    tp = rng.choice([1, 1, 2, 4, 8])
    ep = rng.choice([1, 1, 1, 2, 4, 8])
    pp = rng.choice([1, 1, 1, 2, 4])
    replicas = rng.choice([1, 1, 2])
    return {
        "model": rng.choice(models), "gpu": rng.choice(gpus),
        "num_gpus": rng.choice([None, tp * ep * pp * replicas]),
        "tp": tp, "ep": ep, "pp": pp, "dp": None,
        "weight_dtype": rng.choice([None, None, "bf16", "fp8"]),
        "fusion": sorted(f for f in FUSIONS if rng.random() < 0.7),
        "overlap_sms": rng.choice([0, 0, 8, 16, 32]),
        "clock_fraction": rng.choice([None, None, 0.6, 0.8, 1.0]),
        "moe_skew": rng.choice([0.0, 0.0, 0.8, 1.5]),
        "kind": rng.choice(["batch", "serving"]),
        "batch": rng.choice([1, 2, 8, 16, 64, 256]) * (1 if rng.random() < 0.8 else 1.37),
        "input_tokens": rng.choice([16, 128, 1024, 4096]),
        "output_tokens": rng.choice([1, 32, 256, 2048]),
    }


def _predict(cfg: dict[str, Any]) -> dict[str, Any]:
    from energylens.hardware import load_gpu

    freq = None
    if cfg["clock_fraction"] is not None:
        freq = cfg["clock_fraction"] * load_gpu(cfg["gpu"]).boost_clock_mhz
    try:
        deployment = Deployment(num_gpus=cfg["num_gpus"], tp=cfg["tp"], ep=cfg["ep"], pp=cfg["pp"],
                                dp=cfg["dp"], weight_dtype=cfg["weight_dtype"],
                                fusion=frozenset(cfg["fusion"]), overlap_sms=cfg["overlap_sms"],
                                freq_mhz=freq, routing=_routing(cfg["moe_skew"]))
        workload = Workload(kind=cfg["kind"], batch=cfg["batch"], input_tokens=cfg["input_tokens"],
                            output_tokens=cfg["output_tokens"])
        result = predict(model=cfg["model"], gpu=cfg["gpu"], deployment=deployment,
                         workload=workload)
    except Exception as exc:  # noqa: BLE001 - a refusal is a recorded outcome too
        return {"error": str(exc)}
    return {"prediction": result.as_dict()}


def _record(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    models, gpus = _names()
    rows, predicted = [], 0
    while predicted < args.n:
        cfg = _draw(rng, models, gpus)
        outcome = _predict(cfg)
        predicted += "prediction" in outcome
        rows.append({"config": cfg, **outcome})
    with open(args.out, "w") as fh:
        json.dump(rows, fh)
    print(f"recorded {predicted} predictions and {len(rows) - predicted} refusals "
          f"over {len(models)} models and {len(gpus)} GPUs -> {args.out}")
    return 0


def _diff(before: Any, after: Any, path: str, out: list[str]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in sorted(set(before) | set(after)):
            _diff(before.get(key), after.get(key), f"{path}.{key}", out)
    elif isinstance(before, float) and isinstance(after, float):
        if not (before == after or (math.isnan(before) and math.isnan(after))):
            out.append(f"{path}: {before!r} -> {after!r}")
    elif before != after:
        out.append(f"{path}: {before!r} -> {after!r}")


def _compare(args: argparse.Namespace) -> int:
    with open(args.file) as fh:
        rows = json.load(fh)
    differences: list[str] = []
    predicted = 0
    for index, row in enumerate(rows):
        now = _predict(row["config"])
        predicted += "prediction" in now
        before = {k: v for k, v in row.items() if k != "config"}
        _diff(json.loads(json.dumps(before)), json.loads(json.dumps(now)), f"row {index}",
              differences)
    for line in differences[:40]:
        print(line)
    print(f"{len(rows)} configurations ({predicted} predicted): "
          f"{len(differences)} differing values")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--out", required=True)
    rec.add_argument("--n", type=int, default=1000)
    rec.add_argument("--seed", type=int, default=7)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("file")
    args = parser.parse_args()
    return _record(args) if args.cmd == "record" else _compare(args)


if __name__ == "__main__":
    sys.exit(main())
