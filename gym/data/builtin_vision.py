"""The built-in colour task: which colour is the drawn figure? A task builtin:tiny-vl learns in seconds.

Each row is an mllm_demo-style conversation (``<image>What colour is the shape?`` -> ``red``) with one
PNG: a filled circle or square of one of :data:`COLOURS` at a random place and size on a light,
randomly tinted background. Train and test images come from separate random streams (and a test
image is drawn with a different seed space), so scores on ``test`` measure what the model sees, not
what it remembers. The answer can only come from the image: the text is the same in every row.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Literal

Split = Literal["train", "test"]
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (235, 215, 20),
}
QUESTION = "What colour is the shape?"
IMAGE_SIZE = 48


def draw(colour: str, rng: random.Random) -> object:
    """One image: a filled circle or square of ``colour`` on a light background."""
    from PIL import Image, ImageDraw

    shade = rng.randint(200, 250)
    background = tuple(min(255, shade + rng.randint(-15, 5)) for _ in range(3))
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), background)
    pen = ImageDraw.Draw(image)
    side = rng.randint(IMAGE_SIZE // 3, IMAGE_SIZE * 2 // 3)
    x, y = rng.randint(0, IMAGE_SIZE - side), rng.randint(0, IMAGE_SIZE - side)
    fill = tuple(max(0, min(255, c + rng.randint(-20, 20))) for c in COLOURS[colour])
    box = (x, y, x + side, y + side)
    (pen.ellipse if rng.random() < 0.5 else pen.rectangle)(box, fill=fill)
    return image


def colour_rows(folder: Path, split: Split = "train", n: int = 800, seed: int = 0) -> list[dict]:
    """``n`` rows of ``split`` with their images written under ``folder/images/``; paths are relative."""
    if split not in ("train", "test"):
        raise ValueError(f"expected split 'train' or 'test', got {split!r}")
    rng = random.Random(f"gym-colour:{split}:{seed}")
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    names = list(COLOURS)
    rows = []
    for index in range(n):
        colour = names[index % len(names)] if split == "test" else rng.choice(names)
        name = f"{split}-{index:05d}.png"
        draw(colour, rng).save(images / name)  # type: ignore[attr-defined]
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"<image>{QUESTION}"},
                    {"role": "assistant", "content": colour},
                ],
                "images": [f"images/{name}"],
            }
        )
    return rows


def write_colour_dataset(
    folder: str | Path, n_train: int = 800, n_test: int = 100, seed: int = 0
) -> dict[str, Path]:
    """``train.jsonl`` and ``test.jsonl`` (with ``images/``) in ``folder``; returns their paths."""
    folder = Path(folder)
    paths = {}
    for split, n in (("train", n_train), ("test", n_test)):
        path = folder / f"{split}.jsonl"
        rows = colour_rows(folder, split, n, seed)  # type: ignore[arg-type]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        paths[split] = path
    return paths


def main(argv: list[str] | None = None) -> None:
    """``python -m gym.data.builtin_vision FOLDER [N_TRAIN] [N_TEST]``: write the colour dataset."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: python -m gym.data.builtin_vision FOLDER [N_TRAIN] [N_TEST]")
    counts = [int(a) for a in args[1:3]]
    paths = write_colour_dataset(args[0], *counts)
    print(f"wrote {paths['train']} and {paths['test']} (images in {Path(args[0]) / 'images'})")


if __name__ == "__main__":
    main()
