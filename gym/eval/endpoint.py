"""Scoring a model behind an OpenAI-compatible chat endpoint: the policy of a training-free GRPO run.

A training-free run learns its library against ``train.grpo.api_base``; `gym eval --experiences` must
score that same policy, with the library and without it, not the local model. lm-eval's
``local-chat-completions`` client sends each request as chat messages (the library rides in the system
prompt exactly as `gym serve --experiences` puts it), so only generation tasks can run: loglikelihood
tasks need token log-probabilities of given continuations, which chat endpoints do not return.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError

if TYPE_CHECKING:
    from gym.config.root import GymConfig
    from gym.eval.tasks import LoadedTask

GENERATION = "generate_until"


def _output_types(task: LoadedTask) -> set[str]:
    from lm_eval.api.group import Group

    leaves = list(task.obj.get_all_tasks()) if isinstance(task.obj, Group) else (
        task.obj if isinstance(task.obj, list) else [task.obj]
    )  # fmt: skip
    return {leaf.config.output_type for leaf in leaves}


def endpoint_lm(config: GymConfig, loaded: list[LoadedTask]) -> tuple[Any, str]:
    """lm-eval's chat-completions model for ``train.grpo.api_base`` and the model id it serves.

    EvalError (one sentence) for a task that is not a generation task, or an unset key variable.
    """
    from lm_eval.models.openai_completions import LocalChatCompletion

    from gym.train.training_free.client import open_endpoint, served_model
    from gym.train.training_free.trainer import api_key

    grpo = config.train.grpo
    for task in loaded:
        kinds = _output_types(task) - {GENERATION}
        if kinds:
            raise EvalError(
                f"{task.spec.requested} is a {'/'.join(sorted(kinds))} task; the policy at train.grpo.api_base "
                "is a chat endpoint, which can only be scored on generation tasks (e.g. gym_reverse, gsm8k)"
            )
    try:
        key = api_key(config)
    except ValueError as error:
        raise EvalError(str(error)) from None

    async def model_id() -> str:
        client = open_endpoint(grpo.api_base, key, grpo.request_timeout)
        try:
            return await served_model(client, config.model.name_or_path)
        finally:
            await client.close()

    model = asyncio.run(model_id())
    lm = LocalChatCompletion(
        model=model,
        base_url=grpo.api_base.rstrip("/") + "/chat/completions",
        header={"Authorization": f"Bearer {key}"} if key else {},
        timeout=int(grpo.request_timeout),
        max_retries=3,
    )
    return lm, f"{model} at {grpo.api_base}"
