"""Hardware database: GPUs and their links, every number with its provenance."""

from energylens.hardware.database import (
    GPU,
    Link,
    Provenance,
    UnknownGPUError,
    list_gpus,
    load_gpu,
    load_gpu_file,
    resolve_gpu_name,
)

__all__ = ["GPU", "Link", "Provenance", "UnknownGPUError", "list_gpus", "load_gpu",
           "load_gpu_file", "resolve_gpu_name"]
