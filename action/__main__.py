"""``python -m action``: what the composite action's last step runs.

action.yml starts it in the action's own folder (so this package, not a same-named folder of the
repository under test, is imported); the run itself works in the checkout, ``$GITHUB_WORKSPACE``, as
``gym`` resolves the SkyPilot workdir and relative paths from the current directory.
"""

from __future__ import annotations

import os
import sys

from action.main import main

if __name__ == "__main__":
    os.chdir(os.environ.get("GITHUB_WORKSPACE") or ".")
    sys.exit(main())
