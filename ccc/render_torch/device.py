"""The device the torch backend renders on, from the one flag users give (``--render-device``,
``ccc-render:…,device=``, ``render_stream(device=)``)."""

from __future__ import annotations

import torch

__all__ = ["render_device"]


def render_device(name: str | torch.device) -> torch.device:
    """The torch device named ``name``: ``cpu`` or ``cuda[:index]`` (an available GPU).

    Raises:
        ValueError: in one line, for another device type, a malformed name, or CUDA (or a GPU index)
            this machine does not have.
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"render device must be cpu or cuda[:index], got {name!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"render device must be cpu or cuda[:index], got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"render device {name!r}: CUDA is not available on this machine (use cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"render device {name!r}: this machine has {torch.cuda.device_count()} GPU(s), "
                f"indices 0 to {torch.cuda.device_count() - 1}"
            )
    return device
