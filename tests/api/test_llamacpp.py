"""`gym serve --backend llamacpp` on a GGUF file, driven by the `openai` client.

The reference is llama.cpp itself: ``Llama(...).generate`` on the same prompt token ids (rendered with
the model's HF chat template, as every Gym backend renders them) must give the server's greedy answer,
alone and with 8 concurrent streams batched into one llama.cpp context, and ``Llama``'s own logits
must give the server's logprobs. The model is a tiny random Qwen2 converted by ``gym export``'s
converter to f16: with Q8_0 weights llama.cpp quantizes activations differently for a one-row and a
multi-row batch (logprobs then move by up to ~0.08 between a stream alone and the same stream batched,
measured), which flips near-tied greedy picks of a random model; in f16 they agree to ~0.005. llama-cpp-python lives in the ``.venv-gguf`` overlay (``make gguf``); without it these
tests skip, and the refusals that need no llama.cpp run anyway.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from tests.api.conftest import REPO, SERVE_MAIN, free_port, server_env, stop, wait_healthy
from tests.api.tool_model import WEATHER

OVERLAY = REPO / ".venv-gguf"
OVERLAY_PY = OVERLAY / "bin" / "python"
needs_overlay = pytest.mark.skipif(
    not (OVERLAY / ".installed").is_file(),
    reason="llama.cpp serving tests need the .venv-gguf overlay with llama-cpp-python: run `make gguf`",
)
QUESTIONS = [f"Question {i}: what comes after {'abcdefgh'[i]}?" for i in range(8)]
MAX_TOKENS = 12

BUILD = """
import shutil, sys, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from gym.export.gguf import convert_to_gguf
tiny, out = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(tiny)
config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, max_position_embeddings=1024,
                     tie_word_embeddings=False, initializer_range=0.3, eos_token_id=tokenizer.eos_token_id)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config)
hf = out / "hf"
model.save_pretrained(hf)
tokenizer.save_pretrained(hf)
convert_to_gguf(hf, out / "served" / "model-f16.gguf", "f16")
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (hf / name).is_file():
        shutil.copy(hf / name, out / "served" / name)
"""

# A bigram model (attention and MLP outputs zeroed, so each step sees only its input token's embedding)
# whose output rows make the generation prompt's last token predict one added token holding a whole
# hermes tool call, and that token predict EOS: what a model fine-tuned to call get_weather answers.
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS_BUILD = """import shutil, sys, torch
from pathlib import Path
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from gym.data.templates.registry import TEMPLATES
from gym.export.gguf import convert_to_gguf
tiny, out, call = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tokenizer = AutoTokenizer.from_pretrained(tiny)
tokenizer.add_tokens([call])
tokenizer.chat_template = TEMPLATES["qwen3"].jinja
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tools=tools, add_generation_prompt=True, tokenize=False)
last = tokenizer.encode(text, add_special_tokens=False)[-1]
call_id, eos = tokenizer.convert_tokens_to_ids(call), tokenizer.eos_token_id
config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, max_position_embeddings=2048,
                     tie_word_embeddings=False, eos_token_id=eos)
torch.manual_seed(0)
model = Qwen2ForCausalLM(config)
with torch.no_grad():  # a bigram model: the residual stream is the token's embedding
    embed = torch.randn(len(tokenizer), 64)
    model.model.embed_tokens.weight.copy_(embed)
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    head = torch.zeros_like(model.lm_head.weight)
    head[call_id], head[eos] = embed[last], embed[call_id]
    model.lm_head.weight.copy_(head)
hf = out / "hf"
model.save_pretrained(hf)
tokenizer.save_pretrained(hf)
convert_to_gguf(hf, out / "served" / "model-f16.gguf", "f16")
for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
    if (hf / name).is_file():
        shutil.copy(hf / name, out / "served" / name)
"""

REFERENCE = """
import json, sys
import numpy as np
from llama_cpp import Llama
path, prompts, max_tokens, eos = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), set(json.loads(sys.argv[4]))
llm = Llama(path, n_ctx=512, logits_all=True, flash_attn=True, verbose=False)
answers = []
for prompt in prompts:
    llm.reset()
    tokens = []
    for token in llm.generate(prompt, temp=0.0, top_k=1):
        if token in eos or len(tokens) == max_tokens:
            break
        tokens.append(token)
    scores = np.asarray(llm.scores[len(prompt) - 1 : len(prompt) - 1 + len(tokens)], dtype=np.float64)
    logprobs = scores - np.log(np.exp(scores - scores.max(-1, keepdims=True)).sum(-1, keepdims=True)) - scores.max(-1, keepdims=True)
    answers.append({"tokens": tokens, "logprobs": [float(logprobs[i, t]) for i, t in enumerate(tokens)]})
llm.close()
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def gguf_model(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``model-f16.gguf`` and the HF tokenizer it was converted with."""
    if not (OVERLAY / ".installed").is_file():
        pytest.skip(
            "llama.cpp serving tests need the .venv-gguf overlay with llama-cpp-python: run `make gguf`"
        )
    out = tmp_path_factory.mktemp("gguf")
    subprocess.run([str(OVERLAY_PY), "-c", BUILD, str(tiny_dir), str(out)], check=True, cwd=REPO)
    return out / "served"


@pytest.fixture(scope="module")
def llama_server(gguf_model: Path, cache_root: Path) -> Iterator[openai.OpenAI]:
    args = [str(gguf_model), "--backend", "llamacpp", "--max-batch-size", "8"]
    url, process = start_server_in_overlay(args, cache_root)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    client.health_url = url + "/health"  # type: ignore[attr-defined]
    yield client
    stop(process)


@pytest.fixture(scope="module")
def tool_server(
    tiny_dir: Path, cache_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[openai.OpenAI]:
    if not (OVERLAY / ".installed").is_file():
        pytest.skip(
            "llama.cpp serving tests need the .venv-gguf overlay with llama-cpp-python: run `make gguf`"
        )
    out = tmp_path_factory.mktemp("gguf-tools")
    subprocess.run([str(OVERLAY_PY), "-c", TOOLS_BUILD, str(tiny_dir), str(out), CALL], check=True, cwd=REPO)
    url, process = start_server_in_overlay([str(out / "served"), "--backend", "llamacpp"], cache_root)
    yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    stop(process)


def start_server_in_overlay(args: list[str], cache_root: Path) -> tuple[str, subprocess.Popen]:
    """The same `gym serve` launcher as the other serving tests, run by the overlay's interpreter."""
    port = free_port()
    process = subprocess.Popen(
        [str(OVERLAY_PY), str(SERVE_MAIN), "serve", *args, "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO, env=server_env(cache_root), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except Exception:
        stop(process)
        raise
    return url, process


def prompt_ids(tokenizer_dir: Path, question: str) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=False)  # fmt: skip
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.fixture(scope="module")
def reference(gguf_model: Path) -> list[dict]:
    """llama.cpp's own greedy answers (token ids and their logprobs) to :data:`QUESTIONS`."""
    from transformers import AutoTokenizer

    eos = [AutoTokenizer.from_pretrained(gguf_model).eos_token_id]
    prompts = [prompt_ids(gguf_model, q) for q in QUESTIONS]
    done = subprocess.run(
        [str(OVERLAY_PY), "-c", REFERENCE, str(gguf_model / "model-f16.gguf"), json.dumps(prompts),
         str(MAX_TOKENS), json.dumps(eos)],
        check=True, capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def ask(client: openai.OpenAI, question: str, stream: bool = False, **extra) -> str:
    body = dict(model="served", messages=[{"role": "user", "content": question}], temperature=0,
                max_tokens=MAX_TOKENS, **extra)  # fmt: skip
    if stream:
        return "".join(
            c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **body)
        )
    return client.chat.completions.create(**body).choices[0].message.content


@pytest.mark.slow
@needs_overlay
def test_greedy_answers_are_llama_cpps_own_alone_and_in_8_concurrent_streams(
    llama_server: openai.OpenAI, reference: list[dict], gguf_model: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_model)
    expected = [tokenizer.decode(r["tokens"], skip_special_tokens=True) for r in reference]
    assert len(set(expected)) > 4, "the random model should answer the questions differently"
    alone = [ask(llama_server, q) for q in QUESTIONS]
    assert alone == expected
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda q: ask(llama_server, q, stream=True), QUESTIONS))
    assert together == expected
    stats = httpx.get(llama_server.health_url).json()  # type: ignore[attr-defined]
    assert stats["backend"] == "llamacpp" and stats["max_batch_size"] > 1, stats  # batched, not queued


@pytest.mark.slow
@needs_overlay
def test_logprobs_are_llama_cpps_own(llama_server: openai.OpenAI, reference: list[dict]) -> None:
    answer = llama_server.chat.completions.create(
        model="served", messages=[{"role": "user", "content": QUESTIONS[0]}], temperature=0,
        max_tokens=MAX_TOKENS, logprobs=True, top_logprobs=3,
    )  # fmt: skip
    content = answer.choices[0].logprobs.content
    expected = reference[0]["logprobs"]
    assert [round(t.logprob, 2) for t in content] == pytest.approx([round(x, 2) for x in expected], abs=0.02)
    assert sum(t.logprob for t in content) == pytest.approx(sum(expected), abs=0.05)
    for token in content:  # greedy: the chosen token is the likeliest
        assert token.top_logprobs[0].logprob == pytest.approx(token.logprob)


@pytest.mark.slow
@needs_overlay
def test_an_image_part_is_refused_with_one_sentence(llama_server: openai.OpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with pytest.raises(openai.BadRequestError) as refused:
        llama_server.chat.completions.create(
            model="served", max_tokens=4,
            messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}],
        )  # fmt: skip
    assert refused.value.body["message"] == (
        "messages[0].content[1]: this model reads text only; a 'image_url' part cannot be served "
        "(send text parts, or serve a vision-language model)."
    )


@pytest.mark.slow
@needs_overlay
def test_a_tool_call_is_parsed_from_llama_cpps_answer(tool_server: openai.OpenAI) -> None:
    body = dict(model="served", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                tools=[WEATHER], temperature=0, max_tokens=20)  # fmt: skip
    answer = tool_server.chat.completions.create(**body).choices[0]
    assert answer.finish_reason == "tool_calls" and not answer.message.content
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in answer.message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"})]
    streamed = {"name": "", "arguments": ""}
    for chunk in tool_server.chat.completions.create(stream=True, **body):
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            streamed["name"] += call.function.name or ""
            streamed["arguments"] += call.function.arguments or ""
    assert (streamed["name"], json.loads(streamed["arguments"])) == calls[0]


def test_a_folder_without_a_gguf_file_is_one_sentence(tiny_dir: Path, cache_root: Path) -> None:
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), str(SERVE_MAIN), "serve", str(tiny_dir), "--backend", "llamacpp"],
        capture_output=True, text=True, env=server_env(cache_root), cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"error: cannot load {tiny_dir}: {tiny_dir} holds no .gguf file; write one with `gym export --gguf`"
    )


@needs_overlay
def test_the_overlay_has_its_own_gym_command(tmp_path: Path) -> None:
    """`make gguf` gives .venv-gguf a `gym` (pyproject's console script) that sees llama-cpp-python."""
    done = subprocess.run([str(OVERLAY / "bin" / "gym"), "serve", "--help"], capture_output=True, text=True,
                          timeout=120, env=server_env(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "llamacpp" in done.stdout
