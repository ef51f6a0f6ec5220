"""What the package says about its own limits while it runs: `TrackgenContractWarning`.

A watched call that this package could not analyse (its own error while reading the call
back, or judging it) is judged on what is known, never raised into the user's call, and
named in one warning per call site, pointing at the user's line.
"""

from __future__ import annotations

import warnings


class TrackgenContractWarning(UserWarning):
    """A call could not be analysed in full; it was judged on what could be read."""


# Call site and API -> the mark of the call that warned. No lock (see `tracer.collector`):
# a Ctrl-C landing as a ``with`` block acquires one can leave it held, and the next
# unanalysed call in any thread would wait for good. `setdefault` is one C-level step.
_warned: dict[tuple[str, int, str], object] = {}


def unanalysed(api: str, filename: str, lineno: int, module: str, error: BaseException) -> None:
    """Warn, once per call site and API, that a call could not be analysed in full."""
    mark = object()
    if _warned.setdefault((filename, lineno, api), mark) is not mark:
        return
    message = (
        f"trackgen_contract could not analyse this call to {api} in full "
        f"({type(error).__name__}: {error}); it was judged on the values it binds"
    )
    warnings.warn_explicit(message, TrackgenContractWarning, filename, lineno, module=module)
