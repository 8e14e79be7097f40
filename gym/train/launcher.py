"""`gym train --nproc N`: N ranks on this machine through torch's elastic launcher (torchrun).

``accelerate launch --num_processes N`` starts one process on a machine without GPUs (it expects mpirun
for CPU ranks), so Gym starts the ranks with ``torch.distributed.run`` itself, as the cloud nodes do:
each rank gets RANK / WORLD_SIZE / LOCAL_RANK, accelerate joins them (gloo on CPU, NCCL on GPUs). When a
rank dies, torchrun stops the others; Gym turns its report into one sentence naming the rank.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

PEER_LOST = 75  # a rank's exit code when a collective failed because another rank went away
TORCHRUN_LOGGERS = ("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")


def torchrun_arguments(nproc: int, gym_args: list[str]) -> list[str]:
    """The torchrun command line (after ``torchrun``) that runs ``gym <gym_args>`` on ``nproc`` local ranks."""
    return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc), "--module", "gym", *gym_args]


def lost_a_peer(error: BaseException) -> bool:
    """A collective (gloo/NCCL) failed because another rank died: that rank is the one to report."""
    import torch.distributed

    text = str(error)
    return isinstance(error, torch.distributed.DistError) or (
        "/gloo/transport/" in text and ("peer" in text or "Connection" in text)
    )


def first_real_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """The rank that failed on its own. torchrun also lists the ranks it stopped afterwards (SIGTERM,
    within the same second), and ranks that only lost a peer exit with PEER_LOST: those come last."""
    stopped = (PEER_LOST, -signal.SIGTERM)
    return min(failures.items(), key=lambda item: (item[1].exitcode in stopped, item[1].timestamp, item[0]))


def failure_sentence(rank: int, failure: object, world_size: int) -> str:
    """``gym train: rank 1 of 2 was killed by SIGKILL; the other ranks were stopped``."""
    exitcode = int(getattr(failure, "exitcode", 1))
    if exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with code {exitcode}"
    others = "; the other ranks were stopped" if world_size > 1 else ""
    return f"gym train: rank {rank} of {world_size} {how}{others}"


def launch_ranks(nproc: int, gym_args: list[str], report: object) -> int:
    """Run ``gym <gym_args>`` on ``nproc`` ranks; the exit code (0 when every rank finished).

    ``report`` prints the one sentence naming the rank that failed first.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    for name in TORCHRUN_LOGGERS:  # its restart/rendezvous chatter and error tables: Gym reports itself
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(torchrun_arguments(nproc, gym_args)))
    except ChildFailedError as error:
        report(failure_sentence(*first_real_failure(error.failures), nproc))  # type: ignore[operator]
        return 1
    except SignalException as error:  # the launcher was stopped; torchrun has stopped the ranks
        return 128 + int(error.sigval)
    return 0
