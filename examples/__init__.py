"""Recipes for real third-party architectures: run them from the repository root, e.g.
``gpulab train examples.hf_causal_lm:build``. gpulab itself never imports these libraries."""
