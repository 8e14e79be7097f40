"""The candidates' answers: generated through Gym's own serving app, and recorded in ``judge_answers.jsonl``.

The tuned model and its base answer every prompt through the app `gym serve` runs (the same model
resolution, engine and chat template), called in process through the ``openai`` client; the app's
factory is handed down by the command (`gym eval`, `gym launch`), which sits above the eval layer. The
settings are fixed by ``[eval.judge.generation]`` and recorded.

The tuned model's answers are written to ``judge_answers.jsonl`` beside ``eval_results.json`` and pushed
with the model: when this model is the champion, a later run is judged against these answers without
loading its weights. The file's first line holds the generation settings; every other line
``{"key": <prompt hash>, "answer": <text>}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gym.eval.errors import EvalError
from gym.eval.judge.items import JudgeItem

ANSWERS_FILE = "judge_answers.jsonl"
MAX_ANSWERS_BYTES = 20_000_000
REQUEST_TIMEOUT = 600.0
CONCURRENCY = 16


def generate_answers(
    serve_local: Callable[..., Any] | None, model: str, items: list[JudgeItem], generation: dict[str, Any],
    label: str,
) -> list[str]:  # fmt: skip
    """Each item's answer by ``model`` (a folder, builtin:NAME or Hub id); EvalError (one sentence) if it fails."""
    if serve_local is None:
        raise EvalError(
            "eval.judge needs the models' answers from Gym's serving app; run `gym eval` or `gym launch`"
        )
    import openai

    from gym.train.training_free.client import open_local

    try:
        client, model_id, closer = open_local(model, REQUEST_TIMEOUT, serve_local)
    except (OSError, ValueError, RuntimeError) as error:
        from gym.failures import first_line

        raise EvalError(
            f"cannot load the {label} model {model} to answer the judge's prompts: {first_line(error)}"
        ) from None

    async def answer_all() -> list[str]:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(item: JudgeItem) -> str:
            async with gate:
                response = await client.chat.completions.create(
                    model=model_id, messages=item.messages, temperature=generation["temperature"],
                    max_tokens=generation["max_tokens"], seed=generation["seed"],
                )  # fmt: skip
            return (response.choices[0].message.content or "") if response.choices else ""

        try:
            return list(await asyncio.gather(*(one(item) for item in items)))
        finally:
            await client.close()

    try:
        return asyncio.run(answer_all())
    except openai.APIStatusError as error:
        raise EvalError(
            f"the {label} model {model} could not answer a judge prompt (HTTP {error.status_code}: "
            f"{str(error.message)[:200]}); check eval.judge.prompts and eval.judge.generation.max_tokens"
        ) from None
    finally:
        closer()


def write_answers(
    folder: Path, items: list[JudgeItem], answers: list[str], generation: dict[str, Any]
) -> Path:
    path = folder / ANSWERS_FILE
    lines = [json.dumps({"format": 1, "generation": generation})]
    lines += [json.dumps({"key": item.key, "answer": answer}, ensure_ascii=False)
              for item, answer in zip(items, answers, strict=True)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def parse_answers(data: bytes | str, where: str) -> tuple[dict[str, str], dict[str, Any]]:
    """``({prompt key: answer}, generation settings)`` of a judge_answers.jsonl; ValueError naming ``where``."""
    if len(data) > MAX_ANSWERS_BYTES:
        raise ValueError(f"{where} is more than {MAX_ANSWERS_BYTES:,} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    answers: dict[str, str] = {}
    generation: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            raise ValueError(f"{where} line {number} is not JSON") from None
        if isinstance(row, dict) and isinstance(row.get("generation"), dict):
            generation = row["generation"]
        elif isinstance(row, dict) and isinstance(row.get("key"), str) and isinstance(row.get("answer"), str):
            answers[row["key"]] = row["answer"]
        else:
            raise ValueError(f"{where} line {number} is not a judge answer ({{'key', 'answer'}})")
    return answers, generation


def read_answers(folder: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """This run's recorded answers; EvalError when `gym eval` has not written them."""
    path = folder / ANSWERS_FILE
    try:
        return parse_answers(path.read_bytes(), str(path))
    except OSError:
        raise EvalError(f"{path} is missing: run `gym eval` with [eval.judge] first") from None
    except ValueError as error:
        raise EvalError(f"{error}; run `gym eval` again to rewrite it") from None
