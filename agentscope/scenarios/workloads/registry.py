"""What a scenario is, and the registry that ``@scenario`` fills as each workload module is
imported."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .ctx import Ctx

SCENARIOS: dict = {}


class Unavailable(Exception):
    """This machine cannot produce the scenario (says why)."""


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    expect: str  # the class its tasks are built to have (per task, the truth is measured)
    about: str
    run: Callable[["Ctx"], None]
    # recorded with the counters sampled (under ``agentscope run``); False: spans only, as an
    # agent traced without a collector is
    collect: bool = True
    # its agent starts the model server (services.py), and the recording scrapes that
    # server's vLLM metrics too (``agentscope run --model-server``): the port is chosen
    # before the agent starts and handed down in AGENTSCOPE_MODEL_SERVER_PORT
    model_server: bool = False


def scenario(name: str, expect: str, about: str, collect: bool = True,
             model_server: bool = False) -> Callable:
    def register(fn: Callable[["Ctx"], None]) -> Callable[["Ctx"], None]:
        SCENARIOS[name] = Scenario(name, expect, about, fn, collect, model_server)
        return fn
    return register
