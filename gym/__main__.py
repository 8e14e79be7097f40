"""``python -m gym``: the CLI, also what `accelerate launch -m gym train` runs on every process."""

from gym.cli import main

main()
