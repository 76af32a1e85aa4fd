"""Installing signal handlers for a while and putting the previous ones back."""

from __future__ import annotations

import signal
import threading
from typing import Callable, Iterable


def handle(names: Iterable[str], handler: Callable) -> dict:
    """Handle the signals named (those this platform has) with ``handler``; returns the
    previous handlers, for :func:`restore`. Nothing off the main thread, where Python cannot
    set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler)
            for sig in (getattr(signal, n) for n in names if hasattr(signal, n))}


def restore(previous: dict) -> None:
    """Put back the handlers :func:`handle` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)
