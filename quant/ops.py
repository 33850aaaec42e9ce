"""``torch.ops.sailfish.<name>``: each of the pack's custom ops defined once per process.

The pack may be imported under two package names in one process (ComfyUI's ``custom_nodes``
name and a top-level one; the tests import it both ways). Defining an op a second time
replaces the first definition in the dispatcher, and every handle the first module holds on it
then points at freed memory: a later call reads garbage (seen in CI as ``ValueError:
vector::reserve``). So a name already defined is looked up, never defined again: both copies
call the first one's kernel (the same source).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def custom_op(name: str, run: Callable, fake: Callable, mutates_args: tuple[str, ...] = ()):
    """The op packet ``torch.ops.sailfish.<name>``, defined from ``run`` (its fake tensor
    function ``fake``) only where this process has no op of that name yet."""
    try:
        return getattr(torch.ops.sailfish, name)
    except (AttributeError, RuntimeError):
        pass
    op = torch.library.custom_op(f"sailfish::{name}", run, mutates_args=mutates_args)
    op.register_fake(fake)
    return getattr(torch.ops.sailfish, name)
