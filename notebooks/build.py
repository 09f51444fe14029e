"""Build and execute ``notebooks/paper_findings.ipynb`` (needs the ``notebooks`` extra).

Usage: ``pip install -e '.[notebooks]' && python notebooks/build.py``. The notebook is
written from the cells below and executed in place, so the committed copy carries the
outputs of the code it shows.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent

CELLS: list[tuple[str, str]] = [
    ("markdown", """# Reproducing the EnergyLens paper's findings with the calibrated model

Every number below is a prediction of `energylens` with the shipped calibration
(`energylens/data/calibration.yaml`), not a measurement. The paper (EnergyLens, 2026)
reports up to **1.47x** (prefill) and **52.9x** (decode) energy spread across deployment
configurations, and Pareto-optimal compute-communication overlap settings that intuition
misses. We check the same questions on Llama-3.1-70B and Qwen3-30B-A3B on H100."""),
    ("code", """import itertools
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
from energylens.cost.moe import Routing
from energylens.deployment import Deployment, Workload
from energylens.predict import predict

def row(model, gpu, dep, wl):
    p = predict(model=model, gpu=gpu, deployment=dep, workload=wl)
    return dict(feasible=p.feasible, ttft_s=p.ttft_s, tpot_s=p.tpot_s,
                prefill_j_per_token=p.prefill.energy_j / (wl.batch * wl.input_tokens),
                decode_j_per_token=p.decode.energy_j / (wl.batch * (wl.output_tokens - 1)),
                energy_per_output_token_j=p.energy_per_output_token_j)"""),
    ("markdown", """## 1. Energy spread across configurations (prefill vs decode)

Llama-3.1-70B, 1,024-token prompts, 256 output tokens; TP x batch x clock x fusion on
H100 nodes. The spread is max/min of energy per token over the feasible configurations."""),
    ("code", """rows = []
for tp, batch, clock, fused in itertools.product([2, 4, 8], [1, 4, 16, 64], [0.6, 0.8, 1.0], [True, False]):
    dep = Deployment(tp=tp, freq_mhz=clock * 1980,
                     fusion=Deployment().fusion if fused else frozenset())
    r = row("llama-3.1-70b", "H100", dep, Workload(batch=batch, input_tokens=1024, output_tokens=256))
    rows.append(dict(tp=tp, batch=batch, clock=clock, fused=fused, **r))
grid = pd.DataFrame(rows)
ok = grid[grid.feasible]
spread = {phase: ok[phase].max() / ok[phase].min()
          for phase in ("prefill_j_per_token", "decode_j_per_token")}
print(f"{len(ok)} feasible of {len(grid)}; spread prefill {spread['prefill_j_per_token']:.2f}x, "
      f"decode {spread['decode_j_per_token']:.1f}x")
ok.sort_values("decode_j_per_token").head(5)"""),
    ("markdown", """As in the paper, decode spreads far more than prefill (compare the printed spreads
with the paper's 1.47x and 52.9x; the spaces differ). Prefill is compute-bound at every batch,
so its energy per token is set by FLOPs; decode energy per token falls roughly as 1/batch
while weights are re-read every step, and static power is paid by every GPU of a wide
TP group. Batch size is the dominant lever (ML.ENERGY also reports 3-5x from batch)."""),
    ("markdown", "## 2. Overlap SM allocation: interior Pareto-optimal settings"),
    ("code", """rows = []
for tp in (4, 8):
    for sms in range(0, 66, 2):
        p = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=tp, overlap_sms=sms),
                    workload=Workload(batch=8, input_tokens=4096, output_tokens=1))
        rows.append(dict(tp=tp, sms=sms, energy_j=p.prefill.energy_j, ttft_s=p.ttft_s))
ov = pd.DataFrame(rows)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for tp, g in ov.groupby("tp"):
    axes[0].plot(g.sms, g.energy_j / 1e3, marker=".", label=f"TP{tp}")
    axes[1].plot(g.ttft_s, g.energy_j / 1e3, marker=".", label=f"TP{tp}")
axes[0].set(xlabel="SMs given to communication", ylabel="prefill energy [kJ]")
axes[1].set(xlabel="TTFT [s]", ylabel="prefill energy [kJ]")
axes[0].legend(); plt.tight_layout(); plt.show()
print(ov.loc[ov.groupby("tp").energy_j.idxmin()])"""),
    ("markdown", """Too few SMs starve the collective (exposed communication, static power of all
GPUs waiting); too many slow the GEMMs they overlap. The energy-optimal count is
interior, and it is not the same as the no-overlap default."""),
    ("markdown", "## 3. GPU clock: decode is memory-bound"),
    ("code", """rows = []
for clock in (0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
    p = predict(model="llama-3.1-70b", gpu="H100", deployment=Deployment(tp=4, freq_mhz=clock * 1980),
                workload=Workload(batch=16, input_tokens=1024, output_tokens=512))
    rows.append(dict(clock=clock, ttft_s=p.ttft_s, tpot_s=p.tpot_s,
                     prefill_kj=p.prefill.energy_j / 1e3, decode_kj=p.decode.energy_j / 1e3))
dvfs = pd.DataFrame(rows)
base = dvfs.iloc[-1]
dvfs["decode_energy_vs_boost"] = dvfs.decode_kj / base.decode_kj - 1
dvfs["tpot_vs_boost"] = dvfs.tpot_s / base.tpot_s - 1
dvfs["ttft_vs_boost"] = dvfs.ttft_s / base.ttft_s - 1
dvfs.round(3)"""),
    ("markdown", """Lowering the clock saves decode energy at a small TPOT cost while prefill slows
almost in proportion: a per-phase clock (the `dvfs` study) is worth having."""),
    ("markdown", "## 4. MoE: expert parallelism, replicas and routing skew (Qwen3-30B-A3B, serving)"),
    ("code", """rows = []
for label, dep in [("TP8", Deployment(tp=8)), ("EP8", Deployment(ep=8, num_gpus=8)),
                   ("8 replicas", Deployment(num_gpus=8)), ("TP2 x 4 replicas", Deployment(tp=2, num_gpus=8))]:
    for skew in (0.0, 1.0):
        d = replace(dep, routing=Routing(kind="zipf", skew=skew) if skew else Routing())
        p = predict(model="qwen3-30b-a3b", gpu="H100", deployment=d,
                    workload=Workload(kind="serving", batch=256, input_tokens=1024, output_tokens=512))
        rows.append(dict(layout=label, zipf_skew=skew, itl_ms=p.tpot_s * 1e3,
                         j_per_token=p.energy_per_output_token_j, tokens_per_s=p.output_tokens_per_s))
pd.DataFrame(rows).round(3)"""),
    ("markdown", """Read the table above: EP splits expert weights so each GPU reads fewer bytes per
step than TP or full replicas, but pays the combine and waits for the most-loaded rank,
so routing skew slows it. Without EP (replicas, TP) skew does the opposite: a skewed
router activates fewer distinct experts per step, so a memory-bound decode reads fewer
expert weights (the METRO observation, arXiv 2512.09277). Which layout wins depends on
batch and skew, which is why the `qwen3_*_moe` studies search it."""),
    ("markdown", "## 5. More GPUs at equal batch (ML.ENERGY: +energy per token in 93 % of cases)"),
    ("code", """rows = []
for model in ("llama-3.1-8b", "qwen3-32b", "llama-3.1-70b"):
    for batch in (8, 64, 256):
        e = {}
        for tp in (1, 2, 4, 8):
            p = predict(model=model, gpu="H100", deployment=Deployment(tp=tp),
                        workload=Workload(kind="serving", batch=batch, input_tokens=1024, output_tokens=512))
            if p.feasible:
                e[tp] = p.energy_per_output_token_j
        pairs = list(zip(sorted(e)[:-1], sorted(e)[1:]))
        rows += [dict(model=model, batch=batch, tp_from=a, tp_to=b, higher=e[b] > e[a]) for a, b in pairs]
more = pd.DataFrame(rows)
print(f"doubling GPUs at equal batch raised energy per token in {more.higher.mean():.0%} of {len(more)} cases")"""),
]


def main() -> None:
    notebook = nbformat.v4.new_notebook()
    for number, (kind, source) in enumerate(CELLS):
        maker = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        notebook.cells.append(maker(source, id=f"cell-{number}"))
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in notebook.cells:  # run times: a rebuild with the same outputs leaves no diff
        cell.metadata.pop("execution", None)
    target = HERE / "paper_findings.ipynb"
    nbformat.write(notebook, target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
