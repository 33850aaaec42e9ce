"""The one place where fish_core imports a sibling package of the pack (``quant``).

The repository root holds ``fish_core/`` and ``quant/`` side by side and is used two ways:

- inside ComfyUI the root is itself a package (``custom_nodes/<pack>``), so ours are
  ``<pack>.fish_core`` and ``<pack>.quant`` and ``quant`` must be reached relatively;
- for the CLI, tests and benches the root is on ``sys.path``, so both are top-level.

Modules of fish_core write ``from ..loading.siblings import quant``. quant never imports
fish_core.
"""

if __package__.count(".") >= 2:  # "<pack>.fish_core.loading": inside ComfyUI
    from ... import quant
else:  # "fish_core.loading": the repository root is on sys.path
    import quant

__all__ = ["quant"]
