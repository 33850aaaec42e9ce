"""The text front end: plan long text into batches (``plan``), speaker scripts (``script``), the
tokenizer wrapper (``tokenizer``) and the conversation → prompt ids encoder (``prompt``)."""
