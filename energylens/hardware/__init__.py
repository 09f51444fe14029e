"""Hardware database: GPUs and their links, every number with its provenance."""

from energylens.hardware.database import (
    GPU,
    GPU_DIR,
    GPUDatabase,
    Link,
    Provenance,
    UnknownGPUError,
    default_database,
    list_gpus,
    load_gpu,
    load_gpu_file,
    resolve_gpu_name,
)

__all__ = ["GPU", "GPU_DIR", "GPUDatabase", "Link", "Provenance", "UnknownGPUError",
           "default_database", "list_gpus", "load_gpu", "load_gpu_file", "resolve_gpu_name"]
