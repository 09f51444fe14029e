"""One module per HF model family. Each decorates its builder with
``@hf_builder("<model_type>", ...)``; every module here is imported on first use (names
starting with ``_`` are skipped), so a new family needs no other edit."""
