"""Audio in and out: reading, downmix, resampling, writing (``files``)."""
