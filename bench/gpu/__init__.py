"""The pieces of bench/gpu_check.py: model folders, training rows, serving rows."""
