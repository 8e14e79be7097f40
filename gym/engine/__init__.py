"""Gym's serving engine: what turns prompt token ids into generated tokens, behind one small contract.

:mod:`gym.engine.backend` is that contract (:class:`~gym.engine.backend.Backend`) and the registry
`--backend` picks from; the transformers engine (:mod:`~gym.engine.batching`, its running batch, KV and
prefix caches and attention), the vision-language engine, vLLM, SGLang and llama.cpp sit behind it.
The HTTP face (:mod:`gym.api`) imports the engine, never the reverse. Nothing heavy is imported here:
torch and transformers load when a backend is built.
"""
