"""The hardware flavors of Hugging Face Jobs and their hourly price (hf.co/docs/hub/jobs-pricing, read December
2026), here so that `gym validate` can check ``compute.flavor`` without importing the launch layer."""

from __future__ import annotations

# flavor -> (what it is, USD per hour)
FLAVORS: dict[str, tuple[str, float]] = {
    "cpu-basic": ("2 vCPU, 16 GB", 0.01),
    "cpu-upgrade": ("8 vCPU, 32 GB", 0.03),
    "cpu-xl": ("16 vCPU, 124 GB", 1.00),
    "cpu-performance": ("32 vCPU, 256 GB", 1.90),
    "t4-small": ("1x T4 16 GB", 0.40),
    "t4-medium": ("1x T4 16 GB", 0.60),
    "l4x1": ("1x L4 24 GB", 0.80),
    "l4x4": ("4x L4 96 GB", 3.80),
    "a10g-small": ("1x A10G 24 GB", 1.00),
    "a10g-large": ("1x A10G 24 GB", 1.50),
    "a10g-largex2": ("2x A10G 48 GB", 3.00),
    "a10g-largex4": ("4x A10G 96 GB", 5.00),
    "l40sx1": ("1x L40S 48 GB", 1.80),
    "l40sx4": ("4x L40S 192 GB", 8.30),
    "l40sx8": ("8x L40S 384 GB", 23.50),
    "a100-large": ("1x A100 80 GB", 2.50),
    "a100x4": ("4x A100 320 GB", 10.00),
    "a100x8": ("8x A100 640 GB", 20.00),
    "h200": ("1x H200 141 GB", 5.00),
    "h200x2": ("2x H200 282 GB", 10.00),
    "h200x4": ("4x H200 564 GB", 20.00),
    "h200x8": ("8x H200 1128 GB", 40.00),
}
