"""Tool-call conversations for the serving tests, and the answers a model trained on them would write.

The answers are what the chat template itself renders for those assistant turns, i.e. the text a model
fine-tuned on this data with this template emits.
"""

from __future__ import annotations

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, TIME]
ONE = "What is the weather in Paris?"
TWO = "Weather in Rome and in Oslo?"
PLAIN = "Say hello."

# Meta's Llama 3.1 JSON tool convention (tools offered in the first user turn, the reply *is* the JSON
# call with "parameters"), written for these tests; turns end with the tokenizer's EOS (<|eot_id|> in Llama).
LLAMA3_JSON_TEMPLATE = """{{- bos_token or '' }}
{%- for message in messages %}
{%- if message.role == 'user' and loop.first and tools %}
{{- '<|start_header_id|>user<|end_header_id|>\\n\\nGiven the following functions, respond with a JSON for a function call with its proper arguments. Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\\n\\n' }}
{%- for t in tools %}{{- t | tojson(indent=4) + '\\n\\n' }}{%- endfor %}
{{- message.content + eos_token }}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- for call in message.tool_calls %}{{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments | tojson + '}' }}{%- if not loop.last %}{{- '; ' }}{%- endif %}{%- endfor %}
{{- eos_token }}
{%- elif message.role == 'tool' %}
{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content + eos_token }}
{%- else %}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content + eos_token }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""


def _call(name: str, city: str) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": {"city": city}}}


EXAMPLES = [
    (ONE, TOOLS, {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", "Paris")]}),
    (TWO, TOOLS, {"role": "assistant", "content": "",
                  "tool_calls": [_call("get_weather", "Rome"), _call("get_weather", "Oslo")]}),
    (PLAIN, None, {"role": "assistant", "content": "Hello!"}),
]  # fmt: skip


def scripts(tokenizer, parser) -> list[tuple[str, str, list[int]]]:
    """(where the prompt must contain, what it must end with, answer token ids) for each scripted answer.

    Besides :data:`EXAMPLES`, the continuations of a call forced by ``tool_choice`` (the prompt then
    ends inside the call: ``parser.forced_prefix``).
    """
    eos = tokenizer.eos_token
    out = []
    for question, tools, answer in EXAMPLES:
        user = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(user, tools=tools, add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template([*user, answer], tools=tools, tokenize=False)
        text = full[len(prompt) :]
        text = text[: text.index(eos) + len(eos)]  # the answer ends at the end of its turn
        out.append((question, prompt[-12:], tokenizer.encode(text, add_special_tokens=False)))
    close = "\n</tool_call>" if parser.name == "hermes" else ""
    named = parser.forced_prefix("get_time")
    out.append((ONE, named, tokenizer.encode('{"city": "Paris"}}' + close + eos, add_special_tokens=False)))
    required = parser.forced_prefix(None)
    rest = '{"name": "get_time", "arguments": {"city": "Paris"}}' if parser.name == "hermes" else (
        '"get_time", "parameters": {"city": "Paris"}}')  # fmt: skip
    out.append((PLAIN, required, tokenizer.encode(rest + close + eos, add_special_tokens=False)))
    return out


class SteeredModel:
    """A real causal LM whose next-token logits get a large bonus for a scripted answer's next token.

    A deterministic logits processor standing in for fine-tuning: the serving code around it (the
    batching backend, the KV cache, sampling, decoding, tool parsing, the HTTP layer) is the production
    code, unchanged. Rows are matched to their script by prompt (at prefill) and by absolute position
    (at each decode step), so it works inside a batch whose rows join and leave.
    """

    def __init__(self, model, tokenizer, rules: list[tuple[str, str, list[int]]]) -> None:
        self.model, self.tokenizer, self.rules = model, tokenizer, rules
        self.active: list[tuple[int, list[int]]] = []  # (prompt length, script)
        self.config, self.generation_config = model.config, model.generation_config

    def __getattr__(self, name: str):
        """Everything else is the real model's (parameters, embeddings, attention implementation...)."""
        return getattr(self.model, name)

    def __call__(self, input_ids, attention_mask, position_ids, **kwargs):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        )
        for row in range(input_ids.shape[0]):
            token = self._next(row, input_ids, attention_mask, position_ids)
            if token is not None:
                out.logits[row, -1, token] += 1e4
        return out

    def _next(self, row, input_ids, attention_mask, position_ids) -> int | None:
        if input_ids.shape[1] > 1:  # prefill: choose the row's script from its prompt
            prompt = input_ids[row][attention_mask[row, -input_ids.shape[1] :].bool()].tolist()
            text = self.tokenizer.decode(prompt, skip_special_tokens=False)
            matches = [s for where, end, s in self.rules if where in text and text.endswith(end)]
            if not matches:
                return None
            script = matches[0]
            self.active.append((len(prompt), script))
            return script[0]
        position, token = int(position_ids[row, -1]), int(input_ids[row, -1])
        for length, script in reversed(self.active):
            k = position - length
            if 0 <= k < len(script) - 1 and script[k] == token:
                return script[k + 1]
        return None

    def parameters(self):
        return self.model.parameters()

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()
