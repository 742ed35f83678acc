"""Text for language models that needs no download: runtimes/lm/text.py (the device's
benchmark builds its prompts from the same text, without torch)."""
from runtimes.lm.text import python_docs_text  # noqa: F401
