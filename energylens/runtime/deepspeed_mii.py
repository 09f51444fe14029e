"""DeepSpeed-MII (DeepSpeed-FastGen): 16-bit weights, tensor parallelism and replicas.

It is started from Python (``mii.serve``), so its launch "flags" are the keyword
arguments of ``mii.serve`` its facts file lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from energylens.runtime.launch import PORT, LaunchCommand, LaunchSpec
from energylens.runtime.profile import RuntimeProfile, load_facts
from energylens.runtime.registry import register


def _python(value: object) -> str:
    """A Python literal in double quotes (the shell line quotes the code in single ones)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


@dataclass(frozen=True, kw_only=True, eq=False)
class DeepSpeedMII(RuntimeProfile):
    """``mii.serve(...)`` with a RESTful endpoint; replicas through ``replica_num``."""

    def launch(self, *, spec: LaunchSpec) -> LaunchCommand:
        """``python -c "import mii; mii.serve('MODEL', tensor_parallel=..., ...)"``."""
        d, f = spec.deployment, self.flag
        kwargs = {f("deployment_name"): "energylens", f("tensor_parallel"): d.tp,
                  f("replica_num"): d.replicas, f("max_length"): spec.max_model_len,
                  f("enable_restful_api"): True, f("restful_api_port"): PORT}
        call = ", ".join([_python(spec.model_id), *(f"{k}={_python(v)}" for k, v in kwargs.items())])
        return LaunchCommand(argv=("python", "-c", f"import mii; mii.serve({call})"),
                             gpus_per_server=d.total_gpus)


register(DeepSpeedMII(**load_facts("deepspeed-mii")))
