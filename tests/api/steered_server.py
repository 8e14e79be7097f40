"""`python steered_server.py MODEL_DIR TEMPLATE_FILE PORT`: the production app and batching backend
over a tiny model steered to answer :mod:`tests.api.tool_model`'s conversations with tool calls."""

import os
import sys
from pathlib import Path

import uvicorn

from gym.api.app import create_app
from gym.api.tools.parsers import get_tool_parser, parser_for_template
from gym.engine.batching import TransformersBackend
from gym.engine.loading import ModelSource, load_model_and_tokenizer
from tests.api.tool_model import SteeredModel, scripts

if __name__ == "__main__":
    # The steering recognises a conversation from its whole prompt at prefill; with a reused prefix only
    # the new tokens would be prefilled, so prefix reuse (tested in test_backend.py) is off here.
    os.environ["GYM_PREFIX_CACHE_MB"] = "0"
    folder, template_file, port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    model, tokenizer = load_model_and_tokenizer(ModelSource("tools", folder), device="cpu")
    tokenizer.chat_template = template_file.read_text(encoding="utf-8")
    parser = get_tool_parser(parser_for_template(tokenizer.chat_template))
    steered = SteeredModel(model, tokenizer, scripts(tokenizer, parser))
    app = create_app(TransformersBackend(steered, tokenizer, "tools"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
