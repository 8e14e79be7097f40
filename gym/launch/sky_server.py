"""Which SkyPilot API server this process talks to, and whether it remembers jobs across runs.

SkyPilot's SDK sends every call to an API server (sky/server/common.py ``get_server_url``): the URL in
``$SKYPILOT_API_SERVER_ENDPOINT``, else ``api_server.endpoint`` in ~/.sky/config.yaml, else a local server
it starts itself on 127.0.0.1:46580 (port ``$SKYPILOT_API_SERVER_LOCAL_PORT``). A local server keeps its job
table under ~/.sky of the machine it runs on: on a fresh CI runner it starts empty, so a run cannot see,
follow or cancel the managed jobs an earlier run launched (they go on running and billing on the jobs
controller). A team API server, SkyPilot's deployment for teams
(https://docs.skypilot.co/en/latest/reference/api-server/api-server.html), is the same server for
every run. The client authenticates to it with basic auth in the endpoint URL
(``https://user:password@host``; requests sends it as an Authorization header) or with a service-account
token (``$SKYPILOT_SERVICE_ACCOUNT_TOKEN``, ``sky_...``, sent as a Bearer token:
sky/client/service_account_auth.py).

Nothing here imports SkyPilot: the plan (which needs no server) says what a launch would lose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from urllib.parse import urlsplit

ENDPOINT_ENV = "SKYPILOT_API_SERVER_ENDPOINT"
TOKEN_ENV = "SKYPILOT_SERVICE_ACCOUNT_TOKEN"

NO_TEAM_SERVER = (
    f"no team SkyPilot API server is configured (${ENDPOINT_ENV} is not set), so SkyPilot starts a local "
    "server on this runner that forgets its jobs when the runner ends: a later run can neither track nor "
    f"cancel the job this one launches; set {ENDPOINT_ENV} (basic auth in the URL, or "
    f"{TOKEN_ENV}) from repository secrets (docs/action.md)"
)


def drop_empty_endpoint(env: MutableMapping[str, str] | None = None) -> None:
    """An unset repository secret arrives as an empty variable, which SkyPilot would take as the URL ''."""
    env = os.environ if env is None else env
    for name in (ENDPOINT_ENV, TOKEN_ENV):
        if name in env and not env[name].strip():
            del env[name]


def _config_endpoint(env: Mapping[str, str]) -> str:
    path = env.get("SKYPILOT_GLOBAL_CONFIG") or str(
        Path(env.get("HOME") or Path.home()) / ".sky" / "config.yaml"
    )
    try:
        import yaml

        data = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except Exception:  # missing, unreadable or not YAML: SkyPilot itself then says so
        return ""
    server = data.get("api_server") if isinstance(data, dict) else None
    return str(server.get("endpoint") or "") if isinstance(server, dict) else ""


def endpoint(env: Mapping[str, str] | None = None) -> str:
    """The API server URL SkyPilot will use; '' when it falls back to a local server it starts itself."""
    env = os.environ if env is None else env
    return (env.get(ENDPOINT_ENV) or "").strip() or _config_endpoint(env)


def is_team_server(env: Mapping[str, str] | None = None) -> bool:
    """Whether SkyPilot talks to a server somebody configured, which outlives this run: a team API server,
    or a self-hosted runner's own long-lived server named explicitly. Without one the SDK starts a local
    server whose job table, on a fresh runner, starts empty."""
    return bool(endpoint(env))


def credentials(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secrets of the server configuration (the URL's password, the service-account token), by name,
    so messages built from SkyPilot's errors can be scrubbed of them."""
    env = os.environ if env is None else env
    found: dict[str, str] = {}
    try:
        password = urlsplit(endpoint(env)).password
    except ValueError:
        password = None
    if password:
        found[f"{ENDPOINT_ENV} password"] = password
    if env.get(TOKEN_ENV):
        found[TOKEN_ENV] = env[TOKEN_ENV]
    return found


def untracked_sentence(job_id: str, name: str, sha: str) -> str:
    """Why a launch is refused when the job the comment records may still run where nobody can see it."""
    return (
        f"job {job_id} (`{name}`, commit {sha[:12]}) recorded in this pull request's comment is not on this "
        "run's SkyPilot API server, a local one that cannot see jobs launched by earlier runs, so launching "
        f"now could leave it running and billing; set {ENDPOINT_ENV} to a team API server (docs/action.md), "
        "or, once you know that job has ended, delete this comment and apply the label again"
    )
