"""Stage implementations, one module per pipeline stage (each a dependency of its DVC stage)."""
