"""What the package says about its own limits while it runs: `TrackgenContractWarning`.

A watched call that this package could not analyse (its own error while reading the call
back, or judging it) is judged on what is known, never raised into the user's call, and
named in one warning per call site, pointing at the user's line.
"""

from __future__ import annotations

import threading
import warnings


class TrackgenContractWarning(UserWarning):
    """A call could not be analysed in full; it was judged on what could be read."""


_warned: set[tuple[str, int, str]] = set()
_lock = threading.Lock()


def unanalysed(api: str, filename: str, lineno: int, module: str, error: BaseException) -> None:
    """Warn, once per call site and API, that a call could not be analysed in full."""
    key = (filename, lineno, api)
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    message = (
        f"trackgen_contract could not analyse this call to {api} in full "
        f"({type(error).__name__}: {error}); it was judged on the values it binds"
    )
    warnings.warn_explicit(message, TrackgenContractWarning, filename, lineno, module=module)
