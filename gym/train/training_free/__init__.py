"""Training-free GRPO (Tencent Youtu, arXiv 2510.08191): the model stays frozen; a library of experiences learns.

Modules: :mod:`.library` (the library, its operations and atomic files), :mod:`.prompts`,
:mod:`.client` (the OpenAI-compatible policy endpoint), :mod:`.learner` (summaries, group advantage,
operations, consolidation), :mod:`.loop` (epochs and steps) and :mod:`.trainer` (the `gym train` method).
Using a learned library at inference: :mod:`gym.train.experiences`.
"""
