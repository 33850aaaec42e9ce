"""fish_core: a pure-PyTorch engine for Fish Audio S2-Pro text-to-speech (no ComfyUI import).

Modules, in the order data flows: ``config`` → ``tokenizer`` → ``prompt`` → ``model`` /
``checkpoint`` → ``sampling`` → ``generate`` → ``codec`` → ``audio``; ``text`` plans long
text and scripts, ``voices`` stores reusable voices, ``synth.Synthesizer`` is the public API,
``cli`` the command line (``python -m fish_core``); ``serve`` is the HTTP service and
``remote`` the same API on remote engines (``Synthesizer.remote``).
"""

__version__ = "0.1.0"
