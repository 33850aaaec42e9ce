"""The one place where fish_core imports a sibling package of the pack (``quant``).

The repository root holds ``fish_core/`` and ``quant/`` side by side and is used two ways:

- inside ComfyUI the root is itself a package (``custom_nodes/<pack>``), so ours are
  ``<pack>.fish_core`` and ``<pack>.quant`` and ``quant`` must be reached relatively;
- for the CLI, tests and benches the root is on ``sys.path``, so both are top-level.

Modules of fish_core write ``from .siblings import quant``. quant never imports fish_core.
"""

if "." in __package__:  # "<pack>.fish_core": inside ComfyUI
    from .. import quant
else:  # "fish_core": the repository root is on sys.path
    import quant

__all__ = ["quant"]
