"""What one request may cost: limits every door (the CLI, Python, the nodes, ``serve``) holds
its input to, as named constants in one place. Each error that enforces one names the field and
the limit. A leaf: it imports nothing of the pack, and every layer may import it."""

# ---------------------------------------------------------------- lexicons (``text.lexicon``)
# Characters of a lexicon typed into a node (the ``lexicon`` input of the speech nodes and Voice
# From Take): some ten thousand entries. A lexicon file (the CLI's and serve's ``--lexicon``,
# ``Lexicon.load``) is bounded by ``text.lexicon.MAX_ENTRIES`` entries of ``MAX_WORD``.
NODE_LEXICON_CHARS = 256 * 1024
# A respelled text is at most LEXICON_GROWTH times as long as the text it respells, plus one
# respelling (``text.lexicon.MAX_WORD`` characters, so that one long respelling of a short text
# fits): a lexicon cannot turn a short request into a long one.
LEXICON_GROWTH = 8
