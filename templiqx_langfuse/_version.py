from templiqx_core import __version__

__all__ = ["DISTRIBUTION", "__version__"]

#: The distribution this package ships in: how it names itself to Langfuse.
DISTRIBUTION = "templiqx-langfuse"
