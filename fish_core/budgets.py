"""Budgets per request, in one place: what one request (a text, a script, a subtitle file, a
book chapter, a served speech request) may cost, whatever door it comes through (the CLI, the
Python API, the nodes, ``serve``). A leaf: it imports nothing of the pack; each limit is a named
constant with what it bounds, checked where the request is built (the error names the field and
the limit). docs/security.md lists them.
"""

# ---------------------------------------------------------------- pauses and answers
# One ``[pause:…]`` tag, seconds (``text.pauses``).
MAX_PAUSE_SECONDS = 60.0
# All ``[pause:…]`` tags of one request together, seconds: a text, a whole script (every turn),
# a whole subtitle file (every cue), a book chapter, a served request. The silence is held in
# memory as samples, so this bounds what a short input can ask for (``PauseError``).
MAX_PAUSE_TOTAL_SECONDS = 600.0
# The answer of one served request (``serve``: ``Limits.max_answer_seconds``), seconds of audio:
# speech and silence together, counted as it is sent; past it a whole answer is a 422 naming
# the text field and a stream ends (SSE: an error event). 130 bytes of text can ask for the
# pause budget's 600 s (50 MiB of WAV); this bounds what the rest of a request can add.
MAX_ANSWER_SECONDS = 1200.0

# ---------------------------------------------------------------- lexicons (``text.lexicon``)
# Characters of a lexicon typed into a node (the ``lexicon`` input of the speech nodes and Voice
# From Take): some ten thousand entries. A lexicon file (the CLI's and serve's ``--lexicon``,
# ``Lexicon.load``) is bounded by ``text.lexicon.MAX_ENTRIES`` entries of ``MAX_WORD``.
NODE_LEXICON_CHARS = 256 * 1024
# A respelled text is at most LEXICON_GROWTH times as long as the text it respells, plus one
# respelling (``text.lexicon.MAX_WORD`` characters, so that one long respelling of a short text
# fits): a lexicon cannot turn a short request into a long one.
LEXICON_GROWTH = 8
