"""Gym's CPU-only training speed-ups, all behind ``train.cpu_kernels`` (see docs/cpu-kernels.md).

A GPU node never runs them: it takes PEFT's LoRA layers, transformers' attention, the plain collator and
torch's threads. :func:`gym.model.device.plan_device` decides whether a run uses them; each piece keeps
an equivalence test against that standard path.
"""
