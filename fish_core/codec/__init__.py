"""The RVQ audio codec: ``config``, ``layers``, ``transformer``, ``quantizer``, ``model``
(``Codec``: encode, exact chunked decode), ``checkpoint`` (``codec.pth``), ``files``."""
